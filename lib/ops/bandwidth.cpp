// The node x node bandwidth and latency matrix (see bandwidth.hpp).
//
// The plan: columns outermost, so only one memory node's arrays exist at a time (three
// arrays of `buffer_bytes`, bound and populated before any timing). For each column every
// row runs the four kernels with its pinned workers; the row's local column also gets libc's
// memset and memcpy (the row's hardware limit); then the first array becomes a pointer chase
// and every row measures its idle latency with one pinned thread. Derived ratios are
// computed at the end, from figures all taken in this run.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "numarena/format.hpp"
#include "numarena/ops/bandwidth.hpp"
#include "numarena/topology.hpp"
#include "ops/bandwidth_kernels.hpp"
#include "ops/ops_common.hpp"
#include "os/os.hpp"

namespace numarena {

const char* BandwidthKernelName(BandwidthKernel kernel) {
  switch (kernel) {
    case BandwidthKernel::kRead:
      return "read";
    case BandwidthKernel::kWrite:
      return "write";
    case BandwidthKernel::kCopy:
      return "copy";
    case BandwidthKernel::kTriad:
      return "triad";
  }
  return "?";
}

const BandwidthCell* BandwidthMatrix::cell(int cpu_node, int memory_node) const {
  for (const BandwidthRow& row : rows) {
    if (row.cpu_node != cpu_node) continue;
    for (const BandwidthCell& c : row.cells) {
      if (c.memory_node == memory_node) return &c;
    }
  }
  return nullptr;
}

namespace {

using bandwidth_internal::kDoublesPerLine;
using bandwidth_internal::PointerChase;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kDefaultMinBuffer = 64 * kMiB;
constexpr std::size_t kDefaultMaxBuffer = 1024 * kMiB;

// Results written through volatile stores so the optimiser must compute them.
volatile std::uint64_t g_read_sink = 0;
const void* volatile g_chase_sink = nullptr;

// What the workers of one figure do on their slice of the arrays.
enum class Work { kRead, kWrite, kCopy, kTriad, kMemset, kMemcpy };

Work WorkOf(BandwidthKernel kernel) {
  switch (kernel) {
    case BandwidthKernel::kRead:
      return Work::kRead;
    case BandwidthKernel::kWrite:
      return Work::kWrite;
    case BandwidthKernel::kCopy:
      return Work::kCopy;
    case BandwidthKernel::kTriad:
      return Work::kTriad;
  }
  return Work::kRead;
}

struct Arrays {
  double* a = nullptr;
  double* b = nullptr;
  double* c = nullptr;
  std::size_t count = 0;  // doubles per array, a multiple of kDoublesPerLine
};

struct RowPlan {
  int node = -1;
  std::vector<int> cpus;
  int threads = 0;
};

struct Plan {
  std::vector<RowPlan> rows;
  std::vector<int> columns;
  std::size_t buffer_bytes = 0;
  std::size_t llc_bytes = 0;
};

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

StatusOr<Plan> MakePlan(const Topology& topology, const MatrixOptions& options) {
  if (options.threads_per_node < 0 || options.threads_per_node > kMaxBandwidthThreadsPerNode) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threads_per_node is ", options.threads_per_node, "; use 1 to ",
        kMaxBandwidthThreadsPerNode, ", or 0 for one thread per allowed CPU of the node"));
  }
  // The upper bound also keeps the conversion to clock ticks in range.
  if (!(options.seconds > 0) || !(options.seconds <= kMaxBandwidthSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("seconds is ", options.seconds, "; give the timed budget as a number above 0 ",
                     "and at most ", kMaxBandwidthSeconds, " (one day)"));
  }
  if (options.buffer_bytes != 0 && options.buffer_bytes < kMinBandwidthBufferBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer_bytes is ", options.buffer_bytes, "; use at least ", kMinBandwidthBufferBytes,
        " (64 KiB), or 0 for the default (twice the last-level cache)"));
  }
  std::vector<int> allowed_cpus = topology.process().allowed_cpus;
  std::sort(allowed_cpus.begin(), allowed_cpus.end());
  auto allowed_cpus_of = [&](const NodeInfo& node) {
    std::vector<int> cpus = node.cpus;
    std::sort(cpus.begin(), cpus.end());
    return allowed_cpus.empty() ? cpus : Intersect(cpus, allowed_cpus);
  };

  Plan plan;
  std::vector<int> row_ids = options.cpu_nodes;
  if (row_ids.empty()) {
    for (const NodeInfo& node : topology.nodes()) {
      if (!allowed_cpus_of(node).empty()) row_ids.push_back(node.id);
    }
  }
  std::sort(row_ids.begin(), row_ids.end());
  row_ids.erase(std::unique(row_ids.begin(), row_ids.end()), row_ids.end());
  for (int id : row_ids) {
    const NodeInfo* node = topology.node(id);
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("CPU node ", id,
                                                     " is not an online node; online nodes are ",
                                                     absl::StrJoin(topology.node_ids(), ",")));
    }
    RowPlan row{id, allowed_cpus_of(*node), 0};
    if (row.cpus.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", id,
                       " has no CPU this process may run on (memory-only node, or excluded by "
                       "affinity/cpuset); it can only be a memory column"));
    }
    row.threads =
        options.threads_per_node > 0 ? options.threads_per_node : static_cast<int>(row.cpus.size());
    plan.rows.push_back(std::move(row));
  }
  if (plan.rows.empty()) {
    return absl::FailedPreconditionError("no node has a CPU this process may run on");
  }

  plan.columns = options.memory_nodes;
  if (plan.columns.empty()) {
    for (const NodeInfo& node : topology.nodes()) {
      if (topology.memory_allowed(node.id) && node.mem_total_bytes > 0) {
        plan.columns.push_back(node.id);
      }
    }
  }
  std::sort(plan.columns.begin(), plan.columns.end());
  plan.columns.erase(std::unique(plan.columns.begin(), plan.columns.end()), plan.columns.end());
  for (int id : plan.columns) {
    const NodeInfo* node = topology.node(id);
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("memory node ", id,
                                                     " is not an online node; online nodes are ",
                                                     absl::StrJoin(topology.node_ids(), ",")));
    }
    if (!topology.memory_allowed(id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("memory node ", id, " is outside this process's allowed memory nodes (",
                       absl::StrJoin(topology.process().allowed_mem_nodes, ","),
                       "); pick one of those or widen the cpuset"));
    }
  }
  if (plan.columns.empty()) {
    return absl::FailedPreconditionError("no node has memory this process may use");
  }

  plan.llc_bytes = bandwidth_internal::LastLevelCacheBytes();
  plan.buffer_bytes = options.buffer_bytes;
  if (plan.buffer_bytes == 0) {
    plan.buffer_bytes = std::clamp(2 * plan.llc_bytes, kDefaultMinBuffer, kDefaultMaxBuffer);
    // Three arrays must fit comfortably beside everything else on the smallest column.
    for (int id : plan.columns) {
      std::uint64_t free_bytes = topology.node(id)->mem_free_bytes;
      if (free_bytes > 0)
        plan.buffer_bytes = std::min<std::size_t>(plan.buffer_bytes, free_bytes / 8);
    }
    plan.buffer_bytes = std::max(plan.buffer_bytes, kMinBandwidthBufferBytes);
  }
  // Whole cache lines per array.
  plan.buffer_bytes -= plan.buffer_bytes % bandwidth_internal::kCacheLine;
  // The three arrays are bound to each column in turn: refuse now, with the sizes, rather
  // than fail (or push the node into reclaim) while faulting them in.
  std::size_t arrays_bytes = 0;
  if (__builtin_mul_overflow(plan.buffer_bytes, std::size_t{3}, &arrays_bytes)) {
    arrays_bytes = SIZE_MAX;
  }
  for (int id : plan.columns) {
    const std::uint64_t free_bytes = topology.node(id)->mem_free_bytes;
    if (free_bytes > 0 && arrays_bytes > free_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "three arrays of ", FormatBytes(plan.buffer_bytes), " need ", FormatBytes(arrays_bytes),
          " on memory node ", id, ", which has ", FormatBytes(free_bytes),
          " free; ask for smaller arrays (buffer_bytes), or leave it 0 for a size that fits"));
    }
  }
  return plan;
}

