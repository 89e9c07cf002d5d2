// The machine's memory bandwidth and latency, node by node, like Intel MLC.
//
// `MeasureBandwidthMatrix` runs, for every (CPU node, memory node) pair the process may use,
// four streaming kernels (read, write, copy, triad) with worker threads pinned to the CPU
// node's allowed CPUs over arrays bound to the memory node before their first touch, and an
// idle load-to-use latency by a dependent pointer chase over a random cyclic permutation of
// the buffer's cache lines. Rows are nodes with CPUs the process may run on; columns are
// nodes whose memory it may use, memory-only nodes (CXL expanders) included.
//
// Absolute figures on a shared or virtualised machine drift from run to run, so every figure
// is also reported as a ratio measured in the same run: to the row's local cell (the
// local/remote penalty), to the best local figure of the machine, and to libc's own
// `memset`/`memcpy` over a warmed local buffer with the same threads (what the hardware gives
// code that is not ours). Those ratios are what a careful reader compares between machines.
//
//   numarena::MatrixOptions options;
//   options.seconds = 4;                       // timed budget of the whole matrix
//   auto matrix = numarena::MeasureBandwidthMatrix(options);
//   if (!matrix.ok()) { std::cerr << matrix.status() << "\n"; return 2; }
//   std::cout << numarena::RenderBandwidthTable(*matrix);
//   double penalty = matrix->rows[0].local_over_worst_remote[0];  // read, local / remote
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "numarena/status.hpp"

namespace numarena {

class Topology;

// The streaming kernels. Bytes are counted as STREAM does: what the kernel reads plus what
// it writes (read: 8 B per element, write: 8, copy: 16, triad: 24), without the extra
// read-for-ownership traffic a store may cause.
enum class BandwidthKernel : unsigned char {
  kRead,   // sum += a[i]
  kWrite,  // a[i] = x
  kCopy,   // a[i] = b[i]
  kTriad,  // a[i] = b[i] + s * c[i]
};
inline constexpr std::size_t kBandwidthKernelCount = 4;
inline constexpr std::array<BandwidthKernel, kBandwidthKernelCount> kBandwidthKernels = {
    BandwidthKernel::kRead, BandwidthKernel::kWrite, BandwidthKernel::kCopy,
    BandwidthKernel::kTriad};
// "read", "write", "copy", "triad".
const char* BandwidthKernelName(BandwidthKernel kernel);

// One figure per kernel, indexed by static_cast<std::size_t>(BandwidthKernel).
using PerKernel = std::array<double, kBandwidthKernelCount>;

// Where a measurement is, for a progress display: `step` is what starts now ("arrays on
// memory node 1", "cpu node 0 -> memory node 1: triad", ...), `done` of `total` timed figures
// are finished, `elapsed_seconds` since the start (setup included).
struct BandwidthProgress {
  std::string step;
  std::size_t done = 0;
  std::size_t total = 0;
  double elapsed_seconds = 0;
};

struct MatrixOptions {
  // Worker threads per CPU node; thread i is pinned to the node's i-th allowed CPU (modulo
  // their count). 0: one per allowed CPU of the node.
  int threads_per_node = 0;
  // Bytes of each array (triad uses three, copy two, read and write one; the pointer chase
  // runs over the first). 0: twice the last-level cache, at least 64 MiB, at most 1 GiB,
  // and at most an eighth of the smallest column's free memory.
  std::size_t buffer_bytes = 0;
  // Timed budget of the whole run in seconds, split evenly between the figures (fault-in
  // and setup are extra). Each figure runs at least one full pass over its arrays, and
  // starts no further pass the last one's duration says would end past its share, so the
  // timed part stays within `seconds` unless a single pass is longer than a figure's share.
  double seconds = 4.0;
  // Measure the idle latency of every cell (a single pinned thread chasing pointers).
  bool measure_latency = true;
  // Rows (CPU nodes) and columns (memory nodes) to measure; empty: all the process may use.
  std::vector<int> cpu_nodes;
  std::vector<int> memory_nodes;
  // Called on the measuring thread before each setup step and each figure, and once at the
  // end (step empty, done == total). Empty: no calls. It should return quickly (it runs
  // between timed figures, not inside them).
  std::function<void(const BandwidthProgress&)> progress;
};

// The smallest array `MeasureBandwidthMatrix` accepts.
inline constexpr std::size_t kMinBandwidthBufferBytes = std::size_t{64} << 10;
// The most worker threads per CPU node it accepts: far above any node's CPU count (threads
// beyond the CPUs only share them), and few enough to start on an ordinary system.
inline constexpr int kMaxBandwidthThreadsPerNode = 1024;
// The longest timed budget it accepts, in seconds (one day).
inline constexpr double kMaxBandwidthSeconds = 86400;

struct BandwidthCell {
  int memory_node = -1;
  int distance = -1;                   // SLIT distance CPU node -> memory node (10 = local)
  PerKernel bytes_per_second{};        // sum of the row's threads' best passes
  double latency_ns = 0;               // idle load-to-use latency (median batch); 0 if not measured
  PerKernel relative_to_local{};       // this / the row's local cell; 0 when the row has none
  PerKernel fraction_of_best_local{};  // this / the machine's best local figure
  // this / the machine's libc limit: write / memset, read, copy and triad / memcpy.
  PerKernel fraction_of_libc{};
  double latency_relative_to_local = 0;  // latency / the row's local latency (>= 1 remote)
  // Fraction of the arrays' pages the kernel placed on `memory_node` (move_pages), so a
  // figure is never silently measured on the wrong node.
  double pages_on_node_fraction = 0;
};

struct BandwidthRow {
  int cpu_node = -1;
  std::vector<int> cpus;  // allowed CPUs of the node the workers were pinned to
  int threads = 0;
  int local_column = -1;  // index in `cells` of the node's own memory, -1 when it has none
  // Local figure / the slowest remote figure of the row (latency: remote / local, so both
  // read "times worse"). 0 when the row has no local or no remote column.
  PerKernel local_over_worst_remote{};
  double worst_remote_latency_over_local = 0;
  // libc on the row's local memory (or its first column) with the row's threads.
  double memset_bytes_per_second = 0;
  double memcpy_bytes_per_second = 0;  // bytes read plus bytes written
  std::vector<BandwidthCell> cells;    // one per column, in `memory_nodes` order
};

// The machine's own limits, measured in the same run.
struct BandwidthLimits {
  PerKernel best_local{};              // best diagonal figure per kernel
  double best_local_latency_ns = 0;    // lowest diagonal latency
  double memset_bytes_per_second = 0;  // best row
  double memcpy_bytes_per_second = 0;  // best row
};

struct BandwidthMatrix {
  std::vector<int> cpu_nodes;     // row node ids, ascending
  std::vector<int> memory_nodes;  // column node ids, ascending (memory-only nodes included)
  std::vector<BandwidthRow> rows;
  BandwidthLimits limits;
  std::size_t buffer_bytes = 0;   // bytes of each array
  std::size_t llc_bytes = 0;      // last-level cache, 0 when unknown
  double seconds_per_figure = 0;  // timed budget of each figure
  double setup_seconds = 0;       // fault-in, placement checks, chase construction
  double measure_seconds = 0;     // timed part
  bool latency_measured = false;
  std::string timestamp_utc;       // "2026-11-30T12:00:00Z"
  std::vector<std::string> notes;  // one-node machine, buffer close to the LLC, ...

