// numarena's figures in the Prometheus text exposition format (version 0.0.4).
//
// `ExpositionWriter` builds one scrape: each component contributes families through a small
// function of its own snapshot (`AppendArenaMetrics`, `AppendBudgetMetrics`,
// `AppendKvPoolMetrics`, ...), so no component knows about Prometheus and the format rules
// live in one place: metric and label names are checked, label values and HELP text are
// escaped, a family's samples are written together under one `# HELP` and one `# TYPE`
// line even when two contributors add to it, and counters end in `_total`.
// `RenderMetrics` gathers everything a process can report — the kernel's per-node numastat
// counters, node memory, devices and their distance from the process, the process's own
// per-node memory, and the given arenas, budget, KV pools and migrations — in one call,
// e.g. for a `/metrics` handler. Alerts on these series ship in
// cmake/prometheus/numarena-rules.yml. `Histogram` records a distribution (latencies) from
// any number of threads; `ExpositionWriter::HistogramSample` writes a snapshot of it as the
// cumulative `_bucket{le=...}`, `_sum` and `_count` series Prometheus expects.
//
//   numarena::MetricsSources sources;
//   sources.budget = &budget_snapshot;       // optional, like every source
//   sources.served_devices = {"0000:41:00.0"};
//   auto text = numarena::RenderMetrics(sources);
//   if (text.ok()) reply(200, "text/plain; version=0.0.4", *text);
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "numarena/status.hpp"

namespace numarena {

class Arena;
class Topology;
class SystemReader;
struct BudgetSnapshot;
struct KvPoolStats;
struct NodeNumaCounters;
struct PlacementReport;
struct ProcessNumaStat;

enum class MetricType : unsigned char { kCounter, kGauge, kHistogram };

// Label name/value pairs of one sample, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A histogram's state at one moment: `bucket_counts[i]` observations were <= `upper_bounds[i]`
// (cumulative, so never decreasing in i), `count` observations in all (the implicit +Inf
// bucket) and `sum` their total.
struct HistogramSnapshot {
  std::vector<double> upper_bounds;
  std::vector<std::uint64_t> bucket_counts;  // cumulative, one per upper bound
  std::uint64_t count = 0;
  double sum = 0;
};

// A Prometheus histogram: counts of observations per bucket, their number and their sum.
//
// Observe() may be called from any number of threads at once, and Snapshot() (a scrape)
// concurrently with them. Observe() takes no lock and allocates nothing: one binary search
// over the bounds, a relaxed atomic increment of its bucket and an atomic add to the sum.
// A snapshot taken while observations are in flight is consistent where Prometheus needs it
// to be: its buckets are cumulative and `count` equals the +Inf bucket (both are summed from
// the same per-bucket reads); `sum` may include or miss the in-flight observations. Moving a
// Histogram while another thread uses it is a race, as for any object.
//
//   auto bounds = numarena::ExponentialBuckets(0.001, 2, 14);    // 1 ms .. 8.192 s
//   auto ttft = numarena::Histogram::Create(*bounds);            // check .ok() of both
//   ttft->Observe(seconds);                                      // any thread
//   out.Family("server_ttft_seconds", MetricType::kHistogram, "Time to first token.");
//   out.HistogramSample({{"node", "0"}}, ttft->Snapshot());      // the scrape
class Histogram {
 public:
  // `upper_bounds`: the buckets' inclusive upper bounds, finite and strictly increasing, at
  // least one; the +Inf bucket is implicit. InvalidArgument naming the first bad bound
  // otherwise.
  [[nodiscard]] static StatusOr<Histogram> Create(std::vector<double> upper_bounds);

  Histogram(Histogram&&) noexcept = default;
  Histogram& operator=(Histogram&&) noexcept = default;

  // Counts `value` in the first bucket whose bound is >= value (+Inf when none) and adds it
  // to the sum. A NaN is ignored: it would turn the sum into NaN for the process's lifetime.
  void Observe(double value);
  [[nodiscard]] HistogramSnapshot Snapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  explicit Histogram(std::vector<double> upper_bounds);
  std::vector<double> upper_bounds_;
  // Per-bucket (not cumulative) counts, the last one the +Inf bucket; cumulated by Snapshot.
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;
  std::unique_ptr<std::atomic<double>> sum_;
};

// `count` bounds start, start*factor, start*factor^2, ... InvalidArgument unless start > 0,
// factor > 1, 1 <= count <= 1000 and the last bound is finite.
[[nodiscard]] StatusOr<std::vector<double>> ExponentialBuckets(double start, double factor,
                                                               int count);

class ExpositionWriter {
 public:
  // Declares (or re-opens) the family `name`. A name must match [a-zA-Z_:][a-zA-Z0-9_:]*;
  // a counter's name must end in "_total"; a histogram's may not end in "_bucket", "_sum",
  // "_count" or "_total" (its series add the first three). Re-declaring a family with
  // another type or help is an error reported by Finish().
  ExpositionWriter& Family(std::string_view name, MetricType type, std::string_view help);
  // A sample of the most recently declared family. Label names must match
  // [a-zA-Z_][a-zA-Z0-9_]* and not start with "__"; values may hold any bytes.
  ExpositionWriter& Sample(const MetricLabels& labels, double value);
  ExpositionWriter& Sample(double value) { return Sample({}, value); }
  // The samples of one histogram (the current family must be a kHistogram one, whose name
  // the series extend): `name_bucket{labels...,le="B"}` for every bound and le="+Inf",
  // cumulative, then `name_sum{labels}` and `name_count{labels}`. The labels may not include
  // "le". Sample() on a histogram family, this on another family, a snapshot whose bounds
  // are not increasing or whose counts are not cumulative: errors reported by Finish().
  ExpositionWriter& HistogramSample(const MetricLabels& labels, const HistogramSnapshot& h);
  ExpositionWriter& HistogramSample(const HistogramSnapshot& h) { return HistogramSample({}, h); }

