// A program outside the numarena tree: proves that an installed numarena is usable through
// find_package(numarena) and through pkg-config (tests/install_consumer/run.sh).
#include <numarena/allocator.hpp>
#include <numarena/page_nodes.hpp>
#include <numarena/version.h>

#include <cstdio>

int main() {
  numarena::vector<int> v{numarena::allocator<int>(numarena::Policy::Bind(0))};
  v.assign(100000, 1);
  auto counts = numarena::page_nodes(v.data(), v.size() * sizeof(int));
  if (!counts.ok() || counts->on(0) != counts->total_pages) return 1;
  std::printf("consumer (numarena %s): %zu of %zu pages on node 0\n", NUMARENA_VERSION_STRING,
              counts->on(0), counts->total_pages);
  return 0;
}
