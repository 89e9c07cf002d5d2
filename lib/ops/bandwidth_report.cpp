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
#include "numarena/ops/bandwidth.hpp"

namespace numarena {
namespace {

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(ch));
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string JsonPerKernel(const PerKernel& values) {
  std::vector<std::string> fields;
  for (std::size_t k = 0; k < kBandwidthKernelCount; ++k) {
    fields.push_back(absl::StrCat("\"", BandwidthKernelName(kBandwidthKernels[k]),
                                  "\": ", JsonNumber(values[k])));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

std::string Gbps(double bytes_per_second) {
  return absl::StrFormat("%.2f", bytes_per_second / 1e9);
}

std::string Percent(double fraction) { return absl::StrFormat("%.0f%%", 100 * fraction); }

std::string Pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

}  // namespace

std::string RenderBandwidthTable(const BandwidthMatrix& m) {
  std::string out;
  int threads = m.rows.empty() ? 0 : m.rows.front().threads;
  absl::StrAppendFormat(&out,
                        "numarena bandwidth  %s  %zu CPU node(s) x %zu memory node(s), %d "
                        "thread(s) per CPU node, %.1f MiB per array, %.3f s per figure\n",
                        m.timestamp_utc, m.rows.size(), m.memory_nodes.size(), threads,
                        m.buffer_bytes / 1048576.0, m.seconds_per_figure);
  for (const std::string& note : m.notes) absl::StrAppend(&out, "note: ", note, "\n");

  constexpr std::size_t kRowLabel = 10;
  constexpr std::size_t kCell = 22;
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
                                               Percent(c.fraction_of_best_local[k]), ", ",
                                               Percent(c.fraction_of_libc[k]), ")"),
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
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"schema\": \"numarena.bandwidth/1\",\n");
  absl::StrAppend(&out, "  \"timestamp_utc\": ", JsonString(m.timestamp_utc), ",\n");
  absl::StrAppend(&out, "  \"buffer_bytes\": ", m.buffer_bytes, ",\n");
  absl::StrAppend(&out, "  \"llc_bytes\": ", m.llc_bytes, ",\n");
  absl::StrAppend(&out, "  \"seconds_per_figure\": ", JsonNumber(m.seconds_per_figure), ",\n");
  absl::StrAppend(&out, "  \"setup_seconds\": ", JsonNumber(m.setup_seconds), ",\n");
  absl::StrAppend(&out, "  \"measure_seconds\": ", JsonNumber(m.measure_seconds), ",\n");
  absl::StrAppend(&out, "  \"latency_measured\": ", m.latency_measured ? "true" : "false", ",\n");
  std::vector<std::string> kernels;
  for (BandwidthKernel k : kBandwidthKernels) {
    kernels.push_back(absl::StrCat("\"", BandwidthKernelName(k), "\""));
  }
  absl::StrAppend(&out, "  \"kernels\": [", absl::StrJoin(kernels, ", "), "],\n");
  absl::StrAppend(&out, "  \"cpu_nodes\": [", absl::StrJoin(m.cpu_nodes, ", "), "],\n");
  absl::StrAppend(&out, "  \"memory_nodes\": [", absl::StrJoin(m.memory_nodes, ", "), "],\n");
  std::vector<std::string> notes;
  for (const std::string& note : m.notes) notes.push_back(JsonString(note));
  absl::StrAppend(&out, "  \"notes\": [", absl::StrJoin(notes, ", "), "],\n");
  absl::StrAppend(
      &out, "  \"limits\": {\"best_local_bytes_per_second\": ", JsonPerKernel(m.limits.best_local),
      ", \"best_local_latency_ns\": ", JsonNumber(m.limits.best_local_latency_ns),
      ", \"memset_bytes_per_second\": ", JsonNumber(m.limits.memset_bytes_per_second),
      ", \"memcpy_bytes_per_second\": ", JsonNumber(m.limits.memcpy_bytes_per_second), "},\n");
  absl::StrAppend(&out, "  \"rows\": [");
  for (std::size_t r = 0; r < m.rows.size(); ++r) {
    const BandwidthRow& row = m.rows[r];
    absl::StrAppend(
        &out, r == 0 ? "\n" : ",\n", "    {\"cpu_node\": ", row.cpu_node, ", \"cpus\": [",
        absl::StrJoin(row.cpus, ", "), "], \"threads\": ", row.threads,
        ", \"local_column\": ", row.local_column,
        ",\n     \"local_over_worst_remote\": ", JsonPerKernel(row.local_over_worst_remote),
        ",\n     \"worst_remote_latency_over_local\": ",
        JsonNumber(row.worst_remote_latency_over_local),
        ", \"memset_bytes_per_second\": ", JsonNumber(row.memset_bytes_per_second),
        ", \"memcpy_bytes_per_second\": ", JsonNumber(row.memcpy_bytes_per_second),
        ",\n     \"cells\": [");
    for (std::size_t col = 0; col < row.cells.size(); ++col) {
      const BandwidthCell& c = row.cells[col];
      absl::StrAppend(
          &out, col == 0 ? "\n" : ",\n", "      {\"memory_node\": ", c.memory_node,
          ", \"distance\": ", c.distance,
          ", \"pages_on_node_fraction\": ", JsonNumber(c.pages_on_node_fraction),
          ",\n       \"bytes_per_second\": ", JsonPerKernel(c.bytes_per_second),
          ",\n       \"relative_to_local\": ", JsonPerKernel(c.relative_to_local),
          ",\n       \"fraction_of_best_local\": ", JsonPerKernel(c.fraction_of_best_local),
          ",\n       \"fraction_of_libc\": ", JsonPerKernel(c.fraction_of_libc),
          ",\n       \"latency_ns\": ", JsonNumber(c.latency_ns),
          ", \"latency_relative_to_local\": ", JsonNumber(c.latency_relative_to_local), "}");
    }
    absl::StrAppend(&out, "]}");
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

}  // namespace numarena
