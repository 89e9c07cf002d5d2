// Unit tests of the bandwidth/latency matrix: the kernels compute what they claim, the chase
// is one cycle through every line, a small measurement on this machine is complete and
// consistent (positive figures, local ratio 1, pages on the right node), bad options are
// refused with a message, and the renderers produce a full table and well-formed JSON.
#include "numarena/ops/bandwidth.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "json_check.hpp"
#include "numarena/topology.hpp"
#include "ops/bandwidth_kernels.hpp"

namespace {

using numarena::BandwidthKernel;
using numarena::kBandwidthKernelCount;
namespace bi = numarena::bandwidth_internal;

numarena::MatrixOptions SmallOptions() {
  numarena::MatrixOptions options;
  options.buffer_bytes = std::size_t{1} << 20;
  options.seconds = 0.2;
  options.threads_per_node = 2;
  return options;
}

TEST_CASE("streaming kernels compute their results", "[bandwidth]") {
  constexpr std::size_t kCount = 64;
  std::vector<double> a(kCount), b(kCount), c(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    b[i] = static_cast<double>(i);
    c[i] = 2.0 * static_cast<double>(i);
  }
  bi::WriteKernel(a.data(), kCount, 7.5);
  for (double x : a) REQUIRE(x == 7.5);
  bi::CopyKernel(a.data(), b.data(), kCount);
  REQUIRE(a == b);
  bi::TriadKernel(a.data(), b.data(), c.data(), 3.0, kCount);
  for (std::size_t i = 0; i < kCount; ++i) REQUIRE(a[i] == b[i] + 3.0 * c[i]);

  std::vector<std::uint64_t> words(kCount);
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    words[i] = i * i + 1;
    expected += words[i];
  }
  REQUIRE(bi::ReadKernel(words.data(), kCount) == expected);
}

TEST_CASE("pointer chase is one cycle through every cache line", "[bandwidth]") {
  constexpr std::size_t kLines = 1000;
  std::vector<unsigned char> buffer(kLines * bi::kCacheLine + bi::kCacheLine);
  auto chase = bi::PointerChase::Build(buffer.data(), kLines * bi::kCacheLine);
  REQUIRE(chase.lines() == kLines);
  std::set<const void*> seen;
  const void* start = buffer.data();
  const void* p = start;
  for (std::size_t i = 0; i < kLines; ++i) {
    p = chase.Walk(1);
    REQUIRE(seen.insert(p).second);  // no line twice before the cycle closes
    auto offset = static_cast<const unsigned char*>(p) - buffer.data();
    REQUIRE(offset % bi::kCacheLine == 0);
    REQUIRE(offset < static_cast<std::ptrdiff_t>(kLines * bi::kCacheLine));
  }
  REQUIRE(p == start);  // back where it began after exactly kLines steps
}

TEST_CASE("node buffer is bound, populated and on its node", "[bandwidth]") {
  auto topology = numarena::Topology::system();
  REQUIRE(topology.ok());
  int node = (*topology)->nodes().front().id;
  auto buffer = numarena::AllocateOnNode(std::size_t{3} << 20, node);
  REQUIRE(buffer.ok());
  REQUIRE(buffer->size() == (std::size_t{3} << 20));
  REQUIRE(bi::FractionOnNode(*buffer) == 1.0);
  std::memset(buffer->data(), 1, buffer->size());
}

