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
// When stderr is a terminal, one progress line on it, rewritten in place and erased at the
// end (ProgressLine, cli_options.hpp); nothing when it is not (a log or a pipe).
// Exit status: 0, or 2 with one line on stderr.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <tuple>
#include <span>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/ops/bandwidth.hpp"

namespace numarena::cli {
namespace {

struct BandwidthCommandOptions {
  std::string threads, bytes, seconds, cpu_nodes, memory_nodes;
  bool no_latency = false;
  bool json = false;
  MachineRoots roots;
};

static_assert(kMaxBandwidthThreadsPerNode == 1024, "the help text names the limit");

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

int RunBandwidth(const BandwidthCommandOptions& args) {
  MatrixOptions options;
  options.measure_latency = !args.no_latency;
  if (!args.threads.empty() &&
      (!absl::SimpleAtoi(args.threads, &options.threads_per_node) ||
       options.threads_per_node <= 0 || options.threads_per_node > kMaxBandwidthThreadsPerNode)) {
    return Fail("bandwidth", absl::StrCat("--threads needs a number of threads per CPU node "
                                          "from 1 to ",
                                          kMaxBandwidthThreadsPerNode));
  }
  if (!args.bytes.empty() && !ParseBytes(args.bytes, &options.buffer_bytes)) {
    return Fail("bandwidth", "--bytes needs a size such as 268435456, 256M or 1G");
  }
  if (!args.seconds.empty() &&
      (!absl::SimpleAtod(args.seconds, &options.seconds) || !(options.seconds > 0) ||
       !(options.seconds <= kMaxBandwidthSeconds))) {
    return Fail("bandwidth", absl::StrCat("--seconds needs a positive number of seconds, "
                                          "e.g. 4 or 0.5, at most ",
                                          kMaxBandwidthSeconds, " (one day)"));
  }
  for (auto [text, name, out] : {std::tuple{&args.cpu_nodes, "--cpu-nodes", &options.cpu_nodes},
                                 {&args.memory_nodes, "--memory-nodes", &options.memory_nodes}}) {
    if (text->empty()) continue;
    auto nodes = ParseNodeList(*text);
    if (!nodes.ok()) return Fail("bandwidth", absl::StrCat(name, ": ", nodes.status().message()));
    *out = *std::move(nodes);
  }
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("bandwidth", std::string(topology.status().message()));
  ProgressLine progress("bandwidth");
  if (progress.enabled()) {
    options.progress = [&progress](const BandwidthProgress& p) {
      if (p.step.empty()) {
        progress.Clear();
      } else {
        progress.Show(absl::StrFormat("[%zu/%zu figures, %.1f s] %s", p.done, p.total,
                                      p.elapsed_seconds, p.step));
      }
    };
  }
  auto matrix = MeasureBandwidthMatrix(*topology, options);
  progress.Clear();
  if (!matrix.ok()) return Fail("bandwidth", std::string(matrix.status().message()));
  std::cout << (args.json ? RenderBandwidthJson(*matrix) : RenderBandwidthTable(*matrix));
  return 0;
}

CommandRunner SetupBandwidth(CLI::App& app) {
  auto options = std::make_shared<BandwidthCommandOptions>();
  app.add_option("--threads", options->threads,
                 "worker threads per CPU node, at most 1024 (default: its allowed CPUs)")
      ->type_name("N");
  app.add_option("--bytes", options->bytes,
                 "bytes per array, suffix K/M/G allowed (default: 2x the last-level cache, "
                 "64 MiB..1 GiB); triad uses three arrays")
      ->type_name("B");
  app.add_option("--seconds", options->seconds,
                 "timed budget of the whole run (default 4; placing the arrays and building "
                 "the pointer chase are extra)")
      ->type_name("S");
  app.add_flag("--no-latency", options->no_latency, "skip the pointer-chase latency");
  app.add_option("--cpu-nodes", options->cpu_nodes,
                 "rows, e.g. 0-1 or 0,2 (default: every node with an allowed CPU)")
      ->type_name("NODES");
  app.add_option("--memory-nodes", options->memory_nodes,
                 "columns, e.g. 0,2 (default: every allowed node with memory)")
      ->type_name("NODES");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.bandwidth/1)");
  options->roots.AddTo(app);
  return [options] { return RunBandwidth(*options); };
}

}  // namespace

NUMARENA_COMMAND(bandwidth, "measure the node x node bandwidth and latency matrix",
                 SetupBandwidth);

}  // namespace numarena::cli
