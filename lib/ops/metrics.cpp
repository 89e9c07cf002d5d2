// The Prometheus exposition writer and the kernel/topology/process contributions
// (metrics.hpp). The component contributions (arenas, budget, KV pools, migrations) are in
// metrics_components.cpp.
#include "numarena/ops/metrics.hpp"

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "numarena/ops/stat.hpp"
#include "numarena/topology.hpp"
#include "numarena/version.h"
#include "ops/ops_common.hpp"

namespace numarena {
namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool ValidMetricName(std::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return IsNameStart(c) || IsDigit(c) || c == ':'; });
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0]) || name.substr(0, 2) == "__") return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameStart(c) || IsDigit(c); });
}

// HELP text escapes backslash and newline; label values also the double quote.
std::string Escape(std::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<std::int64_t>(value));
  }
  // The shortest %g text (1 to 17 significant digits) that reads back as `value`, as
  // Prometheus's own clients write it ("0.0005", "1e+20"). snprintf and strtod rather than
  // std::to_chars: libstdc++'s floating-point to_chars carries 115 KiB of tables, which in the
  // malloc override (whose exports reach this) spread its read-only data over two more 64 KiB
  // windows that every process under `numarena run` mapped. Both follow the C locale's
  // decimal point (the program may have called setlocale), so the round trip compares like
  // with like, and the point is written as '.' afterwards.
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  std::string text(buffer);
  if (const char* point = std::localeconv()->decimal_point;
      point != nullptr && std::strcmp(point, ".") != 0 && point[0] != '\0') {
    if (std::size_t at = text.find(point); at != std::string::npos) {
      text.replace(at, std::strlen(point), ".");
    }
  }
  return text;
}

ExpositionWriter& ExpositionWriter::Family(std::string_view name, MetricType type,
                                           std::string_view help) {
  std::string key(name);
  if (!ValidMetricName(name) && error_.empty()) {
    error_ = absl::StrCat("metric name '", key, "' does not match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  if (type == MetricType::kCounter &&
      (name.size() < 6 || name.substr(name.size() - 6) != "_total") && error_.empty()) {
    error_ = absl::StrCat("counter '", key, "' must end in _total");
  }
  if (type == MetricType::kHistogram && error_.empty()) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count", "_total"}) {
      if (name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix) {
        error_ = absl::StrCat("histogram '", key, "' must not end in ", std::string(suffix),
                              " (its series add _bucket, _sum and _count)");
        break;
      }
    }
  }
  auto it = index_.find(key);
  if (it != index_.end()) {
    current_ = &families_[it->second];
    if ((current_->type != type || current_->help != help) && error_.empty()) {
      error_ = absl::StrCat("family '", key, "' declared twice with different type or help");
    }
    return *this;
  }
  index_[key] = families_.size();
  families_.push_back(FamilyData{key, type, std::string(help), {}});
  current_ = &families_.back();
  return *this;
}

std::string ExpositionWriter::SeriesLine(std::string_view suffix, const MetricLabels& labels,
                                         const std::string* le, double value) {
  std::string line = current_->name + std::string(suffix);
  if (!labels.empty() || le != nullptr) {
    line += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const auto& [label, label_value] = labels[i];
      if (!ValidLabelName(label) && error_.empty()) {
        error_ = absl::StrCat("label name '", label, "' of ", current_->name, " is not valid");
      }
      absl::StrAppend(&line, i ? "," : "", label, "=\"", Escape(label_value, true), "\"");
    }
    if (le != nullptr) absl::StrAppend(&line, labels.empty() ? "" : ",", "le=\"", *le, "\"");
    line += '}';
  }
  absl::StrAppend(&line, " ", FormatMetricValue(value));
  return line;
}

ExpositionWriter& ExpositionWriter::Sample(const MetricLabels& labels, double value) {
  if (current_ == nullptr) {
    if (error_.empty()) error_ = "Sample() before any Family()";
    return *this;
  }
  if (current_->type == MetricType::kHistogram && error_.empty()) {
    error_ = absl::StrCat("Sample() on histogram '", current_->name, "': use HistogramSample()");
  }
  current_->samples.push_back(SeriesLine("", labels, nullptr, value));
  return *this;
}

