// absl::flat_hash_map with numarena::allocator: a per-node index (here: prefix hash -> block
// id, the shape of a KV-cache prefix table) whose buckets live on the node that reads it.
//
//   ./example_hash_map_on_node [node]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "numarena/allocator.hpp"

int main(int argc, char** argv) {
  const int node = argc > 1 ? std::atoi(argv[1]) : 0;
  using Entry = std::pair<const std::uint64_t, std::uint32_t>;
  using Index = absl::flat_hash_map<std::uint64_t, std::uint32_t, absl::Hash<std::uint64_t>,
                                    std::equal_to<std::uint64_t>, numarena::allocator<Entry>>;
  try {
    Index index(0, absl::Hash<std::uint64_t>(), std::equal_to<std::uint64_t>(),
                numarena::allocator<Entry>(numarena::Policy::Bind(node)));
    for (std::uint32_t block = 0; block < 100000; ++block) {
      index[0x9e3779b97f4a7c15ULL * (block + 1)] = block;
    }
    std::printf("%zu prefix entries on node %d (allocator policy %s); block of hash #500: %u\n",
                index.size(), node, index.get_allocator().policy().ToString().c_str(),
                index.at(0x9e3779b97f4a7c15ULL * 501));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hash_map_on_node: %s\n", e.what());
    return 2;
  }
  return 0;
}
