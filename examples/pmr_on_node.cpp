// std::pmr containers built on a numarena node resource: a request-scoped pool whose every
// allocation lands on node 0 (or the node given), released all at once when the request ends.
//
//   ./example_pmr_on_node [node]
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <string>

#include "numarena/memory_resource.hpp"
#include "numarena/page_nodes.hpp"

int main(int argc, char** argv) {
  const int node = argc > 1 ? std::atoi(argv[1]) : 0;
  auto upstream = numarena::node_resource(node);
  if (!upstream.ok()) {
    std::fprintf(stderr, "node_resource(%d): %s\n", node,
                 std::string(upstream.status().message()).c_str());
    return 2;
  }
  std::pmr::unsynchronized_pool_resource request_pool(*upstream);
  std::pmr::vector<std::pmr::string> tokens(&request_pool);
  for (int i = 0; i < 10000; ++i) tokens.emplace_back("token-" + std::to_string(i));
  std::pmr::vector<float> logits(32000, 0.0f, &request_pool);
  auto pages = numarena::page_nodes(logits.data(), logits.size() * sizeof(float));
  std::printf("%zu tokens, %zu logits; logits pages on node %d: %zu of %zu\n", tokens.size(),
              logits.size(), node, pages.ok() ? pages->on(node) : 0,
              pages.ok() ? pages->total_pages : 0);
  return 0;
}
