#!/usr/bin/env python3
"""llama.cpp (tools/llama/driver.mjs over node-llama-cpp) under each allocator: glibc, Debian's
jemalloc and tcmalloc as LD_PRELOAD, and `numarena run` with --membind 0, --local and
--interleave (all online nodes). Several rounds; each round runs every configuration once, in
an order rotated by one per round, so a slow spell of the shared machine falls on different
configurations. Prints the medians and the ratios to the fastest preload (TTFT and time per
token, each in wall time and in the process's CPU time) and to glibc (peak RSS) as a Markdown
table, then whether numarena's time per token is within 5 % of the fastest preload's.

Wall time on a shared machine also counts the time other programs held the CPU, and swings
2-5x between rounds there; CPU time (user + system of the driver process) counts only its own
work, page faults included, and is the figure the 5 % line is judged on when the machine is not
quiet (the load average is printed with the table).

    bench/llama_bench.py --numarena build/tools/numarena [--size medium] [--rounds 5]
        [--prompt-tokens 64] [--tokens 64] [--threads 1] [--out results.json]
        [--chart chart.png]
    bench/llama_bench.py --replot results.json --chart chart.png [--machine M] [--commit C]

The chart's title names the run's date, the machine and the commit (--machine and --commit;
by default this machine and this checkout's HEAD, right for a run made here now).

Needs tools/llama/node_modules (`tools/dev.sh deps`). The model is written by
tools/llama/make_gguf.py into a temporary directory unless --model is given.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools", "llama")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PRELOADS = ("glibc", "jemalloc", "tcmalloc")


def online_nodes():
    with open("/sys/devices/system/node/online") as f:
        return f.read().strip()


def configurations(cli):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    with_lib = lambda lib: dict(env, LD_PRELOAD=os.path.join(LIBDIR, lib))
    return [
        ("glibc", env, []),
        ("jemalloc", with_lib("libjemalloc.so.2"), []),
        ("tcmalloc", with_lib("libtcmalloc_minimal.so.4"), []),
        ("numarena --membind 0", env, [cli, "run", "--membind", "0", "--"]),
        ("numarena --local", env, [cli, "run", "--local", "--"]),
        ("numarena --interleave " + online_nodes(), env,
         [cli, "run", "--interleave", online_nodes(), "--"]),
    ]


def run_one(prefix, env, args):
    cmd = [*prefix, "node", os.path.join(TOOLS, "driver.mjs"), *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    if p.returncode != 0 or not result.get("ok"):
        sys.exit("llama_bench: %s failed (status %d): %s\n%s" % (
            " ".join(cmd), p.returncode, result.get("error"), p.stderr[-2000:]))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--numarena", help="the numarena CLI (build/tools/numarena); needed to run")
    ap.add_argument("--model")
    ap.add_argument("--size", default="medium", help="make_gguf.py --size (default medium)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="write every run's JSON here")
    ap.add_argument("--chart", help="write a bar chart (matplotlib) here")
    ap.add_argument("--replot", metavar="JSON", help="only draw --chart from an earlier --out")
    ap.add_argument("--machine", help="the machine in the chart's title (default: this one)")
    ap.add_argument("--commit", help="the commit in the chart's title (default: HEAD)")
    a = ap.parse_args()
    if a.replot:
        with open(a.replot) as f:
            saved = json.load(f)
        chart(a.chart or sys.exit("llama_bench: --replot needs --chart"), saved["medians"],
              saved["args"]["size"], saved["started"], [a.replot], a.machine, a.commit)
        return
    if not a.numarena:
        sys.exit("llama_bench: --numarena is needed to run (only --replot works without it)")
    if a.rounds < 1:
        sys.exit("llama_bench: --rounds must be at least 1")
    if not os.path.isdir(os.path.join(TOOLS, "node_modules", "node-llama-cpp")):
        sys.exit("llama_bench: tools/llama/node_modules is missing: run tools/dev.sh deps")

    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if model is None:
            model = os.path.join(tmp, a.size + ".gguf")
            subprocess.run([sys.executable, os.path.join(TOOLS, "make_gguf.py"), model,
                            "--size", a.size], check=True)
        args = ["--model", model, "--prompt-tokens", str(a.prompt_tokens), "--tokens",
                str(a.tokens), "--threads", str(a.threads), "--ctx",
                str(a.prompt_tokens + a.tokens)]
        configs = configurations(a.numarena)
        runs = {name: [] for name, _, _ in configs}
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        load_before = os.getloadavg()[0]
        for r in range(a.rounds):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for name, env, prefix in order:
                res = run_one(prefix, env, args)
                runs[name].append(res)
                print("round %d %-28s ttft %8.2f ms  %7.3f ms/token  %7.3f CPU ms/token  "
                      "peak RSS %7d KiB" % (r + 1, name, res["ttft_ms"], res["ms_per_token"],
                                           res["cpu_ms_per_token"], res["peak_rss_kb"]),
                      file=sys.stderr, flush=True)
        model_bytes = runs["glibc"][0]["model_bytes"]
        load_after = os.getloadavg()[0]

    keys = ("ttft_ms", "ms_per_token", "cpu_ttft_ms", "cpu_ms_per_token", "peak_rss_kb",
            "load_ms")
    med = {name: {k: statistics.median(x[k] for x in rs) for k in keys}
           for name, rs in runs.items()}
    best = {k: min(med[n][k] for n in PRELOADS) for k in keys}
    print("%s; model %s (%.0f MiB of weights, mmap off), %d prompt + %d decode tokens, "
          "%d thread(s), %d rounds alternated; medians; load average %.1f before, %.1f after.\n"
          % (started, a.model or a.size, model_bytes / 2**20, a.prompt_tokens, a.tokens,
             a.threads, a.rounds, load_before, load_after))
    print("| allocator | load (ms) | TTFT (ms) | ms/token | CPU TTFT (ms) | CPU ms/token "
          "| peak RSS (MiB) | TTFT / fastest preload | ms/token / fastest | CPU TTFT / fastest "
          "| CPU ms/token / fastest | RSS / glibc |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in runs:
        m = med[name]
        print("| %s | %.0f | %.1f | %.2f | %.1f | %.2f | %.0f | %.3f | %.3f | %.3f | %.3f | "
              "%.3f |" % (
                  name, m["load_ms"], m["ttft_ms"], m["ms_per_token"], m["cpu_ttft_ms"],
                  m["cpu_ms_per_token"], m["peak_rss_kb"] / 1024,
                  m["ttft_ms"] / best["ttft_ms"], m["ms_per_token"] / best["ms_per_token"],
                  m["cpu_ttft_ms"] / best["cpu_ttft_ms"],
                  m["cpu_ms_per_token"] / best["cpu_ms_per_token"],
                  m["peak_rss_kb"] / med["glibc"]["peak_rss_kb"]))
    print()
    for name in runs:
        if name in PRELOADS:
            continue
        worst = max(med[name]["cpu_ms_per_token"] / best["cpu_ms_per_token"],
                    med[name]["cpu_ttft_ms"] / best["cpu_ttft_ms"])
        print("%s: CPU time per token %.3fx and CPU TTFT %.3fx the fastest preload's: %s" % (
            name, med[name]["cpu_ms_per_token"] / best["cpu_ms_per_token"],
            med[name]["cpu_ttft_ms"] / best["cpu_ttft_ms"],
            "within 5 %" if worst <= 1.05 else "NOT within 5 %"))
    for key in ("ms_per_token", "cpu_ms_per_token"):
        spread = {name: (min(x[key] for x in rs), max(x[key] for x in rs))
                  for name, rs in runs.items()}
        print("\n%s range over the rounds: " % key + "; ".join(
            "%s %.2f-%.2f" % (n, lo, hi) for n, (lo, hi) in spread.items()))

    if a.out:
        with open(a.out, "w") as f:
            json.dump({"started": started, "args": vars(a), "runs": runs, "medians": med}, f,
                      indent=1)
    if a.chart:
        chart(a.chart, med, a.size, started, [a.out] if a.out else [], a.machine, a.commit)


def chart(path, med, size, started, sources, machine, commit):
    try:
        import matplotlib
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import plot_results  # the chart stamp: title and metadata, as every results chart has
    except ImportError:
        sys.exit("llama_bench: no matplotlib for --chart in %s; Debian's is python3-matplotlib "
                 "for /usr/bin/python3 (the table above is complete)" % sys.executable)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(med)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, title in zip(axes, ("ttft_ms", "ms_per_token", "peak_rss_kb"),
                              ("TTFT (ms)", "time per token (ms)", "peak RSS (KiB)")):
        vals = [med[n][key] for n in names]
        ax.bar(range(len(names)), vals,
               color=["#888"] * len(PRELOADS) + ["#2a7"] * (len(names) - len(PRELOADS)))
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels([n.replace("numarena ", "numarena\n") for n in names],
                           rotation=30, ha="right", fontsize=7)
        ax.set_title(title + ", median")
    title = "llama.cpp (random %s model, mmap off) per allocator, medians\n%s, %s, commit %s" % (
        size, started.replace(" UTC", "Z"), machine or plot_results.this_machine(),
        commit or plot_results.this_commit())
    plot_results.save_chart(fig, path, title, sources)

if __name__ == "__main__":
    main()
