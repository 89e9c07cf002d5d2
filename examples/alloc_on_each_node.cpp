// Allocates a buffer from each NUMA node's arena, writes it, and prints where the kernel
// put its pages (numarena::page_nodes) next to what node_of says.
//
//   $ example_alloc_on_each_node [MiB]     (default 8 MiB per node)
//   node 0: 8 MiB at 0x7f..., node_of 0, pages: node 0 = 2048 of 2048
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "numarena/arena.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"

int main(int argc, char** argv) {
  std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  if (mib == 0) {
    std::fprintf(stderr, "usage: %s [MiB per node, > 0]\n", argv[0]);
    return 2;
  }
  std::size_t bytes = mib << 20;
  auto topology = numarena::Topology::system();
  if (!topology.ok()) {
    std::fprintf(stderr, "topology: %s\n", topology.status().ToString().c_str());
    return 1;
  }
  int failures = 0;
  for (const auto& node : (*topology)->nodes()) {
    auto arena = numarena::Arena::ForNode(node.id);
    if (!arena.ok()) {
      std::printf("node %d: %s\n", node.id, arena.status().ToString().c_str());
      ++failures;
      continue;
    }
    auto buffer = (*arena)->try_allocate(bytes);
    if (!buffer.ok()) {
      std::printf("node %d: %s\n", node.id, buffer.status().ToString().c_str());
      ++failures;
      continue;
    }
    std::memset(*buffer, 0x42, bytes);  // fault the pages in: they land where bound
    auto counts = numarena::page_nodes(*buffer, bytes);
    std::string where;
    if (counts.ok()) {
      for (const auto& [n, pages] : counts->pages_on_node) {
        where += "node " + std::to_string(n) + " = " + std::to_string(pages) + " ";
      }
      where += "of " + std::to_string(counts->total_pages);
    } else {
      where = counts.status().ToString();
    }
    std::printf("node %d%s: %zu MiB at %p, node_of %d, pages: %s\n", node.id,
                node.memory_only() ? " (memory only)" : "", mib, *buffer,
                numarena::node_of(*buffer), where.c_str());
    numarena::deallocate(*buffer);
  }
  return failures == 0 ? 0 : 1;
}
