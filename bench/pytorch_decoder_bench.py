#!/usr/bin/env python3
"""The PyTorch decoder (examples/pytorch_decoder.py) under each CPU tensor allocator: time to
first token, time per output token and peak RSS, in rounds that alternate the configurations
(each round runs every one once, in a rotated order), so drift on a shared machine spreads
over all of them. Prints one JSON object: per configuration the medians and every run, and
the ratios of numarena.torch to the fastest preload.

    bench/pytorch_decoder_bench.py --build build --rounds 5 > bench/results/pytorch_decoder.json

Configurations (the KV cache is numarena's pool in every one; what changes is where every
other CPU tensor comes from):
  glibc            libtorch's own allocator over glibc malloc
  jemalloc, tcmalloc, mimalloc   the same under an LD_PRELOAD of Debian's library
  run-membind0, run-local        `numarena run --membind 0` / `--local` (numarena as malloc)
  numarena.torch   no preload: weights under on("bind(0)"), every other tensor under
                   use("local") (the process-wide numarena.torch allocator)
  numarena.torch+jemalloc, +tcmalloc, +mimalloc   the same over that preload: numarena places
                   the tensors, the preloaded malloc serves everything else (libtorch's tensor
                   objects, Python's), as an operator who already preloads one would run it
Each run is a fresh process (start-up is not timed: TTFT starts at the first prefill).

The report's ratios: numarena.torch (alone, and the fastest of its combinations) against the
fastest of glibc and the preloads, and each combination against its own preload (what placing
the tensors with numarena costs over the malloc already preloaded).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PRELOADS = {"jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc.so.4",
            "mimalloc": "libmimalloc.so.2"}


def configurations(build):
    numarena_cli = os.path.join(build, "tools", "numarena")
    plain = ["--weights", "none", "--tensors", "none"]
    configs = {"glibc": ([], {}, plain)}
    for name, library in PRELOADS.items():
        configs[name] = ([], {"LD_PRELOAD": os.path.join(LIBDIR, library)}, plain)
    configs["run-membind0"] = ([numarena_cli, "run", "--membind", "0", "--"], {}, plain)
    configs["run-local"] = ([numarena_cli, "run", "--local", "--"], {}, plain)
    placed = ["--weights", "bind(0)", "--tensors", "local"]
    configs["numarena.torch"] = ([], {}, placed)
    for name, library in PRELOADS.items():
        configs[f"numarena.torch+{name}"] = (
            [], {"LD_PRELOAD": os.path.join(LIBDIR, library)}, placed)
    return configs


def run_once(build, prefix, extra_env, args, decoder_args):
    env = dict(os.environ, NUMARENA_LIBRARY=os.path.join(build, "lib", "libnumarena.so.0"),
               PYTHONPATH=os.path.join(ROOT, "python"), PYTHONDONTWRITEBYTECODE="1")
    env.update(extra_env)
    command = prefix + ["/usr/bin/python3", os.path.join(ROOT, "examples", "pytorch_decoder.py"),
                        "--json"] + args + decoder_args
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {k: result[k] for k in ("ttft_s", "tpot_s", "peak_rss_kib")}


def git_commit():
    """The checkout's commit, or "unknown" outside git."""
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("decoder_args", nargs="*",
                        help="after --: passed to the decoder (default: its own sizes)")
    options = parser.parse_args()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    configs = configurations(os.path.abspath(options.build))
    names = [n for n in configs if not options.only or n in options.only]
    runs = {name: [] for name in names}
    for round_ in range(options.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            prefix, env, args = configs[name]
            runs[name].append(run_once(options.build, prefix, env, args, options.decoder_args))
            print(f"round {round_ + 1}/{options.rounds} {name}: {runs[name][-1]}",
                  file=sys.stderr, flush=True)
    medians = {name: {key: statistics.median(run[key] for run in runs[name])
                      for key in ("ttft_s", "tpot_s", "peak_rss_kib")} for name in names}
    report = {"program": "pytorch_decoder_bench.py", "started": started,
              "machine": platform.node(), "commit": git_commit(),
              "rounds": options.rounds, "decoder_args": options.decoder_args,
              "medians": medians, "runs": runs}
    keys = ("ttft_s", "tpot_s", "peak_rss_kib")
    preloads = [n for n in ("glibc", *PRELOADS) if n in medians]

    def against_fastest(ours):
        return {key: {"fastest": min(preloads, key=lambda n: medians[n][key]),
                      "ratio": medians[ours][key] / min(medians[n][key] for n in preloads)}
                for key in keys}

    if "numarena.torch" in medians and preloads:
        report["numarena.torch_vs_fastest"] = against_fastest("numarena.torch")
    combined = [n for n in medians if n.startswith("numarena.torch+")]
    if combined and preloads:
        # The combination closest to the fastest preload: the smallest of its worse ratio of
        # TTFT and time per token.
        best = min(combined, key=lambda n: max(against_fastest(n)[k]["ratio"]
                                               for k in ("ttft_s", "tpot_s")))
        report["numarena.torch_best_combination"] = best
        report["numarena.torch_best_combination_vs_fastest"] = against_fastest(best)
        report["numarena.torch_over_its_preload"] = {
            n: {key: medians[n][key] / medians[n.split("+", 1)[1]][key] for key in keys}
            for n in combined if n.split("+", 1)[1] in medians}
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
