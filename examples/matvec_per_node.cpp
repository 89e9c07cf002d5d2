// A matrix-vector product per node with numarena::allocator: each node gets its own copy of
// the matrix in a std::vector whose pages are on that node, and a worker pinned to that
// node's CPUs multiplies it. This is the "replicate read-only weights per node" pattern
// that keeps every weight read local.
//
//   ./example_matvec_per_node [rows] [cols]
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "numarena/allocator.hpp"
#include "numarena/page_nodes.hpp"
#include "numarena/topology.hpp"

int main(int argc, char** argv) {
  const std::size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  const std::size_t cols = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1024;
  auto topology = numarena::Topology::system();
  if (!topology.ok()) {
    std::fprintf(stderr, "topology: %s\n", std::string(topology.status().message()).c_str());
    return 2;
  }
  for (const numarena::NodeInfo& node : (*topology)->nodes()) {
    if (!(*topology)->memory_allowed(node.id)) continue;
    numarena::allocator<float> on_node(numarena::Policy::Bind(node.id));
    numarena::vector<float> matrix(rows * cols, 0.0f, on_node);
    numarena::vector<float> x(cols, 1.0f, on_node);
    numarena::vector<float> y(rows, 0.0f, on_node);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) matrix[r * cols + c] = float((r + c) % 7);
    }
    auto multiply = [&] {
      for (std::size_t r = 0; r < rows; ++r) {
        float sum = 0.0f;
        for (std::size_t c = 0; c < cols; ++c) sum += matrix[r * cols + c] * x[c];
        y[r] = sum;
      }
    };
    // Memory-only nodes (CXL) have no CPUs: run there from the calling thread.
    if (!node.cpus.empty()) {
      std::thread worker(multiply);
      worker.join();
    } else {
      multiply();
    }
    auto pages = numarena::page_nodes(matrix.data(), matrix.size() * sizeof(float));
    std::printf("node %d: y[0]=%.0f y[%zu]=%.0f, matrix pages on node %d: %zu of %zu\n", node.id,
                y[0], rows - 1, y[rows - 1], node.id, pages.ok() ? pages->on(node.id) : 0,
                pages.ok() ? pages->total_pages : 0);
  }
  return 0;
}