  // The exposition text (families in first-declaration order, ending in a newline), or
  // InvalidArgument naming the first bad name or misuse.
  [[nodiscard]] StatusOr<std::string> Finish() const;

 private:
  struct FamilyData {
    std::string name;
    MetricType type;
    std::string help;
    std::vector<std::string> samples;  // rendered lines
  };
  // One rendered line of the current family: name + suffix, labels (then le="..." when
  // `le` is given), value. Records a bad label name in error_.
  std::string SeriesLine(std::string_view suffix, const MetricLabels& labels,
                         const std::string* le, double value);
  std::vector<FamilyData> families_;
  std::map<std::string, std::size_t> index_;
  FamilyData* current_ = nullptr;
  std::string error_;
};

// Prometheus's number format: integers without exponent, "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double value);

// Accumulates PlacementReports (first-touch correction) for the migration counters.
// Not thread-safe: guard it if several threads add.
struct MigrationTotals {
  std::uint64_t calls = 0;
  std::uint64_t pages_checked = 0;
  std::uint64_t already_local = 0;
  std::uint64_t moved = 0;
  std::uint64_t not_resident = 0;
  std::uint64_t failed = 0;
  void Add(const PlacementReport& report);
};

// ---- contributions -------------------------------------------------------------------
// Each appends its families to `out`. Names are listed in docs/metrics.md.

// numarena_kernel_numa_{hit,miss,foreign,interleave_hit,local_node,other_node}_total{node}
void AppendNodeCounterMetrics(ExpositionWriter& out,
                              const std::map<int, NodeNumaCounters>& counters);
// numarena_node_memory_{total,free}_bytes{node}, numarena_node_cpus{node},
// numarena_device_node{bus_id,kind} (-1: unknown), numarena_device_node_unknown{bus_id,kind}.
void AppendTopologyMetrics(ExpositionWriter& out, const Topology& topology);
// numarena_build_info{version} 1: which numarena serves the scrape.
void AppendBuildInfo(ExpositionWriter& out);
// Per command (/proc/PID/comm; "unknown" when unreadable), the processes of one command
// summed: numarena_processes{command} (how many), numarena_process_memory_bytes{command,node,kind},
// numarena_process_local_memory_ratio{command}, and for each served device (bus id):
// numarena_device_distance{command,bus_id,kind} — the largest SLIT distance between the
// device's node and the nodes the processes run on (10 = local, -1 = unknown) — and
// numarena_device_local_memory_ratio{command,bus_id,kind}. The labels name no pid, so a
// restarted server keeps its series.
void AppendProcessMetrics(ExpositionWriter& out, const Topology& topology,
                          const std::vector<ProcessNumaStat>& stats,
                          const std::vector<std::string>& served_devices);
// numarena_arena_{allocated,active,resident,mapped,committed,retained}_bytes{policy},
// numarena_arena_{fallbacks,refusals}_total{policy}.
void AppendArenaMetrics(ExpositionWriter& out, const std::vector<const Arena*>& arenas);
// numarena_budget_{capacity,usage,peak}_bytes{node}, numarena_budget_usage_ratio{node},
// numarena_budget_threshold_ratio{node,threshold}, numarena_budget_state{node,state},
// numarena_budget_numarena_bytes{node,priority}, numarena_budget_*_total{node}.
void AppendBudgetMetrics(ExpositionWriter& out, const BudgetSnapshot& budget);
// numarena_kv_blocks{pool,node,tier}, numarena_kv_slab_bytes{pool,node,tier},
// numarena_kv_spans{pool,state}, numarena_kv_*_total{pool}, numarena_kv_hot_hit_ratio{pool}.
void AppendKvPoolMetrics(ExpositionWriter& out, std::string_view pool, const KvPoolStats& kv);
// numarena_migration_{calls,pages_checked,pages_already_local,pages_moved,
// pages_not_resident,pages_failed}_total.
void AppendMigrationMetrics(ExpositionWriter& out, const MigrationTotals& totals);

// Everything to render; every member is optional.
struct MetricsSources {
  // Where kernel figures come from (null: the live system) and the machine (null:
  // Topology::system()).
  const SystemReader* reader = nullptr;
  const Topology* topology = nullptr;
  // "self" or a pid whose per-node memory to report; empty: none.
  std::string pid = "self";
  // Bus ids of the GPUs/NICs this process serves (for numarena_device_distance).
  std::vector<std::string> served_devices;
  std::vector<const Arena*> arenas;
  const BudgetSnapshot* budget = nullptr;
  std::vector<std::pair<std::string, const KvPoolStats*>> kv_pools;  // name, stats
  const MigrationTotals* migrations = nullptr;
};

// One scrape of everything in `sources`. Errors: discovery or kernel files (NotFound,
// DataLoss naming the file), or a malformed name (InvalidArgument, a bug).
[[nodiscard]] StatusOr<std::string> RenderMetrics(const MetricsSources& sources);

}  // namespace numarena