std::size_t BytesPerElement(Work work) {
  switch (work) {
    case Work::kRead:
    case Work::kWrite:
    case Work::kMemset:
      return 8;
    case Work::kCopy:
    case Work::kMemcpy:
      return 16;
    case Work::kTriad:
      return 24;
  }
  return 8;
}

// Runs `work` with `threads` workers pinned round-robin to `cpus`, each over its own slice
// of the arrays, for `seconds` (at least one full pass each). Returns the aggregate rate in
// bytes/s: the sum of every worker's best pass (STREAM's best-of convention; on a shared
// machine the best pass is the one least disturbed by other tenants). The workers start
// together and run for the same budget, so their best passes largely overlap.
StatusOr<double> RunStreaming(Work work, const Arrays& arrays, const std::vector<int>& cpus,
                              int threads, double seconds) {
  std::barrier start(threads);
  std::vector<double> rates(threads, 0.0);
  std::vector<Status> statuses(threads);
  std::vector<std::uint64_t> sinks(threads, 0);
  const std::size_t lines = arrays.count / kDoublesPerLine;
  const auto budget =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  workers.reserve(threads);
  std::atomic<bool> abandoned{false};  // set when not every worker could start
  for (int t = 0; t < threads; ++t) {
    auto started = ops::StartThread("bandwidth worker", t, threads, [&, t] {
      const int cpu[] = {cpus[static_cast<std::size_t>(t) % cpus.size()]};
      statuses[t] = os::SetThreadAffinity(cpu);
      const std::size_t first = lines * t / threads * kDoublesPerLine;
      const std::size_t last = lines * (t + 1) / threads * kDoublesPerLine;
      const std::size_t count = last - first;
      start.arrive_and_wait();
      if (abandoned.load(std::memory_order_relaxed) || !statuses[t].ok() || count == 0) return;
      double* a = arrays.a + first;
      const double* b = arrays.b + first;
      const double* c = arrays.c + first;
      const std::uint64_t pass_bytes = count * BytesPerElement(work);
      std::uint64_t sink = 0;
      double best_pass_seconds = 0;
      unsigned pass = 0;
      const auto deadline = Clock::now() + budget;
      auto now = Clock::now();
      Clock::duration pass_time{};
      do {
        ++pass;
        const auto pass_begin = now;
        switch (work) {
          case Work::kRead:
            sink +=
                bandwidth_internal::ReadKernel(reinterpret_cast<const std::uint64_t*>(a), count);
            break;
          case Work::kWrite:
            bandwidth_internal::WriteKernel(a, count, 1.0 + pass);
            break;
          case Work::kCopy:
            bandwidth_internal::CopyKernel(a, b, count);
            break;
          case Work::kTriad:
            bandwidth_internal::TriadKernel(a, b, c, 3.0, count);
            break;
          case Work::kMemset:
            bandwidth_internal::LibcMemset(a, static_cast<int>(pass & 0x7F) | 1,
                                           count * sizeof(double));
            break;
          case Work::kMemcpy:
            bandwidth_internal::LibcMemcpy(a, b, count * sizeof(double));
            break;
        }
        now = Clock::now();
        pass_time = now - pass_begin;
        const double seconds = std::chrono::duration<double>(pass_time).count();
        if (pass == 1 || seconds < best_pass_seconds) best_pass_seconds = seconds;
        // `bandwidth --bytes 512M` measured 4.2 s of its 4 s budget when a pass could start
        // just before the deadline; 4.0 s with this rule.
      } while (bandwidth_internal::AnotherPassFits(now, pass_time, deadline));
      rates[t] = static_cast<double>(pass_bytes) / std::max(best_pass_seconds, 1e-9);
      sinks[t] = sink;
    });
    if (!started.ok()) {
      // The workers already running wait at `start` for all `threads`: arrive for the ones
      // that never will, so they wake, see `abandoned` and return.
      abandoned.store(true, std::memory_order_relaxed);
      (void)start.arrive(threads - t);
      for (std::thread& worker : workers) worker.join();
      return started.status();
    }
    workers.push_back(*std::move(started));
  }
  for (std::thread& worker : workers) worker.join();
  for (int t = 0; t < threads; ++t) {
    if (!statuses[t].ok()) {
      return Status(statuses[t].code(),
                    absl::StrCat("pinning bandwidth worker ", t, ": ", statuses[t].message()));
    }
  }
  // The read sums are kept alive through a volatile store: the loads cannot be elided.
  std::uint64_t total_sink = 0;
  for (std::uint64_t s : sinks) total_sink += s;
  g_read_sink = total_sink;
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

// Idle load-to-use latency in ns: one thread on `cpu` follows the chase for `seconds` in
// batches and reports the median batch's time per step.
StatusOr<double> RunLatency(PointerChase chase, int cpu, double seconds) {
  Status status;
  double latency = 0;
  auto worker = ops::StartThread("latency thread", 0, 1, [&] {
    const int cpus[] = {cpu};
    status = os::SetThreadAffinity(cpus);
    if (!status.ok()) return;
    // Warm the TLB and the chase's first steps, then time batches until the budget is spent.
    g_chase_sink = chase.Walk(std::min<std::size_t>(chase.lines(), 1 << 16));
    // The median batch: a batch during which the thread was preempted is an outlier on
    // a shared machine, and so is one that happened to find its lines cached.
    constexpr std::size_t kBatch = 1 << 12;
    std::vector<double> batch_ns;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
    auto now = Clock::now();
    do {
      const auto batch_begin = now;
      g_chase_sink = chase.Walk(kBatch);
      now = Clock::now();
      batch_ns.push_back(std::chrono::duration<double, std::nano>(now - batch_begin).count() /
                         static_cast<double>(kBatch));
    } while (now < deadline);
    std::nth_element(batch_ns.begin(), batch_ns.begin() + batch_ns.size() / 2, batch_ns.end());
    latency = batch_ns[batch_ns.size() / 2];
  });
  if (!worker.ok()) return worker.status();
  worker->join();
  if (!status.ok()) {
    return Status(status.code(), absl::StrCat("pinning latency thread: ", status.message()));
  }
  return latency;
}

double Ratio(double numerator, double denominator) {
  return denominator > 0 ? numerator / denominator : 0;
}

// Fills every derived figure (ratios, limits, notes) from the measured ones.
void Derive(BandwidthMatrix& m) {
  BandwidthLimits& limits = m.limits;
  bool any_local = false;
  for (const BandwidthRow& row : m.rows) any_local |= row.local_column >= 0;
  for (const BandwidthRow& row : m.rows) {
    limits.memset_bytes_per_second =
        std::max(limits.memset_bytes_per_second, row.memset_bytes_per_second);
    limits.memcpy_bytes_per_second =
        std::max(limits.memcpy_bytes_per_second, row.memcpy_bytes_per_second);
    for (std::size_t col = 0; col < row.cells.size(); ++col) {
      // Without any local cell (all CPU nodes memoryless) the best cell is the best local.
      if (any_local && static_cast<int>(col) != row.local_column) continue;
      const BandwidthCell& c = row.cells[col];
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        limits.best_local[k] = std::max(limits.best_local[k], c.bytes_per_second[k]);
      }
      if (c.latency_ns > 0 &&
          (limits.best_local_latency_ns == 0 || c.latency_ns < limits.best_local_latency_ns)) {
        limits.best_local_latency_ns = c.latency_ns;
      }
    }
  }
  for (BandwidthRow& row : m.rows) {
    const BandwidthCell* local = row.local_column >= 0 ? &row.cells[row.local_column] : nullptr;
    PerKernel worst_remote{};
    double worst_remote_latency = 0;
    bool has_remote = false;
    for (std::size_t col = 0; col < row.cells.size(); ++col) {
      BandwidthCell& c = row.cells[col];
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        const double bw = c.bytes_per_second[k];
        c.relative_to_local[k] = local ? Ratio(bw, local->bytes_per_second[k]) : 0;
        c.fraction_of_best_local[k] = Ratio(bw, limits.best_local[k]);
        c.fraction_of_libc[k] = Ratio(bw, kBandwidthKernels[k] == BandwidthKernel::kWrite
                                              ? limits.memset_bytes_per_second
                                              : limits.memcpy_bytes_per_second);
      }
      c.latency_relative_to_local = local ? Ratio(c.latency_ns, local->latency_ns) : 0;
      if (static_cast<int>(col) == row.local_column) continue;
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        worst_remote[k] =
            has_remote ? std::min(worst_remote[k], c.bytes_per_second[k]) : c.bytes_per_second[k];
      }
      worst_remote_latency = std::max(worst_remote_latency, c.latency_ns);
      has_remote = true;
    }
    if (local != nullptr && has_remote) {
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        row.local_over_worst_remote[k] = Ratio(local->bytes_per_second[k], worst_remote[k]);
      }
      row.worst_remote_latency_over_local = Ratio(worst_remote_latency, local->latency_ns);
    }
  }

  if (m.rows.size() == 1 && m.memory_nodes.size() == 1) {
    m.notes.push_back(absl::StrCat(
        "one NUMA node (", m.cpu_nodes[0],
        "): the matrix is 1x1, local memory only; there is no remote memory to compare "
        "against, so the local/remote ratios are not defined (reported as 0)"));
  }
  if (m.llc_bytes > 0 && m.buffer_bytes < 2 * m.llc_bytes) {
    m.notes.push_back(absl::StrCat("each array is ", FormatBytes(m.buffer_bytes),
                                   ", less than twice the last-level cache (",
                                   FormatBytes(m.llc_bytes),
                                   "): part of the traffic may be served by the cache, so "
                                   "figures can exceed memory bandwidth"));
  }
  for (const BandwidthRow& row : m.rows) {
    if (row.threads > static_cast<int>(row.cpus.size())) {
      m.notes.push_back(absl::StrCat("CPU node ", row.cpu_node, ": ", row.threads,
                                     " threads share ", row.cpus.size(), " allowed CPU(s)"));
    }
    for (const BandwidthCell& c : row.cells) {
      if (c.pages_on_node_fraction < 0.999) {
        m.notes.push_back(absl::StrCat("only ", FormatPercent(c.pages_on_node_fraction),
                                       " of the pages of node ", c.memory_node,
                                       "'s arrays were on node ", c.memory_node));
        break;
      }
    }
  }
}

}  // namespace

