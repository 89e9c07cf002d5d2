// `numarena decode`: the decode table (five placements of a KV-cache decode), measured on this
// machine's CPUs.
//
//   numarena decode [--sequences N] [--prompt N] [--steps N] [--layers N] [--heads N]
//                   [--head-dim N] [--threads N] [--config NAME[,NAME...]] [--json]
//
// Runs a batch of synthetic sequences (prefill, then decode steps) through numarena's KV pool
// with real attention math under five placements: no_binding, wrong_node, membind,
// membind_cpubind, full (see include/numarena/ops/decode.hpp), and prints P50 time-to-first-token,
// P99 time-between-tokens, decode tokens/s and the fraction of KV pages that were on the
// node of the CPU reading them. --json prints the numarena.decode/1 object instead (the input
// of tools/plot_results.py). When stderr is a terminal, a progress line on it (configuration,
// phase, decode step), erased at the end; nothing when it is not. Exit status: 0, or 2 with
// one line on stderr.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <span>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli_options.hpp"
#include "command.hpp"
#include "numarena/ops/decode.hpp"

namespace numarena::cli {
namespace {

struct DecodeCommandOptions {
  std::string sequences, prompt, steps, layers, heads, head_dim, threads, config;
  bool json = false;
  MachineRoots roots;
};

static_assert(decode::kMaxDecodeThreads == 1024, "the help text names the limit");

int RunDecode(const DecodeCommandOptions& args) {
  decode::DecodeOptions options;
  struct IntOption {
    const char* flag;
    const std::string* text;
    int* target;
  };
  const IntOption int_options[] = {{"--sequences", &args.sequences, &options.sequences},
                                   {"--prompt", &args.prompt, &options.prompt_tokens},
                                   {"--steps", &args.steps, &options.decode_steps},
                                   {"--layers", &args.layers, &options.layers},
                                   {"--heads", &args.heads, &options.kv_heads},
                                   {"--head-dim", &args.head_dim, &options.head_dim},
                                   {"--threads", &args.threads, &options.threads}};
  for (const IntOption& option : int_options) {
    if (option.text->empty()) continue;
    if (option.target == &options.threads) {
      if (!absl::SimpleAtoi(*option.text, option.target) || *option.target <= 0 ||
          *option.target > decode::kMaxDecodeThreads) {
        return Fail("decode",
                    absl::StrCat("--threads needs a number of worker threads from 1 to ",
                                 decode::kMaxDecodeThreads));
      }
      continue;
    }
    if (!absl::SimpleAtoi(*option.text, option.target) || *option.target <= 0) {
      return Fail("decode", absl::StrCat(option.flag, " needs a positive whole number"));
    }
  }
  if (!args.config.empty()) options.configurations = absl::StrSplit(args.config, ',');
  auto reader = args.roots.reader();
  auto topology = Topology::discover(*reader);
  if (!topology.ok()) return Fail("decode", std::string(topology.status().message()));
  ProgressLine progress("decode");
  if (progress.enabled()) {
    // Decode steps can be a millisecond each: the line is redrawn at most 10 times a second,
    // and at once when a configuration or phase begins.
    auto last_drawn = std::chrono::steady_clock::time_point{};
    options.progress = [&progress, last_drawn](const decode::DecodeProgress& p) mutable {
      if (p.configuration.empty()) {
        progress.Clear();
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      const bool starts = p.phase == "prefill" || p.step == 0;
      if (!starts && now - last_drawn < std::chrono::milliseconds(100)) return;
      last_drawn = now;
      progress.Show(absl::StrCat("[", p.done + 1, "/", p.total, " configurations] ",
                                 p.configuration, ": ",
                                 p.phase == "prefill"
                                     ? std::string("prefill")
                                     : absl::StrCat("decode step ", p.step + 1, " of ", p.steps)));
    };
  }
  auto table = decode::RunDecodeExperiment(*topology, options);
  progress.Clear();
  if (!table.ok()) return Fail("decode", std::string(table.status().message()));
  std::cout << (args.json ? decode::RenderDecodeJson(*table) : decode::RenderDecodeTable(*table));
  return 0;
}

CommandRunner SetupDecode(CLI::App& app) {
  auto options = std::make_shared<DecodeCommandOptions>();
  auto number = [&](const char* flag, std::string& target, const char* help) {
    app.add_option(flag, target, help)->type_name("N");
  };
  number("--sequences", options->sequences, "batch size (default 4)");
  number("--prompt", options->prompt, "prompt tokens per sequence (default 128)");
  number("--steps", options->steps, "decode steps (default 32)");
  number("--layers", options->layers, "layers (default 4)");
  number("--heads", options->heads, "KV heads, one head group each (default 8)");
  number("--head-dim", options->head_dim, "elements per head (default 128)");
  number("--threads", options->threads,
         "worker threads, at most 1024 (default: every allowed CPU)");
  app.add_option("--config", options->config,
                 "comma-separated subset of no_binding,wrong_node,membind,membind_cpubind,full "
                 "(default: all, in that order)")
      ->type_name("NAMES");
  app.add_flag("--json", options->json, "one JSON object (schema numarena.decode/1)");
  options->roots.AddTo(app);
  return [options] { return RunDecode(*options); };
}

}  // namespace

NUMARENA_COMMAND(decode, "decode table: TTFT/TBT/tokens/s of a KV cache under five placements",
                 SetupDecode);

}  // namespace numarena::cli