ExpositionWriter& ExpositionWriter::HistogramSample(const MetricLabels& labels,
                                                    const HistogramSnapshot& h) {
  if (current_ == nullptr || current_->type != MetricType::kHistogram) {
    if (error_.empty()) {
      error_ = current_ == nullptr
                   ? std::string("HistogramSample() before any Family()")
                   : absl::StrCat("HistogramSample() on '", current_->name,
                                  "', which is not a histogram");
    }
    return *this;
  }
  for (const auto& [label, value] : labels) {
    if (label == "le" && error_.empty()) {
      error_ = absl::StrCat("histogram '", current_->name, "' has a label 'le', which its ",
                            "buckets use");
    }
  }
  bool valid = h.upper_bounds.size() == h.bucket_counts.size();
  for (std::size_t i = 0; valid && i < h.upper_bounds.size(); ++i) {
    valid = std::isfinite(h.upper_bounds[i]) && h.bucket_counts[i] <= h.count &&
            (i == 0 || (h.upper_bounds[i] > h.upper_bounds[i - 1] &&
                        h.bucket_counts[i] >= h.bucket_counts[i - 1]));
  }
  if (!valid && error_.empty()) {
    error_ = absl::StrCat("histogram '", current_->name, "': the snapshot's bounds are not "
                          "finite and increasing, or its counts not cumulative");
  }
  for (std::size_t i = 0; i < h.upper_bounds.size() && i < h.bucket_counts.size(); ++i) {
    const std::string le = FormatMetricValue(h.upper_bounds[i]);
    current_->samples.push_back(
        SeriesLine("_bucket", labels, &le, static_cast<double>(h.bucket_counts[i])));
  }
  const std::string inf = "+Inf";
  current_->samples.push_back(SeriesLine("_bucket", labels, &inf, static_cast<double>(h.count)));
  current_->samples.push_back(SeriesLine("_sum", labels, nullptr, h.sum));
  current_->samples.push_back(SeriesLine("_count", labels, nullptr, static_cast<double>(h.count)));
  return *this;
}

namespace {
bool ValidBounds(const std::vector<double>& bounds, std::string* why) {
  if (bounds.empty()) {
    *why = "a histogram needs at least one bucket bound";
    return false;
  }
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      *why = absl::StrCat("histogram bound ", i, " is not finite (+Inf is implicit)");
      return false;
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      *why = absl::StrCat("histogram bound ", i, " (", FormatMetricValue(bounds[i]),
                          ") is not above the one before (", FormatMetricValue(bounds[i - 1]),
                          "): bounds must increase strictly");
      return false;
    }
  }
  return true;
}
}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<std::uint64_t>[upper_bounds_.size() + 1]),
      sum_(std::make_unique<std::atomic<double>>(0.0)) {
  for (std::size_t i = 0; i <= upper_bounds_.size(); ++i) {
    counts_[i].store(0, std::memory_order_relaxed);
  }
}

StatusOr<Histogram> Histogram::Create(std::vector<double> upper_bounds) {
  std::string why;
  if (!ValidBounds(upper_bounds, &why)) return absl::InvalidArgumentError(why);
  return Histogram(std::move(upper_bounds));
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_->fetch_add(value, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot h;
  h.upper_bounds = upper_bounds_;
  h.bucket_counts.reserve(upper_bounds_.size());
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    h.bucket_counts.push_back(cumulative);
  }
  h.count = cumulative + counts_[upper_bounds_.size()].load(std::memory_order_relaxed);
  h.sum = sum_->load(std::memory_order_relaxed);
  return h;
}

StatusOr<std::vector<double>> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1 || count > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("exponential buckets need start > 0, factor > 1 and 1 to 1000 buckets; got "
                     "start ", FormatMetricValue(start), ", factor ", FormatMetricValue(factor),
                     ", count ", count));
  }
  std::vector<double> bounds;
  bounds.reserve(static_cast<std::size_t>(count));
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  std::string why;
  if (!ValidBounds(bounds, &why)) {
    return absl::InvalidArgumentError(absl::StrCat("exponential buckets: ", why));
  }
  return bounds;
}