StatusOr<BandwidthMatrix> MeasureBandwidthMatrix(const Topology& topology,
                                                 const MatrixOptions& options) {
  auto plan = MakePlan(topology, options);
  if (!plan.ok()) return plan.status();

  BandwidthMatrix m;
  m.timestamp_utc = ops::UtcNow();
  m.buffer_bytes = plan->buffer_bytes;
  m.llc_bytes = plan->llc_bytes;
  m.latency_measured = options.measure_latency;
  m.memory_nodes = plan->columns;
  for (const RowPlan& r : plan->rows) {
    m.cpu_nodes.push_back(r.node);
    BandwidthRow row;
    row.cpu_node = r.node;
    row.cpus = r.cpus;
    row.threads = r.threads;
    for (std::size_t col = 0; col < plan->columns.size(); ++col) {
      BandwidthCell c;
      c.memory_node = plan->columns[col];
      c.distance = topology.distance(r.node, c.memory_node);
      if (c.memory_node == r.node) row.local_column = static_cast<int>(col);
      row.cells.push_back(c);
    }
    m.rows.push_back(std::move(row));
  }
  const std::size_t rows = m.rows.size();
  const std::size_t figures =
      rows * plan->columns.size() * (kBandwidthKernelCount + (options.measure_latency ? 1 : 0)) +
      rows * 2;
  m.seconds_per_figure = options.seconds / static_cast<double>(figures);

  const auto started = Clock::now();
  std::size_t done = 0;
  auto report = [&](std::string step) {
    if (!options.progress) return;
    options.progress(BandwidthProgress{
        std::move(step), done, figures,
        std::chrono::duration<double>(Clock::now() - started).count()});
  };
  auto figure = [&](std::size_t r, int node, const char* what) {
    report(absl::StrCat("cpu node ", m.rows[r].cpu_node, " -> memory node ", node, ": ", what));
    ++done;
  };
  Clock::duration setup{0};
  Clock::duration measure{0};
  for (std::size_t col = 0; col < plan->columns.size(); ++col) {
    const int node = plan->columns[col];
    report(absl::StrCat("arrays on memory node ", node, " (3 x ", FormatBytes(plan->buffer_bytes),
                        ")"));
    auto setup_begin = Clock::now();
    NodeBuffer buffers[3];
    double on_node = 1;
    for (NodeBuffer& buffer : buffers) {
      auto created = AllocateOnNode(plan->buffer_bytes, node);
      if (!created.ok()) {
        return Status(created.status().code(), absl::StrCat("arrays on memory node ", node, ": ",
                                                            created.status().message()));
      }
      buffer = std::move(*created);
      on_node = std::min(on_node, bandwidth_internal::FractionOnNode(buffer));
    }
    auto doubles = [](const NodeBuffer& buffer) { return static_cast<double*>(buffer.data()); };
    Arrays arrays{doubles(buffers[0]), doubles(buffers[1]), doubles(buffers[2]),
                  plan->buffer_bytes / sizeof(double)};
    auto measure_begin = Clock::now();
    setup += measure_begin - setup_begin;

    for (std::size_t r = 0; r < rows; ++r) {
      BandwidthRow& row = m.rows[r];
      BandwidthCell& c = row.cells[col];
      c.pages_on_node_fraction = on_node;
      for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
        figure(r, node, BandwidthKernelName(kBandwidthKernels[k]));
        auto rate = RunStreaming(WorkOf(kBandwidthKernels[k]), arrays, row.cpus, row.threads,
                                 m.seconds_per_figure);
        if (!rate.ok()) return rate.status();
        c.bytes_per_second[k] = *rate;
      }
      // libc's limit on the row's own memory, or on the first column when it has none.
      const bool limit_column =
          row.local_column >= 0 ? row.local_column == static_cast<int>(col) : col == 0;
      if (limit_column) {
        figure(r, node, "libc memset");
        auto memset_rate =
            RunStreaming(Work::kMemset, arrays, row.cpus, row.threads, m.seconds_per_figure);
        if (!memset_rate.ok()) return memset_rate.status();
        figure(r, node, "libc memcpy");
        auto memcpy_rate =
            RunStreaming(Work::kMemcpy, arrays, row.cpus, row.threads, m.seconds_per_figure);
        if (!memcpy_rate.ok()) return memcpy_rate.status();
        row.memset_bytes_per_second = *memset_rate;
        row.memcpy_bytes_per_second = *memcpy_rate;
      }
    }
    measure += Clock::now() - measure_begin;

    if (options.measure_latency) {
      report(absl::StrCat("pointer chase over memory node ", node, "'s array"));
      auto chase_begin = Clock::now();
      PointerChase chase = PointerChase::Build(buffers[0].data(), plan->buffer_bytes);
      auto chase_measure_begin = Clock::now();
      setup += chase_measure_begin - chase_begin;
      for (std::size_t r = 0; r < rows; ++r) {
        figure(r, node, "latency");
        auto latency = RunLatency(chase, m.rows[r].cpus.front(), m.seconds_per_figure);
        if (!latency.ok()) return latency.status();
        m.rows[r].cells[col].latency_ns = *latency;
      }
      measure += Clock::now() - chase_measure_begin;
    }
  }
  report("");
  m.setup_seconds = std::chrono::duration<double>(setup).count();
  m.measure_seconds = std::chrono::duration<double>(measure).count();
  Derive(m);
  return m;
}

StatusOr<BandwidthMatrix> MeasureBandwidthMatrix(const MatrixOptions& options) {
  auto topology = Topology::system();
  if (!topology.ok()) return topology.status();
  return MeasureBandwidthMatrix(**topology, options);
}

}  // namespace numarena
