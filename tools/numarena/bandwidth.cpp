// `numarena bandwidth`: the node x node bandwidth and latency matrix (like Intel MLC).
//
//   numarena bandwidth [--threads N] [--bytes B] [--seconds S] [--no-latency]
//                      [--cpu-nodes 0,1] [--memory-nodes 0,2] [--json]
//
// For every (CPU node, memory node) pair the process may use it measures read, write, copy
// and triad bandwidth with N threads pinned to the CPU node over arrays of B bytes bound to
// the memory node, and the idle latency by a pointer chase; then prints the matrix, the
// local/remote ratio per row and each figure as a fraction of this run's best local figure
// and of libc's memset/memcpy (see include/numarena/bandwidth.hpp). --json prints the
// numarena.bandwidth/1 object instead (the input of tools/plot_results.py).
// Exit status: 0, or 2 with one line on stderr.
#include <iostream>
#include <span>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "command.hpp"
#include "numarena/ops/bandwidth.hpp"

namespace numarena::cli {
namespace {

constexpr const char* kUsage =
    "usage: numarena bandwidth [--threads N] [--bytes B] [--seconds S] [--no-latency]\n"
    "                          [--cpu-nodes LIST] [--memory-nodes LIST] [--json]\n"
    "  --threads N          worker threads per CPU node, at most 1024 (default: its allowed\n"
    "                       CPUs)\n"
    "  --bytes B            bytes per array, suffix K/M/G allowed (default: 2x the last-level\n"
    "                       cache, 64 MiB..1 GiB); triad uses three arrays\n"
    "  --seconds S          timed budget of the whole run (default 4; setup is extra)\n"
    "  --no-latency         skip the pointer-chase latency\n"
    "  --cpu-nodes LIST     rows, e.g. 0,1 (default: every node with an allowed CPU)\n"
    "  --memory-nodes LIST  columns, e.g. 0,2 (default: every allowed node with memory)\n"
    "  --json               the numarena.bandwidth/1 JSON object instead of the table\n";

static_assert(kMaxBandwidthThreadsPerNode == 1024, "the usage text names the limit");

bool ParseBytes(const std::string& text, std::size_t* out) {
  std::string digits = text;
  std::size_t multiplier = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        multiplier = std::size_t{1} << 10;
        break;
      case 'M':
      case 'm':
        multiplier = std::size_t{1} << 20;
        break;
      case 'G':
      case 'g':
        multiplier = std::size_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) digits.pop_back();
  }
  std::uint64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value)) return false;
  return !__builtin_mul_overflow(value, multiplier, out);
}

bool ParseNodeList(const std::string& text, std::vector<int>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int node = 0;
    if (!absl::SimpleAtoi(part, &node) || node < 0) return false;
    out->push_back(node);
  }
  return !out->empty();
}

int RunBandwidth(std::span<const std::string> args) {
  MatrixOptions options;
  bool json = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // The option's value (the next argument), or nullptr when it is missing.
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--no-latency") {
      options.measure_latency = false;
    } else if (arg == "--threads") {
      const std::string* v = value();
      if (v == nullptr || !absl::SimpleAtoi(*v, &options.threads_per_node) ||
          options.threads_per_node <= 0 || options.threads_per_node > kMaxBandwidthThreadsPerNode) {
        return Fail("bandwidth", absl::StrCat("--threads needs a number of threads per CPU node "
                                              "from 1 to ",
                                              kMaxBandwidthThreadsPerNode));
      }
    } else if (arg == "--bytes") {
      const std::string* v = value();
      if (v == nullptr || !ParseBytes(*v, &options.buffer_bytes)) {
        return Fail("bandwidth", "--bytes needs a size such as 268435456, 256M or 1G");
      }
    } else if (arg == "--seconds") {
      const std::string* v = value();
      if (v == nullptr || !absl::SimpleAtod(*v, &options.seconds) || !(options.seconds > 0) ||
          !(options.seconds <= kMaxBandwidthSeconds)) {
        return Fail("bandwidth", absl::StrCat("--seconds needs a positive number of seconds, "
                                              "e.g. 4 or 0.5, at most ",
                                              kMaxBandwidthSeconds, " (one day)"));
      }
    } else if (arg == "--cpu-nodes") {
      const std::string* v = value();
      if (v == nullptr || !ParseNodeList(*v, &options.cpu_nodes)) {
        return Fail("bandwidth", "--cpu-nodes needs node ids separated by commas, e.g. 0,1");
      }
    } else if (arg == "--memory-nodes") {
      const std::string* v = value();
      if (v == nullptr || !ParseNodeList(*v, &options.memory_nodes)) {
        return Fail("bandwidth", "--memory-nodes needs node ids separated by commas, e.g. 0,2");
      }
    } else {
      std::cerr << kUsage;
      return Fail("bandwidth", absl::StrCat("unknown option '", arg, "'"));
    }
  }
  auto matrix = MeasureBandwidthMatrix(options);
  if (!matrix.ok()) return Fail("bandwidth", std::string(matrix.status().message()));
  std::cout << (json ? RenderBandwidthJson(*matrix) : RenderBandwidthTable(*matrix));
  return 0;
}

}  // namespace

NUMARENA_COMMAND(bandwidth, "measure the node x node bandwidth and latency matrix", RunBandwidth);

}  // namespace numarena::cli
