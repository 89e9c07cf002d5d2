// The bandwidth/latency matrix on a real multi-node kernel (NUMA lab).
//
// Timings under QEMU's TCG mean nothing, but every code path of a multi-node matrix runs
// here: one row per CPU node, one column per memory node (the CXL-like memory-only node
// included, as a column only), workers pinned to each row's CPUs, arrays bound to each
// column with every page verified on its node by move_pages, the per-row local/remote
// ratios defined, and the table and JSON complete. Sizes are tiny: TCG is slow.
// lab-topologies: 2s cxl
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "json_check.hpp"
#include "lab_support.hpp"
#include "numarena/ops/bandwidth.hpp"

namespace numarena {
namespace {

TEST_CASE("the matrix covers every CPU node x memory node pair of the lab machine") {
  const auto& lab = lab::Expected();
  INFO("topology " << lab.name << ": " << lab.summary);
  std::vector<int> cpu_nodes, memory_nodes;
  for (const auto& node : lab.nodes) {
    if (!node.memory_only()) cpu_nodes.push_back(node.id);
    memory_nodes.push_back(node.id);
  }

  MatrixOptions options;
  options.buffer_bytes = std::size_t{1} << 20;
  options.seconds = 0.5;
  options.threads_per_node = 1;
  auto matrix = MeasureBandwidthMatrix(options);
  INFO((matrix.ok() ? std::string("ok") : std::string(matrix.status().message())));
  REQUIRE(matrix.ok());
  const BandwidthMatrix& m = *matrix;

  REQUIRE(m.cpu_nodes == cpu_nodes);
  REQUIRE(m.memory_nodes == memory_nodes);
  REQUIRE(m.rows.size() == cpu_nodes.size());
  for (const BandwidthRow& row : m.rows) {
    INFO("cpu node " << row.cpu_node);
    REQUIRE(row.cpus == lab.node(row.cpu_node).cpus);
    REQUIRE(row.cells.size() == memory_nodes.size());
    REQUIRE(row.local_column >= 0);
    REQUIRE(row.cells[row.local_column].memory_node == row.cpu_node);
    REQUIRE(row.memset_bytes_per_second > 0);
    REQUIRE(row.memcpy_bytes_per_second > 0);
    for (const BandwidthCell& c : row.cells) {
      INFO("memory node " << c.memory_node);
      // The arrays were on the column's node, page by page: the figure is of that node.
      REQUIRE(c.pages_on_node_fraction == 1.0);
      REQUIRE(c.distance == lab.node(row.cpu_node).distance_to.at(c.memory_node));
      REQUIRE(c.latency_ns > 0);
      REQUIRE(c.latency_relative_to_local > 0);
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        REQUIRE(c.bytes_per_second[k] > 0);
        REQUIRE(c.relative_to_local[k] > 0);
        REQUIRE(c.fraction_of_best_local[k] > 0);
        REQUIRE(c.fraction_of_libc[k] > 0);
      }
    }
    for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
      REQUIRE(row.cells[row.local_column].relative_to_local[k] == Approx(1.0));
      REQUIRE(row.local_over_worst_remote[k] > 0);  // every lab row has a remote column
    }
    REQUIRE(row.worst_remote_latency_over_local > 0);
  }
  for (const std::string& note : m.notes) REQUIRE(note.find("one NUMA node") == std::string::npos);

  const std::string table = RenderBandwidthTable(m);
  for (int node : memory_nodes) {
    REQUIRE(table.find("mem " + std::to_string(node)) != std::string::npos);
  }
  for (int node : cpu_nodes)
    REQUIRE(table.find("cpu " + std::to_string(node)) != std::string::npos);

  const std::string json = RenderBandwidthJson(m);
  auto doc = testing::ParseJson(json);
  INFO(json);
  REQUIRE(doc.has_value());
  REQUIRE(doc->at("rows").array.size() == cpu_nodes.size());
  for (const auto& row : doc->at("rows").array) {
    REQUIRE(row.at("cells").array.size() == memory_nodes.size());
    for (const auto& cell : row.at("cells").array) {
      REQUIRE(cell.at("pages_on_node_fraction").number == 1.0);
      for (const char* kernel : {"read", "write", "copy", "triad"}) {
        REQUIRE(cell.at("bytes_per_second").at(kernel).number > 0);
      }
    }
  }
}

TEST_CASE("a memory-only node cannot be a row, and a chosen sub-matrix is honoured") {
  const auto& lab = lab::Expected();
  MatrixOptions options;
  options.buffer_bytes = std::size_t{1} << 20;
  options.seconds = 0.1;
  options.threads_per_node = 1;
  options.measure_latency = false;
  for (const auto& node : lab.nodes) {
    if (!node.memory_only()) continue;
    options.cpu_nodes = {node.id};
    auto refused = MeasureBandwidthMatrix(options);
    REQUIRE_FALSE(refused.ok());
    REQUIRE(refused.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(refused.status().message()).find("only be a memory column") !=
            std::string::npos);
  }
  options.cpu_nodes = {lab.nodes.back().memory_only() ? lab.nodes.front().id : lab.nodes.back().id};
  options.memory_nodes = {lab.nodes.back().id};
  auto matrix = MeasureBandwidthMatrix(options);
  REQUIRE(matrix.ok());
  REQUIRE(matrix->rows.size() == 1);
  REQUIRE(matrix->rows[0].cpu_node == options.cpu_nodes[0]);
  REQUIRE(matrix->memory_nodes == options.memory_nodes);
  REQUIRE(matrix->rows[0].cells[0].pages_on_node_fraction == 1.0);
}

}  // namespace
}  // namespace numarena