TEST_CASE("node buffer sizes that do not round up to whole pages are refused", "[bandwidth]") {
  auto topology = numarena::Topology::system();
  REQUIRE(topology.ok());
  int node = (*topology)->nodes().front().id;
  for (std::size_t bytes : {std::size_t{0}, SIZE_MAX, SIZE_MAX - 4094}) {
    INFO("bytes " << bytes);
    auto buffer = numarena::AllocateOnNode(bytes, node);
    REQUIRE(buffer.status().code() == absl::StatusCode::kInvalidArgument);
  }
  // Fits the address space once rounded, but no node has it: refused before mapping.
  auto huge = numarena::AllocateOnNode(SIZE_MAX - (std::size_t{2} << 20) + 2, node);
  REQUIRE(huge.status().code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("a small matrix on this machine is complete and consistent", "[bandwidth]") {
  auto topology = numarena::Topology::system();
  REQUIRE(topology.ok());
  auto matrix = numarena::MeasureBandwidthMatrix(SmallOptions());
  INFO((matrix.ok() ? std::string("ok") : std::string(matrix.status().message())));
  REQUIRE(matrix.ok());
  const numarena::BandwidthMatrix& m = *matrix;

  REQUIRE_FALSE(m.cpu_nodes.empty());
  REQUIRE_FALSE(m.memory_nodes.empty());
  REQUIRE(m.rows.size() == m.cpu_nodes.size());
  REQUIRE(m.buffer_bytes == (std::size_t{1} << 20));
  REQUIRE(m.latency_measured);
  REQUIRE(m.timestamp_utc.size() == 20);
  for (const numarena::BandwidthRow& row : m.rows) {
    REQUIRE(row.threads == 2);
    REQUIRE_FALSE(row.cpus.empty());
    REQUIRE(row.cells.size() == m.memory_nodes.size());
    REQUIRE(row.memset_bytes_per_second > 0);
    REQUIRE(row.memcpy_bytes_per_second > 0);
    for (std::size_t col = 0; col < row.cells.size(); ++col) {
      const numarena::BandwidthCell& c = row.cells[col];
      REQUIRE(c.memory_node == m.memory_nodes[col]);
      REQUIRE(c.pages_on_node_fraction == 1.0);
      REQUIRE(c.latency_ns > 0);
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        REQUIRE(c.bytes_per_second[k] > 0);
        REQUIRE(c.fraction_of_best_local[k] > 0);
        REQUIRE(c.fraction_of_libc[k] > 0);
      }
      REQUIRE(m.cell(row.cpu_node, c.memory_node) == &c);
    }
    if (row.local_column >= 0) {
      const numarena::BandwidthCell& local = row.cells[row.local_column];
      REQUIRE(local.memory_node == row.cpu_node);
      REQUIRE(local.distance == 10);
      REQUIRE(local.latency_relative_to_local == Approx(1.0));
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        REQUIRE(local.relative_to_local[k] == Approx(1.0));
        REQUIRE(local.fraction_of_best_local[k] <= 1.0);
      }
    }
  }
  for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) REQUIRE(m.limits.best_local[k] > 0);
  REQUIRE(m.limits.memset_bytes_per_second > 0);
  REQUIRE(m.limits.memcpy_bytes_per_second > 0);
  REQUIRE(m.limits.best_local_latency_ns > 0);
  REQUIRE(m.cell(-5, 0) == nullptr);

  const bool one_node = (*topology)->nodes().size() == 1;
  if (one_node) {
    REQUIRE(m.rows.size() == 1);
    REQUIRE(m.memory_nodes.size() == 1);
    // The only row is local: its figures are the best local ones, and it has no remote.
    for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
      REQUIRE(m.rows[0].cells[0].fraction_of_best_local[k] == Approx(1.0));
      REQUIRE(m.rows[0].local_over_worst_remote[k] == 0);
    }
    bool says_so = false;
    for (const std::string& note : m.notes) says_so |= note.find("one NUMA node") == 0;
    REQUIRE(says_so);
  }

  SECTION("the table shows every kernel, the latency, the limits and the notes") {
    std::string table = numarena::RenderBandwidthTable(m);
    for (BandwidthKernel k : numarena::kBandwidthKernels) {
      REQUIRE(table.find(std::string(numarena::BandwidthKernelName(k)) + " GB/s") !=
              std::string::npos);
    }
    REQUIRE(table.find("idle latency ns") != std::string::npos);
    REQUIRE(table.find("memset") != std::string::npos);
    REQUIRE(table.find("cpu " + std::to_string(m.cpu_nodes[0])) != std::string::npos);
    REQUIRE(table.find("mem " + std::to_string(m.memory_nodes[0])) != std::string::npos);
    if (one_node) REQUIRE(table.find("note: one NUMA node") != std::string::npos);
  }

  SECTION("the JSON is well-formed and complete") {
    std::string json = numarena::RenderBandwidthJson(m);
    auto doc = numarena::testing::ParseJson(json);
    INFO(json);
    REQUIRE(doc.has_value());
    REQUIRE(doc->at("schema").string == "numarena.bandwidth/1");
    REQUIRE(doc->at("kernels").array.size() == kBandwidthKernelCount);
    REQUIRE(doc->at("memory_nodes").array.size() == m.memory_nodes.size());
    REQUIRE(doc->at("limits").at("memset_bytes_per_second").number > 0);
    const auto& rows = doc->at("rows").array;
    REQUIRE(rows.size() == m.rows.size());
    for (const auto& row : rows) {
      REQUIRE(row.at("cells").array.size() == m.memory_nodes.size());
      for (const auto& cell : row.at("cells").array) {
        for (const char* kernel : {"read", "write", "copy", "triad"}) {
          REQUIRE(cell.at("bytes_per_second").at(kernel).number > 0);
          REQUIRE(cell.at("fraction_of_libc").at(kernel).is_number());
        }
        REQUIRE(cell.at("latency_ns").number > 0);
      }
    }
  }
}

