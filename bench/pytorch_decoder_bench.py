#!/usr/bin/env python3
"""The PyTorch decoder (examples/pytorch_decoder.py) under each CPU tensor allocator: time to
first token, time per output token and peak RSS, with the configurations served in lockstep.
Prints one JSON object: per configuration the medians and every serve, and the ratios of
numarena.torch to the fastest preload.

    bench/pytorch_decoder_bench.py --build build --turns 30 > bench/results/pytorch_decoder.json

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

Lockstep. Every configuration is one long-lived process (bench/torch/decoder_worker.py) that
builds the model once. A turn asks each of them, one at a time and in a rotated order, to serve
the batch once (a prefill of every prompt, then the decode steps), so two configurations'
serves of one turn are a fraction of a second apart. On this project's shared 2-vCPU VMs one
configuration's runs spread from 8 to 18 ms per token over minutes, with nothing else running
in the guest; whole-process rounds (the first version of this benchmark) put tens of seconds
between the runs they compared, and their medians moved by 5-10 % from one run to the next.
The first serve of each process (cold: libraries' first calls, first page faults) is reported
on its own (cold_ttft_s) and left out of the medians; start-up is not timed.

The report's ratios: numarena.torch (alone, and the fastest of its combinations) against the
fastest of glibc and the preloads (the fastest by median), and each combination against its
own preload: the ratio of the medians, and the median of the per-turn ratios (each turn's
serve of one against the same turn's serve of the other) with its quartiles, which is what
drift on the host moves least.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

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


class Worker:
    """One configuration's decoder_worker.py process."""

    def __init__(self, build, prefix, extra_env, args, decoder_args, cpu):
        env = dict(os.environ, NUMARENA_LIBRARY=os.path.join(build, "lib", "libnumarena.so.0"),
                   PYTHONPATH=os.path.join(ROOT, "python"), PYTHONDONTWRITEBYTECODE="1")
        env.update(extra_env)
        self.command = prefix + ["/usr/bin/python3", os.path.join(HERE, "torch",
                                                                  "decoder_worker.py")]
        self.command += args + decoder_args
        pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
        self.process = subprocess.Popen(self.command, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, preexec_fn=pin)

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"{' '.join(self.command)} ended ({code}) without an answer; "
                               "its stderr is above")
        return line.strip()

    def wait_ready(self):
        answer = self._answer()
        if answer != "ready":
            raise RuntimeError(f"{' '.join(self.command)}: expected 'ready', got {answer!r}")

    def serve(self):
        self.process.stdin.write("serve\n")
        self.process.stdin.flush()
        return json.loads(self._answer())

    def finish(self):
        """Ends the process; its peak RSS in KiB."""
        self.process.stdin.write("exit\n")
        self.process.stdin.flush()
        peak = json.loads(self._answer())["peak_rss_kib"]
        self.process.wait(timeout=60)
        return peak

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def git_commit():
    """The checkout's commit, or "unknown" outside git."""
    done = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def quartiles(values):
    """(first quartile, median, third quartile) of `values`, within their range: the default
    ("exclusive") method extrapolates beyond the smallest and largest value when there are
    few, so two per-turn ratios of 0.3 and 3.4 had a first quartile of -0.48."""
    if len(values) < 2:
        return (values[0],) * 3
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def run_lockstep(build, configs, names, turns, decoder_args, pause_s, cpu):
    """Serves every configuration once per turn, one at a time; per configuration its serves
    (the first one cold) and its peak RSS."""
    workers = {}
    try:
        for name in names:  # one at a time: model building is not timed, but it is heavy
            prefix, env, args = configs[name]
            workers[name] = Worker(build, prefix, env, args, decoder_args, cpu)
            workers[name].wait_ready()
        serves = {name: [] for name in names}
        for turn in range(turns + 1):  # turn 0: every process's cold serve
            order = names[turn % len(names):] + names[:turn % len(names)]
            for name in order:
                time.sleep(pause_s)  # the previous process's threads settle
                serves[name].append(workers[name].serve())
                print(f"turn {turn}/{turns} {name}: {serves[name][-1]}", file=sys.stderr,
                      flush=True)
        peaks = {name: workers[name].finish() for name in names}
        return serves, peaks
    finally:
        for worker in workers.values():
            worker.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--turns", type=int, default=30,
                        help="warm serves per configuration (after the cold one)")
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds between two serves (default 0.05)")
    parser.add_argument("--cpu", type=int, default=0,
                        help="the one CPU every configuration's process runs on (default 0; "
                             "-1: no pinning)")
    parser.add_argument("--only", nargs="*", help="configurations to run (default: all)")
    parser.add_argument("decoder_args", nargs="*",
                        help="after --: passed to the decoder (default: its own sizes)")
    options = parser.parse_args()
    if options.turns < 1:
        parser.error("--turns must be at least 1")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    configs = configurations(os.path.abspath(options.build))
    unknown = sorted(set(options.only or ()) - set(configs))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {sorted(configs)}")
    names = [n for n in configs if not options.only or n in options.only]
    cpu = None if options.cpu < 0 else options.cpu
    if cpu is not None and cpu not in os.sched_getaffinity(0):
        parser.error(f"--cpu {cpu}: not a CPU this process may run on "
                     f"({sorted(os.sched_getaffinity(0))})")
    serves, peaks = run_lockstep(os.path.abspath(options.build), configs, names, options.turns,
                                 options.decoder_args, options.pause, cpu)
    warm = {name: serves[name][1:] for name in names}
    medians = {name: {"ttft_s": statistics.median(s["ttft_s"] for s in warm[name]),
                      "tpot_s": statistics.median(s["tpot_s"] for s in warm[name]),
                      "peak_rss_kib": peaks[name]} for name in names}
    report = {"program": "pytorch_decoder_bench.py", "method": "lockstep",
              "started": started, "machine": platform.node(), "commit": git_commit(),
              "turns": options.turns, "cpu": cpu, "decoder_args": options.decoder_args,
              "medians": medians,
              "cold_ttft_s": {name: serves[name][0]["ttft_s"] for name in names},
              "serves": warm}
    keys = ("ttft_s", "tpot_s", "peak_rss_kib")
    preloads = [n for n in ("glibc", *PRELOADS) if n in medians]

    def against(ours, theirs):
        """Ours against theirs: the ratio of medians, and for the times the per-turn ratios'
        quartiles."""
        result = {}
        for key in keys:
            entry = {"to": theirs, "ratio": medians[ours][key] / medians[theirs][key]}
            if key != "peak_rss_kib":
                per_turn = [a[key] / b[key] for a, b in zip(warm[ours], warm[theirs])]
                entry["per_turn_q1_median_q3"] = quartiles(per_turn)
            result[key] = entry
        return result

    def against_fastest(ours):
        return {key: against(ours, min(preloads, key=lambda n: medians[n][key]))[key]
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
            n: against(n, n.split("+", 1)[1]) for n in combined if n.split("+", 1)[1] in medians}
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
