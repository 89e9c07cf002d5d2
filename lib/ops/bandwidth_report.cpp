// Text and JSON renderings of a bandwidth matrix (see bandwidth.hpp).
//
// The text table is for people: GB/s (10^9 bytes/s, as STREAM and MLC print) with the two
// same-run fractions beside each figure. The JSON is for programs (tools/plot_results.py):
// raw bytes/s and ns, every derived ratio, and the options that produced them.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "numarena/format.hpp"
#include "numarena/ops/bandwidth.hpp"
#include "numarena/ops/json.hpp"

namespace numarena {
namespace {

// {"read": x, "write": x, "copy": x, "triad": x}
void WritePerKernel(JsonWriter& json, const PerKernel& values) {
  json.BeginObject();
  for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
    json.Key(BandwidthKernelName(kBandwidthKernels[k])).Double(values[k]);
  }
  json.EndObject();
}

std::string Gbps(double bytes_per_second) {
  return absl::StrFormat("%.2f", bytes_per_second / 1e9);
}

std::string Pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

}  // namespace

std::string RenderBandwidthTable(const BandwidthMatrix& m) {
  std::string out;
  int threads = m.rows.empty() ? 0 : m.rows.front().threads;
  absl::StrAppendFormat(&out,
                        "numarena bandwidth  %s  %zu CPU node(s) x %zu memory node(s), %d "
                        "thread(s) per CPU node, %s per array, %.3f s per figure\n",
                        m.timestamp_utc, m.rows.size(), m.memory_nodes.size(), threads,
                        FormatBytes(m.buffer_bytes), m.seconds_per_figure);
  for (const std::string& note : m.notes) absl::StrAppend(&out, "note: ", note, "\n");

  constexpr std::size_t kRowLabel = 10;
  constexpr std::size_t kCell = 24;  // "1234.56 (100.0%, 100.0%)" and a space
  auto header = [&](const std::string& title) {
    absl::StrAppend(&out, "\n", title, "\n", Pad("", kRowLabel));
    for (int node : m.memory_nodes) absl::StrAppend(&out, Pad(absl::StrCat("mem ", node), kCell));
    absl::StrAppend(&out, "local/worst remote\n");
  };
  for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
    header(absl::StrCat(BandwidthKernelName(kBandwidthKernels[k]), " GB/s  (% of best local, % of ",
                        kBandwidthKernels[k] == BandwidthKernel::kWrite ? "memset" : "memcpy",
                        ")"));
    for (const BandwidthRow& row : m.rows) {
      absl::StrAppend(&out, Pad(absl::StrCat("cpu ", row.cpu_node), kRowLabel));
      for (const BandwidthCell& c : row.cells) {
        absl::StrAppend(&out, Pad(absl::StrCat(Gbps(c.bytes_per_second[k]), " (",
                                               FormatPercent(c.fraction_of_best_local[k]), ", ",
                                               FormatPercent(c.fraction_of_libc[k]), ")"),
                                  kCell));
      }
      absl::StrAppend(&out,
                      row.local_over_worst_remote[k] > 0
                          ? absl::StrFormat("%.2fx", row.local_over_worst_remote[k])
                          : std::string("-"),
                      "\n");
    }
  }
  if (m.latency_measured) {
    header("idle latency ns  (x local)");
    for (const BandwidthRow& row : m.rows) {
      absl::StrAppend(&out, Pad(absl::StrCat("cpu ", row.cpu_node), kRowLabel));
      for (const BandwidthCell& c : row.cells) {
        absl::StrAppend(
            &out,
            Pad(absl::StrFormat("%.1f (%.2fx)", c.latency_ns, c.latency_relative_to_local), kCell));
      }
      absl::StrAppend(&out,
                      row.worst_remote_latency_over_local > 0
                          ? absl::StrFormat("%.2fx", row.worst_remote_latency_over_local)
                          : std::string("-"),
                      "\n");
    }
  }
  absl::StrAppend(&out, "\nmachine limits measured in this run:\n");
  for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
    absl::StrAppend(&out, "  best local ", Pad(BandwidthKernelName(kBandwidthKernels[k]), 6),
                    Gbps(m.limits.best_local[k]), " GB/s\n");
  }
  absl::StrAppend(&out, "  memset           ", Gbps(m.limits.memset_bytes_per_second),
                  " GB/s\n  memcpy           ", Gbps(m.limits.memcpy_bytes_per_second),
                  " GB/s (read + write)\n");
  if (m.latency_measured) {
    absl::StrAppendFormat(&out, "  best local latency %.1f ns\n", m.limits.best_local_latency_ns);
  }
  absl::StrAppendFormat(&out, "setup %.1f s, measured %.1f s\n", m.setup_seconds,
                        m.measure_seconds);
  return out;
}