TEST_CASE("the JSON carries any note text and non-finite figures as valid JSON", "[bandwidth]") {
  // Notes quote names from the machine (sysfs), so they may hold any bytes.
  numarena::BandwidthMatrix m;
  m.timestamp_utc = "2025-01-31T12:00:00Z";
  m.cpu_nodes = {0};
  m.memory_nodes = {0};
  m.notes = {"tab\there, quote \" and \\, bell \x07, bad UTF-8 \xff\xc3, ok \xc3\xa9"};
  numarena::BandwidthRow row;
  row.cpu_node = 0;
  row.cpus = {0, 1};
  row.threads = 2;
  row.local_column = 0;
  row.cells.resize(1);
  row.cells[0].memory_node = 0;
  row.cells[0].latency_ns = std::nan("");
  row.cells[0].bytes_per_second[0] = INFINITY;
  m.rows.push_back(row);
  const std::string json = numarena::RenderBandwidthJson(m);
  INFO(json);
  auto doc = numarena::testing::ParseJson(json);
  REQUIRE(doc.has_value());
  REQUIRE(doc->at("notes").array.at(0).string ==
          "tab\there, quote \" and \\, bell \x07, bad UTF-8 \xEF\xBF\xBD\xEF\xBF\xBD, ok \xc3\xa9");
  const auto& cell = doc->at("rows").array.at(0).at("cells").array.at(0);
  REQUIRE(cell.at("latency_ns").kind == numarena::testing::JsonValue::Kind::kNull);
  REQUIRE(cell.at("bytes_per_second").at("read").kind == numarena::testing::JsonValue::Kind::kNull);
  REQUIRE(json.back() == '\n');
}

TEST_CASE("arrays larger than a node's free memory are refused before any is made", "[bandwidth]") {
  for (std::size_t bytes : {std::size_t{1} << 50, SIZE_MAX / 2, SIZE_MAX - 63}) {
    auto options = SmallOptions();
    options.buffer_bytes = bytes;
    auto matrix = numarena::MeasureBandwidthMatrix(options);
    REQUIRE_FALSE(matrix.ok());
    INFO(matrix.status().message());
    CHECK(matrix.status().code() == absl::StatusCode::kResourceExhausted);
    CHECK(std::string(matrix.status().message()).find("three arrays of ") == 0);
    CHECK(std::string(matrix.status().message()).find(" free; ask for smaller arrays") !=
          std::string::npos);
  }
}

TEST_CASE("latency can be skipped", "[bandwidth]") {
  auto options = SmallOptions();
  options.measure_latency = false;
  options.threads_per_node = 1;
  auto matrix = numarena::MeasureBandwidthMatrix(options);
  REQUIRE(matrix.ok());
  REQUIRE_FALSE(matrix->latency_measured);
  REQUIRE(matrix->rows[0].cells[0].latency_ns == 0);
  REQUIRE(numarena::RenderBandwidthTable(*matrix).find("latency ns") == std::string::npos);
  REQUIRE(numarena::testing::ParseJson(numarena::RenderBandwidthJson(*matrix)).has_value());
}

