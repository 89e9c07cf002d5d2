// `numarena decode`: seed 000's decode table, measured on this machine's CPUs.
//
//   numarena decode [--sequences N] [--prompt N] [--steps N] [--layers N] [--heads N]
//                   [--head-dim N] [--threads N] [--config NAME[,NAME...]] [--json]
//
// Runs a batch of synthetic sequences (prefill, then decode steps) through numarena's KV pool
// with real attention math under five placements: no_binding, wrong_node, membind,
// membind_cpubind, full (see include/numarena/ops/decode.hpp), and prints P50 time-to-first-token,
// P99 time-between-tokens, decode tokens/s and the fraction of KV pages that were on the
// node of the CPU reading them. --json prints the numarena.decode/1 object instead (the input
// of tools/plot_results.py). Exit status: 0, or 2 with one line on stderr.
#include <iostream>
#include <span>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "command.hpp"
#include "numarena/ops/decode.hpp"

namespace numarena::cli {
namespace {

constexpr const char* kUsage =
    "usage: numarena decode [--sequences N] [--prompt N] [--steps N] [--layers N] [--heads N]\n"
    "                       [--head-dim N] [--threads N] [--config NAMES] [--json]\n"
    "  --sequences N   batch size (default 4)\n"
    "  --prompt N      prompt tokens per sequence (default 128)\n"
    "  --steps N       decode steps (default 32)\n"
    "  --layers N      layers (default 4)\n"
    "  --heads N       KV heads, one head group each (default 8)\n"
    "  --head-dim N    elements per head (default 128)\n"
    "  --threads N     worker threads, at most 1024 (default: every allowed CPU)\n"
    "  --config NAMES  comma-separated subset of no_binding,wrong_node,membind,\n"
    "                  membind_cpubind,full (default: all, in that order)\n"
    "  --json          the numarena.decode/1 JSON object instead of the table\n";

static_assert(decode::kMaxDecodeThreads == 1024, "the usage text names the limit");

int RunDecode(std::span<const std::string> args) {
  decode::DecodeOptions options;
  bool json = false;
  struct IntOption {
    const char* flag;
    int* target;
  };
  const IntOption int_options[] = {
      {"--sequences", &options.sequences}, {"--prompt", &options.prompt_tokens},
      {"--steps", &options.decode_steps},  {"--layers", &options.layers},
      {"--heads", &options.kv_heads},      {"--head-dim", &options.head_dim},
      {"--threads", &options.threads}};
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--json") {
      json = true;
      continue;
    }
    if (arg == "--config") {
      if (i + 1 >= args.size()) return Fail("decode", "--config needs configuration names");
      options.configurations = absl::StrSplit(args[++i], ',');
      continue;
    }
    bool matched = false;
    for (const IntOption& option : int_options) {
      if (arg != option.flag) continue;
      matched = true;
      if (i + 1 >= args.size() || !absl::SimpleAtoi(args[i + 1], option.target) ||
          *option.target <= 0) {
        return Fail("decode", absl::StrCat(option.flag, " needs a positive whole number"));
      }
      if (option.target == &options.threads && options.threads > decode::kMaxDecodeThreads) {
        return Fail("decode", absl::StrCat("--threads needs a number of worker threads from 1 to ",
                                           decode::kMaxDecodeThreads));
      }
      ++i;
    }
    if (!matched) {
      std::cerr << kUsage;
      return Fail("decode", absl::StrCat("unknown option '", arg, "'"));
    }
  }
  auto table = decode::RunDecodeExperiment(options);
  if (!table.ok()) return Fail("decode", std::string(table.status().message()));
  std::cout << (json ? decode::RenderDecodeJson(*table) : decode::RenderDecodeTable(*table));
  return 0;
}

}  // namespace

NUMARENA_COMMAND(decode, "seed 000's decode table: TTFT/TBT/tokens/s under five placements",
                 RunDecode);

}  // namespace numarena::cli