std::string RenderBandwidthJson(const BandwidthMatrix& m) {
  std::string out;
  JsonWriter json(out);
  json.BeginObject();
  json.Key("schema").String("numarena.bandwidth/1");
  json.Key("timestamp_utc").String(m.timestamp_utc);
  json.Key("buffer_bytes").Uint(m.buffer_bytes);
  json.Key("llc_bytes").Uint(m.llc_bytes);
  json.Key("seconds_per_figure").Double(m.seconds_per_figure);
  json.Key("setup_seconds").Double(m.setup_seconds);
  json.Key("measure_seconds").Double(m.measure_seconds);
  json.Key("latency_measured").Bool(m.latency_measured);
  json.Key("kernels").BeginArray();
  for (BandwidthKernel k : kBandwidthKernels) json.String(BandwidthKernelName(k));
  json.EndArray();
  json.Key("cpu_nodes").IntArray(m.cpu_nodes);
  json.Key("memory_nodes").IntArray(m.memory_nodes);
  json.Key("notes").BeginArray();
  for (const std::string& note : m.notes) json.String(note);
  json.EndArray();
  json.Key("limits").BeginObject();
  json.Key("best_local_bytes_per_second");
  WritePerKernel(json, m.limits.best_local);
  json.Key("best_local_latency_ns").Double(m.limits.best_local_latency_ns);
  json.Key("memset_bytes_per_second").Double(m.limits.memset_bytes_per_second);
  json.Key("memcpy_bytes_per_second").Double(m.limits.memcpy_bytes_per_second);
  json.EndObject();
  json.Key("rows").BeginArray();
  for (const BandwidthRow& row : m.rows) {
    json.BeginObject();
    json.Key("cpu_node").Int(row.cpu_node);
    json.Key("cpus").IntArray(row.cpus);
    json.Key("threads").Int(row.threads);
    json.Key("local_column").Int(row.local_column);
    json.Key("local_over_worst_remote");
    WritePerKernel(json, row.local_over_worst_remote);
    json.Key("worst_remote_latency_over_local").Double(row.worst_remote_latency_over_local);
    json.Key("memset_bytes_per_second").Double(row.memset_bytes_per_second);
    json.Key("memcpy_bytes_per_second").Double(row.memcpy_bytes_per_second);
    json.Key("cells").BeginArray();
    for (const BandwidthCell& c : row.cells) {
      json.BeginObject();
      json.Key("memory_node").Int(c.memory_node);
      json.Key("distance").Int(c.distance);
      json.Key("pages_on_node_fraction").Double(c.pages_on_node_fraction);
      json.Key("bytes_per_second");
      WritePerKernel(json, c.bytes_per_second);
      json.Key("relative_to_local");
      WritePerKernel(json, c.relative_to_local);
      json.Key("fraction_of_best_local");
      WritePerKernel(json, c.fraction_of_best_local);
      json.Key("fraction_of_libc");
      WritePerKernel(json, c.fraction_of_libc);
      json.Key("latency_ns").Double(c.latency_ns);
      json.Key("latency_relative_to_local").Double(c.latency_relative_to_local);
      json.EndObject();
    }
    json.EndArray();
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  out += '\n';
  return out;
}

}  // namespace numarena