  // The cell of (cpu_node, memory_node), or nullptr.
  const BandwidthCell* cell(int cpu_node, int memory_node) const;
};

// Measures the matrix on the live machine (Topology::system()).
//
// InvalidArgument: threads_per_node < 0 or above kMaxBandwidthThreadsPerNode, buffer_bytes
// below kMinBandwidthBufferBytes, seconds not positive or above kMaxBandwidthSeconds, a
// requested node that is unknown, not allowed, without allowed CPUs (rows) or without memory
// (columns). ResourceExhausted: the three arrays (3 x buffer_bytes) do not fit in a column's
// free memory, or the system would not start the worker threads. Errors of
// mmap/mbind/sched_setaffinity keep their codes (PermissionDenied, FailedPrecondition, ...),
// with the call named in the message.
[[nodiscard]] StatusOr<BandwidthMatrix> MeasureBandwidthMatrix(const MatrixOptions& options = {});
// The same on a given topology, which must describe the live machine (its nodes are bound
// to and its CPUs pinned to).
[[nodiscard]] StatusOr<BandwidthMatrix> MeasureBandwidthMatrix(const Topology& topology,
                                                               const MatrixOptions& options);

// A plain-text report: one matrix per kernel (GB/s with % of best local and % of libc),
// the latency matrix, the per-row local/remote ratios, the limits and the notes.
std::string RenderBandwidthTable(const BandwidthMatrix& matrix);

// The whole result as one JSON object (schema "numarena.bandwidth/1"; bandwidths in
// bytes/s, latencies in ns, non-finite numbers as null).
std::string RenderBandwidthJson(const BandwidthMatrix& matrix);

}  // namespace numarena