TEST_CASE("bad options are refused with a message naming the problem", "[bandwidth]") {
  auto expect_invalid = [](const numarena::MatrixOptions& options, const std::string& words) {
    auto matrix = numarena::MeasureBandwidthMatrix(options);
    REQUIRE_FALSE(matrix.ok());
    REQUIRE(matrix.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(std::string(matrix.status().message()));
    REQUIRE(std::string(matrix.status().message()).find(words) != std::string::npos);
  };
  auto options = SmallOptions();
  options.threads_per_node = -1;
  expect_invalid(options, "threads_per_node is -1");
  options = SmallOptions();
  options.buffer_bytes = 4096;
  expect_invalid(options, "buffer_bytes is 4096");
  options = SmallOptions();
  options.threads_per_node = numarena::kMaxBandwidthThreadsPerNode + 1;
  expect_invalid(options, "threads_per_node is 1025; use 1 to 1024");
  options = SmallOptions();
  options.seconds = 0;
  expect_invalid(options, "seconds is 0");
  options = SmallOptions();
  options.seconds = 1e300;  // would overflow the conversion to clock ticks
  expect_invalid(options, "seconds is 1e+300");
  options = SmallOptions();
  options.seconds = INFINITY;
  expect_invalid(options, "seconds is inf");
  options = SmallOptions();
  options.cpu_nodes = {4242};
  expect_invalid(options, "CPU node 4242 is not an online node");
  options = SmallOptions();
  options.memory_nodes = {4242};
  expect_invalid(options, "memory node 4242 is not an online node");
}

}  // namespace

TEST_CASE("a figure starts no pass that would end past its share", "[bandwidth]") {
  using std::chrono::milliseconds;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // 10 ms before the deadline: a 20 ms pass would overrun it (the old rule, "while now <
  // deadline", started it); a 5 ms or exactly 10 ms pass fits.
  CHECK_FALSE(bi::AnotherPassFits(deadline - milliseconds(10), milliseconds(20), deadline));
  CHECK(bi::AnotherPassFits(deadline - milliseconds(10), milliseconds(5), deadline));
  CHECK(bi::AnotherPassFits(deadline - milliseconds(10), milliseconds(10), deadline));
  CHECK_FALSE(bi::AnotherPassFits(deadline, milliseconds(0) + std::chrono::nanoseconds(1),
                                  deadline));
}

TEST_CASE("progress is reported before every setup step and figure, then once at the end",
          "[bandwidth]") {
  auto topology = numarena::Topology::system();
  REQUIRE(topology.ok());
  numarena::MatrixOptions options = SmallOptions();
  const int node = (*topology)->nodes().front().id;
  options.cpu_nodes = {node};
  options.memory_nodes = {node};
  std::vector<numarena::BandwidthProgress> events;
  options.progress = [&events](const numarena::BandwidthProgress& p) { events.push_back(p); };
  auto matrix = numarena::MeasureBandwidthMatrix(**topology, options);
  REQUIRE(matrix.ok());
  // One row and one column: read, write, copy, triad, latency, libc memset and memcpy.
  const std::string cell = "cpu node " + std::to_string(node) + " -> memory node " +
                           std::to_string(node) + ": ";
  const std::vector<std::string> expected = {
      "arrays on memory node " + std::to_string(node) + " (3 x 1.0 MiB)",
      cell + "read", cell + "write", cell + "copy", cell + "triad", cell + "libc memset",
      cell + "libc memcpy",
      "pointer chase over memory node " + std::to_string(node) + "'s array",
      cell + "latency", ""};
  REQUIRE(events.size() == expected.size());
  std::size_t done = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    INFO(i << ": " << events[i].step);
    CHECK(events[i].step == expected[i]);
    CHECK(events[i].total == 7);
    CHECK(events[i].done == done);
    if (events[i].step.find(" -> ") != std::string::npos) ++done;  // a figure starts
    if (i > 0) CHECK(events[i].elapsed_seconds >= events[i - 1].elapsed_seconds);
  }
  CHECK(events.back().done == 7);
}