StatusOr<std::string> ExpositionWriter::Finish() const {
  if (!error_.empty()) return absl::InvalidArgumentError(error_);
  std::string out;
  for (const FamilyData& f : families_) {
    if (f.samples.empty()) continue;
    absl::StrAppend(&out, "# HELP ", f.name, " ", Escape(f.help, false), "\n");
    const char* type = f.type == MetricType::kCounter     ? "counter"
                       : f.type == MetricType::kHistogram ? "histogram"
                                                          : "gauge";
    absl::StrAppend(&out, "# TYPE ", f.name, " ", type, "\n");
    for (const std::string& line : f.samples) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

void AppendNodeCounterMetrics(ExpositionWriter& out,
                              const std::map<int, NodeNumaCounters>& counters) {
  struct Counter {
    const char* name;
    std::uint64_t NodeNumaCounters::*field;
    const char* help;
  };
  static constexpr Counter kCounters[] = {
      {"numarena_kernel_numa_hit_total", &NodeNumaCounters::numa_hit,
       "Pages allocated on this node as intended (kernel numastat numa_hit)."},
      {"numarena_kernel_numa_miss_total", &NodeNumaCounters::numa_miss,
       "Pages allocated on this node although another was preferred (numa_miss)."},
      {"numarena_kernel_numa_foreign_total", &NodeNumaCounters::numa_foreign,
       "Pages intended for this node but allocated elsewhere (numa_foreign)."},
      {"numarena_kernel_interleave_hit_total", &NodeNumaCounters::interleave_hit,
       "Interleaved pages allocated on this node as intended (interleave_hit)."},
      {"numarena_kernel_local_node_total", &NodeNumaCounters::local_node,
       "Pages allocated on this node by a task running on it (local_node)."},
      {"numarena_kernel_other_node_total", &NodeNumaCounters::other_node,
       "Pages allocated on this node by a task running on another node (other_node)."},
  };
  for (const Counter& c : kCounters) {
    out.Family(c.name, MetricType::kCounter, c.help);
    for (const auto& [node, values] : counters) {
      out.Sample({{"node", absl::StrCat(node)}}, static_cast<double>(values.*(c.field)));
    }
  }
}

void AppendTopologyMetrics(ExpositionWriter& out, const Topology& topology) {
  out.Family("numarena_node_memory_total_bytes", MetricType::kGauge,
             "Memory of the node (MemTotal of its meminfo).");
  for (const NodeInfo& n : topology.nodes()) {
    out.Sample({{"node", absl::StrCat(n.id)}}, static_cast<double>(n.mem_total_bytes));
  }
  out.Family("numarena_node_memory_free_bytes", MetricType::kGauge,
             "Free memory of the node when the topology was discovered (MemFree).");
  for (const NodeInfo& n : topology.nodes()) {
    out.Sample({{"node", absl::StrCat(n.id)}}, static_cast<double>(n.mem_free_bytes));
  }
  out.Family("numarena_node_cpus", MetricType::kGauge,
             "CPUs of the node (0 for memory-only nodes such as CXL expanders).");
  for (const NodeInfo& n : topology.nodes()) {
    out.Sample({{"node", absl::StrCat(n.id)}}, static_cast<double>(n.cpus.size()));
  }
  out.Family("numarena_device_node", MetricType::kGauge,
             "NUMA node of a GPU or NIC; -1 when the kernel does not know it.");
  for (const PciDevice& d : topology.devices()) {
    out.Sample({{"bus_id", d.bus_id}, {"kind", DeviceKindName(d.kind)}}, d.node ? *d.node : -1);
  }
  out.Family("numarena_device_node_unknown", MetricType::kGauge,
             "1 when the kernel reports numa_node -1 for the device.");
  for (const PciDevice& d : topology.devices()) {
    out.Sample({{"bus_id", d.bus_id}, {"kind", DeviceKindName(d.kind)}}, d.node ? 0 : 1);
  }
}

void AppendBuildInfo(ExpositionWriter& out) {
  out.Family("numarena_build_info", MetricType::kGauge,
             "Always 1; the version of numarena serving these metrics.");
  out.Sample({{"version", std::string(version())}}, 1);
}

namespace {

// The processes of one command, summed: what numarena_process_* reports under its label.
struct CommandTotals {
  std::map<int, NodeMemoryUsage> by_node;
  double private_bytes = 0;
  double local_private_bytes = 0;  // on the nodes each process runs on
  std::vector<const ProcessNumaStat*> processes;
};

}  // namespace

void AppendProcessMetrics(ExpositionWriter& out, const Topology& topology,
                          const std::vector<ProcessNumaStat>& stats,
                          const std::vector<std::string>& served_devices) {
  std::map<std::string, CommandTotals> by_command;
  for (const ProcessNumaStat& stat : stats) {
    CommandTotals& totals = by_command[stat.command.empty() ? "unknown" : stat.command];
    for (const auto& [node, usage] : stat.by_node) {
      NodeMemoryUsage& sum = totals.by_node[node];
      sum.anonymous_bytes += usage.anonymous_bytes;
      sum.hugetlb_bytes += usage.hugetlb_bytes;
      sum.file_bytes += usage.file_bytes;
    }
    totals.private_bytes += static_cast<double>(stat.private_bytes);
    totals.local_private_bytes += stat.local_fraction * static_cast<double>(stat.private_bytes);
    totals.processes.push_back(&stat);
  }
  out.Family("numarena_process_memory_bytes", MetricType::kGauge,
             "Resident memory per node of the processes of a command, from /proc/PID/numa_maps.");
  for (const auto& [command, totals] : by_command) {
    for (const auto& [node, usage] : totals.by_node) {
      const std::string n = absl::StrCat(node);
      const std::pair<const char*, std::uint64_t> kinds[] = {{"anonymous", usage.anonymous_bytes},
                                                             {"hugetlb", usage.hugetlb_bytes},
                                                             {"file", usage.file_bytes}};
      for (auto [kind, bytes] : kinds) {
        out.Sample({{"command", command}, {"node", n}, {"kind", kind}},
                   static_cast<double>(bytes));
      }
    }
  }
  out.Family("numarena_processes", MetricType::kGauge,
             "Processes of a command whose figures numarena_process_* sum.");
  for (const auto& [command, totals] : by_command) {
    out.Sample({{"command", command}}, static_cast<double>(totals.processes.size()));
  }
  out.Family("numarena_process_local_memory_ratio", MetricType::kGauge,
             "Share of the private memory of a command's processes on the nodes their threads "
             "run on (1 when they have none).");
  for (const auto& [command, totals] : by_command) {
    out.Sample({{"command", command}},
               totals.private_bytes > 0 ? totals.local_private_bytes / totals.private_bytes : 1);
  }
  if (served_devices.empty() || by_command.empty()) return;
  std::vector<const PciDevice*> served;
  for (const std::string& bus_id : served_devices) {
    auto device = ops::FindDevice(topology, bus_id);
    if (device.ok()) served.push_back(*device);  // a configured device that is gone: skipped
  }
  out.Family("numarena_device_distance", MetricType::kGauge,
             "Largest SLIT distance between a served device's node and the nodes a command's "
             "processes run on: 10 is local, -1 unknown.");
  for (const auto& [command, totals] : by_command) {
    for (const PciDevice* d : served) {
      int distance = -1;
      for (const ProcessNumaStat* stat : totals.processes) {
        for (int node : stat->running_nodes) {
          if (d->node) distance = std::max(distance, topology.distance(*d->node, node));
        }
      }
      out.Sample({{"command", command}, {"bus_id", d->bus_id}, {"kind", DeviceKindName(d->kind)}},
                 distance);
    }
  }
  out.Family("numarena_device_local_memory_ratio", MetricType::kGauge,
             "Share of the private memory of a command's processes on a served device's node.");
  for (const auto& [command, totals] : by_command) {
    for (const PciDevice* d : served) {
      double on_node = 0;
      for (const ProcessNumaStat* stat : totals.processes) {
        if (d->node) on_node += static_cast<double>(stat->private_bytes_on(*d->node));
      }
      out.Sample({{"command", command}, {"bus_id", d->bus_id}, {"kind", DeviceKindName(d->kind)}},
                 totals.private_bytes > 0 ? on_node / totals.private_bytes : 0);
    }
  }
}

StatusOr<std::string> RenderMetrics(const MetricsSources& sources) {
  std::unique_ptr<SystemReader> live;
  const SystemReader* reader = sources.reader;
  if (reader == nullptr) {
    live = MakeRootedReader();
    reader = live.get();
  }
  const Topology* topology = sources.topology;
  if (topology == nullptr) {
    auto system = Topology::system();
    if (!system.ok()) return system.status();
    topology = *system;
  }
  ExpositionWriter out;
  auto counters = ReadNodeCounters(*reader, *topology);
  if (!counters.ok()) return counters.status();
  AppendBuildInfo(out);
  AppendNodeCounterMetrics(out, *counters);
  AppendTopologyMetrics(out, *topology);
  if (!sources.pid.empty()) {
    auto stat = StatProcess(*reader, *topology, sources.pid);
    if (!stat.ok()) return stat.status();
    AppendProcessMetrics(out, *topology, {*std::move(stat)}, sources.served_devices);
  }
  if (!sources.arenas.empty()) AppendArenaMetrics(out, sources.arenas);
  if (sources.budget != nullptr) AppendBudgetMetrics(out, *sources.budget);
  for (const auto& [name, stats] : sources.kv_pools) {
    if (stats != nullptr) AppendKvPoolMetrics(out, name, *stats);
  }
  if (sources.migrations != nullptr) AppendMigrationMetrics(out, *sources.migrations);
  return out.Finish();
}

}  // namespace numarena
