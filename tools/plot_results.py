#!/usr/bin/python3
"""Turns numarena's benchmark JSON into tables and PNG charts.

Inputs are the files the benchmarks write (see bench/RESULTS.md for the commands):
  bandwidth.json          `numarena bandwidth --json`          (schema numarena.bandwidth/1)
  decode.json             `numarena decode --json`             (schema numarena.decode/1)
  peers_bench.json,       Google Benchmark JSON of bench/peers_bench and
  peers_glibc_bench.json  bench/peers_glibc_bench (merged: glibc malloc is one more peer)
  arena_bench.json        Google Benchmark JSON of bench/arena_bench

  tools/plot_results.py all DIR           every chart and DIR/tables.md from the files in DIR
  tools/plot_results.py bandwidth FILE OUT_DIR
  tools/plot_results.py peers FILE [FILE...] --out OUT_DIR   (also prints the ratio table)
  tools/plot_results.py decode FILE OUT_DIR
  tools/plot_results.py targets FILE... [--rss FILE...] [--strict] [--chart PNG]
                                          the server workloads' line per row: numarena within 1.2x of
                                          the best of jemalloc, mimalloc, tcmalloc and glibc,
                                          and not slower than memkind or a jemalloc explicit
                                          arena (median above theirs and a one-sided U test
                                          of the runs at p < 0.05); with --rss
                                          (bench/rss_runs.sh's files), peak RSS growth within
                                          1.25x of the lowest of those four (the median of
                                          each process's peak).
                                          Prints the table and the failing rows; exit status 1
                                          only with --strict and a failing row. --chart draws
                                          each row's ratio to the best general peer
  tools/plot_results.py arena FILE        the arena table (docs/benchmarks.md): CPU ns per
                                          alloc+free pair on one thread, two-thread scaling,
                                          and the arena targets checked against the same run
  tools/plot_results.py override FILE [--check]
                                          bench/override_bench.py's JSON: per program, each
                                          numarena configuration's time and peak RSS as a
                                          ratio to the best LD_PRELOAD peer (median of the
                                          rounds), then the goal lines, PASS or FAIL
                                          each: time within 1.1x of the best peer, geometric
                                          mean of the time ratios at most 1.0, peak RSS within
                                          1.2x of the lowest peer, /bin/true at most 2 MiB of
                                          RSS over glibc, RSS after a freed burst and 2 s idle
                                          within 1.2x of the best peer. Exit status 1 only
                                          with --check and a failing line; --chart PNG
                                          draws the ratios
  tools/plot_results.py same-shape DIR_A DIR_B   exit 1 unless the JSON files of two result
                                                 directories have the same structure (keys,
                                                 matrix size, configurations, benchmark names)

Peers are compared by ratio to the best peer of the same workload and thread count, measured
in the same run: "x best" = best peer's allocations/s divided by this peer's (1.00 = best,
2.00 = half as fast). Absolute numbers on a shared machine drift; the ratios are the result.

Every chart's title (and PNG metadata) names the date of its data, the machine and the commit:
--machine and --commit say which (defaults: this machine and this checkout's HEAD, right for a
run made here now; give both when drawing an older run).

Needs matplotlib (Debian: python3-matplotlib, installed by tools/dev.sh deps); run it with
/usr/bin/python3 if another python3 comes first on PATH.
"""

import argparse
import datetime
import json
import statistics
import math
import os
import subprocess
import sys
from collections import OrderedDict

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover - environment problem, explained to the user
    sys.exit("plot_results.py needs matplotlib: apt-get install python3-matplotlib "
             "(or tools/dev.sh deps), then run it with /usr/bin/python3")

KERNELS = ["read", "write", "copy", "triad"]


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---- chart stamps ------------------------------------------------------------------------
# Every chart says when its data was measured, on what machine and at which commit: in its
# title, and in the PNG's metadata ("Title", and "Source": the JSON files it was drawn from,
# relative to the chart), which tests/tools/docs_test.py checks against the JSON files
# (bench/results keeps only the newest run of each benchmark; a chart must be drawn from it).

def doc_time(doc):
    """When a result file's run started (UTC), or None: `timestamp_utc` (numarena's JSON),
    Google Benchmark's `context.date`, or bench/llama_bench.py's `started`."""
    text = (doc.get("timestamp_utc") or doc.get("context", {}).get("date") or doc.get("started")
            or doc.get("date"))
    if not text:
        return None
    text = text.replace(" UTC", "+00:00").replace("Z", "+00:00")
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d %H:%M%z"):
        try:
            return datetime.datetime.strptime(text, fmt).astimezone(datetime.timezone.utc)
        except ValueError:
            pass
    return None


def stamp_date(paths):
    """The start of the run the files come from (the earliest of their times), as
    "YYYY-MM-DD HH:MMZ"; "date unknown" when none has one."""
    times = [t for t in (doc_time(load(p)) for p in paths) if t is not None]
    return min(times).strftime("%Y-%m-%d %H:%MZ") if times else "date unknown"


def this_machine():
    """"2-CPU Intel(R) Xeon(R) Processor": this machine, for charts of a run made here now."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()}-CPU {model}"


def this_commit():
    """The checkout's commit (short hash, "+changes" when the tree differs from it)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--", "lib",
                                "include", "bench", "tools"]).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+changes" if dirty else "")


def stamp(what, sources, machine=None, commit=None):
    """A chart title: what it shows, then "date, machine, commit C"."""
    return (f"{what}\n{stamp_date(sources)}, {machine or this_machine()}, "
            f"commit {commit or this_commit()}")


def save_chart(fig, path, title, sources, dpi=110, fontsize=10):
    """Titles, lays out and writes the chart with its title and sources in the metadata."""
    height = fig.get_figheight()  # inches: the two title lines take the top half inch
    fig.suptitle(title, fontsize=fontsize, y=1 - 0.06 / height, va="top")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
    here = os.path.dirname(os.path.abspath(path))
    fig.savefig(path, dpi=dpi, metadata={
        "Title": title.replace("\n", " - "),
        "Source": " ".join(os.path.relpath(os.path.abspath(s), here) for s in sources)})
    plt.close(fig)
    return path


# ---- bandwidth -------------------------------------------------------------------------

def bandwidth_tables(doc):
    """Markdown tables of the matrix: GB/s with % of best local and % of libc, latency."""
    cols = doc["memory_nodes"]
    out = []
    for kernel in KERNELS:
        limit = "memset" if kernel == "write" else "memcpy"
        out.append(f"**{kernel}** GB/s (% of best local, % of {limit})\n")
        out.append("| CPU node | " + " | ".join(f"mem {c}" for c in cols) + " | local / worst remote |")
        out.append("|---" * (len(cols) + 2) + "|")
        for row in doc["rows"]:
            cells = []
            for cell in row["cells"]:
                bw = cell["bytes_per_second"][kernel] / 1e9
                cells.append(f"{bw:.2f} ({100 * cell['fraction_of_best_local'][kernel]:.0f}%, "
                             f"{100 * cell['fraction_of_libc'][kernel]:.0f}%)")
            ratio = row["local_over_worst_remote"][kernel]
            ratio_text = f"{ratio:.2f}x" if ratio else "-"
            out.append(f"| cpu {row['cpu_node']} | " + " | ".join(cells) + f" | {ratio_text} |")
        out.append("")
    if doc.get("latency_measured"):
        out.append("**idle latency** ns (x local)\n")
        out.append("| CPU node | " + " | ".join(f"mem {c}" for c in cols) + " | worst remote / local |")
        out.append("|---" * (len(cols) + 2) + "|")
        for row in doc["rows"]:
            cells = [f"{c['latency_ns']:.1f} ({c['latency_relative_to_local']:.2f}x)" for c in row["cells"]]
            r = row["worst_remote_latency_over_local"]
            out.append(f"| cpu {row['cpu_node']} | " + " | ".join(cells) + (f" | {r:.2f}x |" if r else " | - |"))
        out.append("")
    lim = doc["limits"]
    out.append("Machine limits in this run: best local " +
               ", ".join(f"{k} {lim['best_local_bytes_per_second'][k] / 1e9:.2f}" for k in KERNELS) +
               f" GB/s; memset {lim['memset_bytes_per_second'] / 1e9:.2f} GB/s, "
               f"memcpy {lim['memcpy_bytes_per_second'] / 1e9:.2f} GB/s (read + write)" +
               (f"; best local latency {lim['best_local_latency_ns']:.1f} ns" if doc.get("latency_measured") else "") +
               ".")
    for note in doc.get("notes", []):
        out.append(f"\n> note: {note}")
    return "\n".join(out) + "\n"


def plot_bandwidth(doc, out_dir, title_note="", sources=(), machine=None, commit=None):
    """The heatmaps, or None on one node: a 1x1 matrix has nothing to compare (the table
    still prints its numbers)."""
    rows = doc["rows"]
    cols = doc["memory_nodes"]
    if len(rows) == 1 and len(cols) == 1:
        return None
    panels = KERNELS + (["latency"] if doc.get("latency_measured") else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1, 3.2 + 0.4 * len(rows)))
    if len(panels) == 1:
        axes = [axes]
    for ax, panel in zip(axes, panels):
        if panel == "latency":
            values = [[c["latency_ns"] for c in r["cells"]] for r in rows]
            title, fmt, cmap = "idle latency (ns)", "{:.0f}", "Reds"
        else:
            values = [[c["bytes_per_second"][panel] / 1e9 for c in r["cells"]] for r in rows]
            title, fmt, cmap = f"{panel} (GB/s)", "{:.2f}", "Blues"
        image = ax.imshow(values, cmap=cmap, aspect="auto", vmin=0)
        ax.set_title(title)
        ax.set_xticks(range(len(cols)), [f"mem {c}" for c in cols])
        ax.set_yticks(range(len(rows)), [f"cpu {r['cpu_node']}" for r in rows])
        top = max(max(v) for v in values) or 1
        for i, line in enumerate(values):
            for j, value in enumerate(line):
                ax.text(j, i, fmt.format(value), ha="center", va="center",
                        color="white" if value > 0.6 * top else "black", fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    title = stamp(f"numarena bandwidth matrix, {doc['buffer_bytes'] / 2**20:.0f} MiB per array"
                  f"{title_note}", sources, machine, commit)
    return save_chart(fig, os.path.join(out_dir, "bandwidth_matrix.png"), title, sources)


# ---- peers -------------------------------------------------------------------------------

def peer_runs(paths):
    """(workload, threads) -> OrderedDict(peer -> items_per_second), from GB JSON files."""
    groups = OrderedDict()
    context = None
    for path in paths:
        doc = load(path)
        context = context or doc.get("context", {})
        for b in doc.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            parts = b.get("run_name", b["name"]).split("/")
            if len(parts) < 2 or "items_per_second" not in b:
                continue
            key = (parts[0], int(b.get("threads", 1)))
            group = groups.setdefault(key, OrderedDict())
            # Of repetitions (and rounds in several files) the median, as in `targets`.
            group.setdefault(parts[1], []).append(b["items_per_second"])
    for group in groups.values():
        for peer in group:
            group[peer] = statistics.median(group[peer])
    return groups, context or {}


def peer_ratios(groups):
    """(workload, threads) -> (best peer, {peer: best_ips / ips})."""
    ratios = OrderedDict()
    for key, peers in groups.items():
        best_peer = max(peers, key=peers.get)
        ratios[key] = (best_peer, {p: peers[best_peer] / v for p, v in peers.items() if v > 0})
    return ratios


def peer_table(groups):
    ratios = peer_ratios(groups)
    peers = []
    for _, values in groups.items():
        for p in values:
            if p not in peers:
                peers.append(p)
    out = ["| workload | threads | best (allocs/s) | " + " | ".join(peers) + " |",
           "|---" * (len(peers) + 3) + "|"]
    for (workload, threads), (best, r) in ratios.items():
        best_ips = groups[(workload, threads)][best]
        cells = []
        for p in peers:
            if p not in r:
                cells.append("")
            elif p == best:
                cells.append("**1.00**")
            else:
                cells.append(f"{r[p]:.2f}")
        out.append(f"| {workload} | {threads} | {best} ({best_ips / 1e6:.3g} M) | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# The ratio axis of the peer charts is linear up to this; a larger ratio is drawn to the edge
# and written as text, so one 2,000x bar does not squeeze the 1-4x range that matters.
PEER_AXIS_LIMIT = 10.0


def peer_order(groups):
    """Every peer of every panel in one fixed order: numarena's first, then the rest, each
    alphabetical, so a peer keeps its row from panel to panel."""
    peers = {p for values in groups.values() for p in values}
    return sorted(peers, key=lambda p: (not p.startswith("numarena"), p))


def clipped(value, limit=PEER_AXIS_LIMIT):
    """(bar length, label): the bar stops at `limit`; the label keeps the real ratio."""
    return (min(value, limit), f" {value:.2f}" if value <= limit else f" {value:,.0f}x (off scale)")


def plot_peers(groups, out_dir, sources=(), machine=None, commit=None):
    ratios = peer_ratios(groups)
    order = peer_order(groups)
    paths = []
    for threads in sorted({t for (_, t) in ratios}):
        keys = [k for k in ratios if k[1] == threads]
        fig, axes = plt.subplots(len(keys), 1, figsize=(9, 2.0 + 1.25 * len(keys) * 1.6), squeeze=False)
        for ax, key in zip(axes[:, 0], keys):
            best, r = ratios[key]
            names = [n for n in order if n in r]
            bars = [clipped(r[n]) for n in names]
            colors = ["#1f77b4" if n.startswith("numarena") else "#999999" for n in names]
            ax.barh(names, [b for b, _ in bars], color=colors)
            ax.invert_yaxis()  # the fixed order top to bottom: numarena first
            ax.set_xlim(0, PEER_AXIS_LIMIT * 1.35)
            ax.axvline(1.0, color="black", linewidth=0.8)
            ax.set_title(f"{key[0]}  (threads: {threads}; x slower than the best peer, {best})", fontsize=9)
            ax.tick_params(labelsize=8)
            for i, (length, label) in enumerate(bars):
                ax.text(length, i, label, va="center", fontsize=7)
        title = stamp(f"allocator peers, {threads} thread(s): ratio to the best peer (1 = best, "
                      f"linear to {PEER_AXIS_LIMIT:.0f}x, larger written as text; blue = numarena)",
                      sources, machine, commit)
        paths.append(save_chart(fig, os.path.join(out_dir, f"peers_threads{threads}.png"),
                                title, sources, dpi=100))
    return paths


# ---- the server workloads' targets (bench/peer_workloads.hpp) ---------------------------

# (workload, threads, what the row is): the rows the targets are judged on.
TARGET_ROWS = [
    ("alloc_free_64KiB", 1, "64 KiB alloc+free pair"),
    ("alloc_free_2MiB", 1, "2 MiB alloc+free pair"),
    ("batch_small_random", 1, "8192 random sizes 16-512 B, random free order"),
    ("batch_large_random", 1, "512 random sizes 4-256 KiB, random free order"),
    ("batch_aligned64_random", 1, "2048 random sizes 64 B-256 KiB, 64-byte aligned, random order"),
    ("larson_like", 2, "larson-like, 2 threads, 1/32 remote frees"),
    ("producer_consumer", 2, "producer/consumer (allocate on one thread, free on the other)"),
    ("larson_like", 8, "larson-like, 8 threads on 2 CPUs"),
    ("realloc_growth", 1, "realloc growth 1 KiB -> 64 MiB (per realloc)"),
    ("tensor_loop", 1, "tensor loop 64 MiB-1 GiB, memset (per tensor)"),
]
TARGET_NUMARENA = ["numarena_arena", "numarena_arena_sized"]  # unsized free, sized free
TARGET_GENERAL = ["jemalloc_malloc", "mimalloc", "tcmalloc", "glibc_malloc"]
TARGET_NUMA_PEERS = ["memkind_node", "jemalloc_arena"]  # never slower than either
TARGET_TIME_RATIO = 1.2
TARGET_RSS_RATIO = 1.25


def benchmark_samples(paths, field):
    """(workload, threads) -> {peer: [b[field] of every successful iteration run]}: all the
    runs of one benchmark, its repetitions and the same benchmark in several files (rounds)."""
    runs = {}
    for path in paths:
        for b in load(path).get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            parts = b.get("run_name", b["name"]).split("/")
            if len(parts) < 2 or field not in b:
                continue
            row = runs.setdefault((parts[0], int(b.get("threads", 1))), {})
            row.setdefault(parts[1], []).append(b[field])
    return runs


def benchmark_rows(paths, field, pick=statistics.median):
    """(workload, threads) -> {peer: the value `pick` makes of benchmark_samples}: the median
    for throughput (the loaded machine slows some runs down a lot, and a median of several
    runs moves less than the fastest one), the largest for peak memory."""
    return {key: {peer: pick(values) for peer, values in row.items()}
            for key, row in benchmark_samples(paths, field).items()}


def process_medians(paths):
    """(workload, threads) -> {peer: [median ns per item of the peer's runs in each file]}: one
    value per process, the unit of the test against the NUMA peers (see SLOWER_ALPHA)."""
    def median_ns(values):
        return statistics.median([1e9 / v for v in values if v > 0] or [math.inf])

    medians = {}
    for path in paths:
        for key, row in benchmark_rows([path], "items_per_second", median_ns).items():
            for peer, ns in row.items():
                if ns != math.inf:
                    medians.setdefault(key, {}).setdefault(peer, []).append(ns)
    return medians


def peak_rows(paths, field):
    """(workload, threads) -> {peer: median over files of the largest b[field] in each file}:
    of one process's repetitions the largest (the peak is what the process must have room
    for), and of several processes (bench/rss_runs.sh runs each benchmark in several, since
    one process's peak moves by up to a third from the next one's) the median."""
    per_file = {}
    for path in paths:
        for key, row in benchmark_rows([path], field, max).items():
            for peer, value in row.items():
                per_file.setdefault(key, {}).setdefault(peer, []).append(value)
    return {key: {peer: statistics.median(values) for peer, values in row.items()}
            for key, row in per_file.items()}


# "Never slower than a NUMA peer" is decided by a test, not by the ratio of two medians alone:
# on the rows that are memory bandwidth for every peer (the tensor loop's memset, realloc's
# memcpy) the peers tie, and which median is ahead by 1-3 % moves from run to run. numarena
# counts as slower when its median is above the peer's and a one-sided Mann-Whitney U test of
# the two sets says so at SLOWER_ALPHA (Google Benchmark's tools/compare.py uses the same test
# and level). The unit of the test is the process (one benchmark JSON file): the median of a
# peer's runs in each file is one value. Repetitions in one process are not independent: they
# reuse the pages the peer got on its first pass, and which physical pages those were moves a
# bandwidth row by up to 20 % for the whole process (tensor loop, 2026-12-03: the sized peer
# 44-48 ms in all five repetitions of one process, 38-42 ms in two others, the other peers
# 38-41 ms in all three), so a test over runs counted one unlucky process as five slow runs.
# A test needs processes to decide: with fewer than SLOWER_MIN_PROCESSES on either side any
# excess of the median counts as slower.
SLOWER_ALPHA = 0.05
SLOWER_MIN_PROCESSES = 5


def _exact_u_tail(n1, n2, u):
    """P(U >= u) for the U statistic of samples of n1 and n2 with no ties, under the null
    hypothesis (every ordering of the n1 + n2 values equally likely), by counting orderings:
    count(a, b, k) = count(a - 1, b, k - b) + count(a, b - 1, k)."""
    counts = [[None] * (n2 + 1) for _ in range(n1 + 1)]
    for a in range(n1 + 1):
        for b in range(n2 + 1):
            if a == 0 or b == 0:
                counts[a][b] = [1]
                continue
            first, second = counts[a - 1][b], counts[a][b - 1]
            row = [0] * (a * b + 1)
            for k, c in enumerate(first):
                row[k + b] += c
            for k, c in enumerate(second):
                row[k] += c
            counts[a][b] = row
    dist = counts[n1][n2]
    return sum(dist[math.ceil(u):]) / sum(dist)


def slower_p_value(ours, theirs):
    """One-sided Mann-Whitney U test: the p-value of "`ours` tends to be larger than `theirs`"
    (larger = slower for times). Exact when no value repeats and both sets have at most 30
    values; otherwise the normal approximation with the tie correction and continuity
    correction."""
    n1, n2 = len(ours), len(theirs)
    if n1 == 0 or n2 == 0:
        return 1.0
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in ours for y in theirs)
    values = list(ours) + list(theirs)
    ties = len(set(values)) < len(values)
    if not ties and n1 <= 30 and n2 <= 30:
        return _exact_u_tail(n1, n2, u)
    n = n1 + n2
    tie_term = sum(c ** 3 - c for c in (values.count(v) for v in set(values)))
    variance = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def slower_verdict(ours, theirs):
    """(median ratio ours / theirs, p-value or None, slower?) for two sets of times."""
    ratio = statistics.median(ours) / statistics.median(theirs)
    if ratio <= 1.0:
        return ratio, None, False
    if len(ours) < SLOWER_MIN_PROCESSES or len(theirs) < SLOWER_MIN_PROCESSES:
        return ratio, None, True
    p = slower_p_value(ours, theirs)
    return ratio, p, p < SLOWER_ALPHA


def human_ns(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} µs"
    return f"{ns:.3g} ns"


def human_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def row_times(ips, workload, threads):
    """({peer: ns per item}, {general peer: ns per item}) of one row of benchmark_rows."""
    ns = {p: 1e9 / v for p, v in ips.get((workload, threads), {}).items() if v > 0}
    return ns, {p: ns[p] for p in TARGET_GENERAL if p in ns}


def plot_targets(time_paths, path, machine=None, commit=None):
    """The rows' chart: numarena's time per operation over the best general peer's (unsized
    and sized frees), with the 1.2x line. The README's headline chart."""
    ips = benchmark_rows(time_paths, "items_per_second")
    rows = []
    for workload, threads, label in TARGET_ROWS:
        ns, general = row_times(ips, workload, threads)
        if not general or not all(p in ns for p in TARGET_NUMARENA):
            continue
        best = min(general, key=general.get)
        rows.append((f"{label} [{best}]", [ns[p] / general[best] for p in TARGET_NUMARENA]))
    if not rows:
        sys.exit("no row of the server workloads in " + ", ".join(time_paths))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.55 * len(rows)))
    height = 0.38
    for k, (name, color) in enumerate((("numarena, unsized free", "#1f77b4"),
                                       ("numarena, sized free", "#8fbbd9"))):
        ys = [i + (k - 0.5) * height for i in range(len(rows))]
        values = [r[1][k] for r in rows]
        ax.barh(ys, values, height=height, color=color, label=name)
        for y, v in zip(ys, values):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(TARGET_TIME_RATIO, color="#d62728", linewidth=1, linestyle="--",
               label=f"the {TARGET_TIME_RATIO}x line")
    ax.set_xlim(0, max(1.5, max(max(r[1]) for r in rows) * 1.15))
    ax.set_xlabel("time per operation / the best general peer's (in brackets); medians of "
                  "all runs; below 1 = numarena faster", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
    title = stamp("numarena against the best of tcmalloc, mimalloc, jemalloc and glibc, "
                  "server workloads", time_paths, machine, commit)
    return save_chart(fig, path, title, time_paths)


def target_check(time_paths, rss_paths=()):
    """Returns (markdown table, [failure descriptions]) for TARGET_ROWS.

    Time is ns per item (1e9 / items_per_second, item = one allocation, or one realloc, or
    one tensor); memory is the rss_growth counter of the --rss files, which are meaningful
    only when each process ran a single benchmark (bench/rss_runs.sh)."""
    ips = benchmark_rows(time_paths, "items_per_second")
    samples = process_medians(time_paths)  # for the test against the NUMA peers
    rss = peak_rows(rss_paths, "rss_growth") if rss_paths else {}
    live = benchmark_rows(rss_paths, "live_bytes", max) if rss_paths else {}
    header = ["row", "threads", "best general peer", "numarena (x best)", "sized (x best)",
              "memkind", "jemalloc arena", "worst x memkind / x je arena (p: slower?)"]
    if rss_paths:
        header += ["live", "RSS growth numarena / sized", "lowest peer RSS", "x lowest"]
    header.append("verdict")
    out = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    failures = []
    for workload, threads, label in TARGET_ROWS:
        ns, general = row_times(ips, workload, threads)
        missing = [p for p in TARGET_NUMARENA + TARGET_GENERAL + TARGET_NUMA_PEERS if p not in ns]
        problems = []
        if missing:
            problems.append("missing " + ", ".join(missing))
        cells = [f"{label} (`{workload}`)", str(threads)]
        best = min(general, key=general.get) if general else None
        cells.append(f"{best} {human_ns(general[best])}" if best else "-")
        for p in TARGET_NUMARENA:
            if p in ns and best:
                ratio = ns[p] / general[best]
                cells.append(f"{human_ns(ns[p])} ({ratio:.2f}x)")
                if ratio > TARGET_TIME_RATIO:
                    problems.append(f"{p} {ratio:.2f}x best")
            else:
                cells.append("-")
        worst = []
        for q in TARGET_NUMA_PEERS:
            cells.append(human_ns(ns[q]) if q in ns else "-")
        ties = []
        row_samples = samples.get((workload, threads), {})
        for q in TARGET_NUMA_PEERS:
            verdicts = [slower_verdict(row_samples[p], row_samples[q]) for p in TARGET_NUMARENA
                        if p in ns and q in ns]
            if not verdicts:
                worst.append("-")
                continue
            ratio, p_value, slower = max(verdicts, key=lambda v: (v[2], v[0]))
            worst.append(f"{ratio:.2f}" + (f" (p={p_value:.2g})" if p_value is not None else ""))
            if slower:
                problems.append(f"slower than {q} ({ratio:.2f}x" +
                                (f", p={p_value:.2g})" if p_value is not None else ")"))
            elif ratio > 1.0:
                ties.append(f"tie with {q} ({ratio:.2f}x, p={p_value:.2g})")
        cells.append(" / ".join(worst))
        if rss_paths:
            r = rss.get((workload, threads), {})
            lv = live.get((workload, threads), {})
            if r:
                cells.append(human_bytes(max(lv.values())) if lv else "-")
                cells.append(" / ".join(human_bytes(r[p]) if p in r else "-" for p in TARGET_NUMARENA))
                peer_rss = {p: r[p] for p in TARGET_GENERAL if p in r}
                low = min(peer_rss, key=peer_rss.get) if peer_rss else None
                cells.append(f"{low} {human_bytes(peer_rss[low])}" if low else "-")
                if low:
                    # The floor of one page keeps a peer that grew by nothing from making
                    # every ratio infinite.
                    floor = max(peer_rss[low], 4096)
                    worst_rss = max((r[p] for p in TARGET_NUMARENA if p in r), default=None)
                    if worst_rss is None:
                        cells.append("-")
                    else:
                        x = worst_rss / floor
                        cells.append(f"{x:.2f}")
                        if x > TARGET_RSS_RATIO:
                            problems.append(f"RSS {x:.2f}x lowest peer")
                else:
                    cells.append("-")
            else:
                cells += ["-", "-", "-", "-"]
        verdict = "**fail**: " + "; ".join(problems) if problems else "pass"
        cells.append(verdict + ("; " + "; ".join(ties) if ties else ""))
        if problems:
            failures.append(f"{workload} threads:{threads}: " + "; ".join(problems))
        out.append("| " + " | ".join(cells) + " |")
    if rss:
        peers = TARGET_NUMARENA + TARGET_GENERAL + TARGET_NUMA_PEERS
        out += ["", "Peak RSS growth per peer (x the workload's live bytes):", "",
                "| row | threads | live | " + " | ".join(peers) + " |", "|---" * (len(peers) + 3) + "|"]
        for workload, threads, label in TARGET_ROWS:
            r = rss.get((workload, threads))
            if not r:
                continue
            lv = max(live.get((workload, threads), {0: 0}).values())
            cells = [f"{human_bytes(r[p])} ({r[p] / lv:.2f})" if p in r and lv else
                     (human_bytes(r[p]) if p in r else "-") for p in peers]
            out.append(f"| {label} | {threads} | {human_bytes(lv)} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n", failures


# ---- arena alloc+free pairs (bench/arena_bench) ----------------------------------------

ARENA_PEERS = OrderedDict([
    ("numarena", "numarena node arena"),
    ("je_malloc", "jemalloc `malloc`"),
    ("je_arena", "jemalloc `mallocx` on a plain arena"),
    ("mimalloc", "mimalloc"),
    ("memkind", "memkind node-bound kind (`MEMKIND_REGULAR`)"),
    ("numa_onnode", "`numa_alloc_onnode` + `numa_free`"),
])


def size_label(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def arena_runs(doc):
    """(peer, size, threads) -> (cpu ns per pair, real ns per pair) from arena_bench JSON; of
    repetitions (--benchmark_repetitions), the median of each."""
    samples = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        parts = b.get("run_name", b["name"]).split("/")
        if len(parts) < 2 or not parts[0].startswith("BM_"):
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        samples.setdefault((parts[0][3:], int(parts[1]), int(b.get("threads", 1))), []).append(
            (b["cpu_time"] * scale, b["real_time"] * scale))
    return {key: (statistics.median(c for c, _ in values), statistics.median(r for _, r in values))
            for key, values in samples.items()}


def arena_table(doc):
    runs = arena_runs(doc)
    sizes = sorted({size for (_, size, _) in runs})
    out = ["| CPU ns per pair, one thread (two-thread scaling) | " +
           " | ".join(size_label(s) for s in sizes) + " |",
           "|---" + "|---:" * len(sizes) + "|"]
    for peer, label in ARENA_PEERS.items():
        cells = []
        for size in sizes:
            one, two = runs.get((peer, size, 1)), runs.get((peer, size, 2))
            if one is None:
                cells.append("")
                continue
            cell = f"{one[0]:.0f}" if one[0] >= 100 else f"{one[0]:.3g}"
            if two is not None and two[1] > 0:
                cell += f" ({one[1] / two[1]:.2f}x)"
            cells.append(cell)
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    checks = []
    small = min(sizes) if sizes else None
    if small is not None and ("numarena", small, 1) in runs:
        ours = runs[("numarena", small, 1)][0]
        if ("je_malloc", small, 1) in runs:
            ratio = ours / runs[("je_malloc", small, 1)][0]
            checks.append(f"- {size_label(small)}: {ratio:.2f}x jemalloc `malloc` "
                          f"(target at most 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
        if ("memkind", small, 1) in runs:
            speedup = runs[("memkind", small, 1)][0] / ours
            checks.append(f"- {size_label(small)}: {speedup:.1f}x faster than memkind's node-bound "
                          f"kind (target at least 2x: {'met' if speedup >= 2 else 'NOT met'})")
    for size in sizes:
        one, two = runs.get(("numarena", size, 1)), runs.get(("numarena", size, 2))
        if one and two and two[1] > 0:
            scaling = one[1] / two[1]
            checks.append(f"- {size_label(size)}: two threads scale {scaling:.2f}x "
                          f"(target at least 1.8x: {'met' if scaling >= 1.8 else 'NOT met'})")
    return "\n".join(out) + "\n\n" + "\n".join(checks) + "\n"


# ---- decode ------------------------------------------------------------------------------

def decode_table(doc):
    o = doc["options"]
    out = [f"{o['sequences']} sequences x ({o['prompt_tokens']} prompt + {o['decode_steps']} decode) tokens, "
           f"{o['layers']} layers, {o['kv_heads']} KV heads x {o['head_dim']}, {o['threads']} worker threads "
           f"on CPU node(s) {', '.join(map(str, doc['cpu_nodes']))}.\n",
           "| configuration | P50 TTFT (ms) | P99 TBT (ms) | tokens/s | KV node-local | what it does |",
           "|---|---:|---:|---:|---:|---|"]
    for c in doc["configurations"]:
        out.append(f"| {c['name']} | {c['p50_ttft_ms']:.1f} | {c['p99_tbt_ms']:.2f} | "
                   f"{c['decode_tokens_per_second']:.1f} | {100 * c['kv_local_fraction']:.1f}% | {c['description']} |")
    for note in doc.get("notes", []):
        out.append(f"\n> note: {note}")
    return "\n".join(out) + "\n"


def plot_decode(doc, out_dir, title_note="", sources=(), machine=None, commit=None):
    configs = doc["configurations"]
    names = [c["name"] for c in configs]
    metrics = [("P50 TTFT (ms)", "p50_ttft_ms"), ("P99 TBT (ms)", "p99_tbt_ms"),
               ("decode tokens/s", "decode_tokens_per_second"), ("KV node-local (%)", "kv_local_fraction")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(15, 3.6))
    for ax, (label, key) in zip(axes, metrics):
        values = [c[key] * (100 if key == "kv_local_fraction" else 1) for c in configs]
        ax.bar(range(len(names)), values, color=["#999999", "#d62728", "#ff7f0e", "#2ca02c", "#1f77b4"][:len(names)])
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=10)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    note = " (one NUMA node: the configurations coincide)" if len(doc["cpu_nodes"]) == 1 else ""
    title = stamp(f"numarena decode table{note}{title_note}", sources, machine, commit)
    return save_chart(fig, os.path.join(out_dir, "decode_table.png"), title, sources)


# ---- shape comparison ---------------------------------------------------------------------

def shape(value):
    """The structure of a JSON value without its numbers: keys, list lengths, names."""
    if isinstance(value, dict):
        if "benchmarks" in value:  # Google Benchmark: the set of benchmark names is the shape
            return sorted(b.get("run_name", b["name"]) for b in value["benchmarks"]
                          if b.get("run_type", "iteration") == "iteration")
        return {k: shape(v) for k, v in value.items()
                if k not in ("timestamp_utc", "notes", "context")}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, str):
        return value
    return type(value).__name__ if not isinstance(value, (int, float)) else "number"


def same_shape(dir_a, dir_b):
    names = sorted(f for f in os.listdir(dir_a) if f.endswith(".json"))
    problems = []
    for name in names:
        path_b = os.path.join(dir_b, name)
        if not os.path.exists(path_b):
            problems.append(f"{name}: missing in {dir_b}")
        elif shape(load(os.path.join(dir_a, name))) != shape(load(path_b)):
            problems.append(f"{name}: structure differs")
    for problem in problems:
        print(problem)
    print("same shape" if not problems else f"{len(problems)} difference(s)")
    return 0 if not problems else 1


# ---- override -----------------------------------------------------------------

OVERRIDE_TIME_RATIO = 1.1        # each program's time, numarena / best peer
OVERRIDE_GEOMEAN_RATIO = 1.0     # geometric mean of those ratios
OVERRIDE_RSS_RATIO = 1.2         # each program's peak RSS, numarena / lowest peer
OVERRIDE_FIXED_COST_KIB = 2048   # /bin/true's peak RSS over glibc's
OVERRIDE_IDLE_RATIO = 1.2        # RSS after a freed burst and 2 s idle, numarena / best peer
# The inference programs' own goal lines: (time ratio, peak RSS ratio).
OVERRIDE_INFERENCE_RATIOS = {"llama.cpp": (1.05, 1.1), "pytorch decode": (1.05, 1.1)}


def override_medians(runs, field):
    """Median of `field` over the runs that exited 0; None when none did."""
    values = [run[field] for run in runs if run.get("exit") == 0 and field in run]
    return statistics.median(values) if values else None


def override_report(doc):
    """(table text, [(goal line, passed)]) for bench/override_bench.py's JSON."""
    if doc.get("benchmark") != "override" or "workloads" not in doc:
        raise ValueError("not bench/override_bench.py's JSON (no \"benchmark\": \"override\")")
    peers, ours = doc["peers"], doc["numarena"]
    lines = []
    goals = []
    head = (f"override benchmark, {doc.get('date', '?')}, commit {doc.get('commit', '?')}, "
            f"{doc.get('rounds', '?')} round(s), load average "
            f"{', '.join(f'{x:.1f}' for x in doc.get('load_average', []))}")
    lines.append(head)
    if doc.get("quick"):
        lines.append("quick run: small inputs, one round; its timings prove nothing")
    lines.append("")
    lines.append("| program | best peer (time) | " + " | ".join(f"{c} time" for c in ours) +
                 " | lowest peer (RSS) | " + " | ".join(f"{c} RSS" for c in ours) + " |")
    lines.append("|---" * (3 + 2 * len(ours)) + "|")
    time_ratios = {c: [] for c in ours}
    chart_rows = []  # (program, {config: time ratio}, {config: RSS ratio})
    for name, workload in doc["workloads"].items():
        kind, runs = workload["kind"], workload["runs"]
        failed = [c for c in peers + ours if override_medians(runs.get(c, []), "wall_s") is None]
        if failed:
            lines.append(f"| {name} | no successful run under {', '.join(failed)} |" +
                         " |" * (1 + 2 * len(ours)))
            for c in ours:
                goals.append((f"{name} under {c}: every configuration ran", False))
            continue
        field = "idle_rss_kib" if kind == "idle" else "maxrss_kib"
        time = {c: override_medians(runs[c], "wall_s") for c in peers + ours}
        rss = {c: override_medians(runs[c], field) for c in peers + ours}
        best = min(peers, key=lambda c: time[c])
        lean = min(peers, key=lambda c: rss[c])
        lines.append(
            f"| {name} | {best} {time[best]:.3f} s | " +
            " | ".join(f"{time[c] / time[best]:.2f}x" for c in ours) +
            f" | {lean} {rss[lean] / 1024:.1f} MiB | " +
            " | ".join(f"{rss[c] / rss[lean]:.2f}x ({rss[c] / 1024:.1f})" for c in ours) + " |")
        chart_rows.append((name, {c: time[c] / time[best] for c in ours},
                           {c: rss[c] / rss[lean] for c in ours}))
        for c in ours:
            if kind in ("shape", "program"):
                time_goal, rss_goal = OVERRIDE_INFERENCE_RATIOS.get(
                    name, (OVERRIDE_TIME_RATIO, OVERRIDE_RSS_RATIO))
                ratio = time[c] / time[best]
                time_ratios[c].append(ratio)
                goals.append((f"{name} under {c}: time {ratio:.2f}x best peer ({best}) "
                              f"<= {time_goal}x", ratio <= time_goal))
                ratio = rss[c] / rss[lean]
                goals.append((f"{name} under {c}: peak RSS {ratio:.2f}x lowest peer ({lean}) "
                              f"<= {rss_goal}x", ratio <= rss_goal))
            elif kind == "fixed":
                extra = rss[c] - rss["glibc"]
                goals.append((f"fixed cost ({name}) under {c}: {extra / 1024:+.1f} MiB of peak RSS "
                              f"over glibc <= {OVERRIDE_FIXED_COST_KIB // 1024} MiB",
                              extra <= OVERRIDE_FIXED_COST_KIB))
            elif kind == "idle":
                ratio = rss[c] / rss[lean]
                goals.append((f"RSS after a freed burst and idle under {c}: {ratio:.2f}x best "
                              f"peer ({lean}) <= {OVERRIDE_IDLE_RATIO}x",
                              ratio <= OVERRIDE_IDLE_RATIO))
    for c in ours:
        if time_ratios[c]:
            mean = math.exp(sum(math.log(r) for r in time_ratios[c]) / len(time_ratios[c]))
            goals.append((f"geometric mean of the time ratios under {c}: {mean:.2f}x "
                          f"<= {OVERRIDE_GEOMEAN_RATIO}x", mean <= OVERRIDE_GEOMEAN_RATIO))
    return "\n".join(lines), goals, chart_rows


def plot_override(chart_rows, ours, path, source, doc, note=""):
    """Two panels, time and peak RSS: per program, each numarena configuration's ratio to the
    best peer (1 = at par; the goal lines dashed), clipped like the peer charts."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.42 * len(chart_rows)), sharey=True)
    names = [row[0] for row in chart_rows]
    height = 0.8 / len(ours)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    for ax, index, title, goal in ((axes[0], 1, "time / best peer", OVERRIDE_TIME_RATIO),
                                   (axes[1], 2, "peak RSS / lowest peer", OVERRIDE_RSS_RATIO)):
        for k, config in enumerate(ours):
            bars = [clipped(row[index][config]) for row in chart_rows]
            ys = [i + (k - (len(ours) - 1) / 2) * height for i in range(len(chart_rows))]
            ax.barh(ys, [b for b, _ in bars], height=height, color=colors[k % len(colors)],
                    label=config)
            for y, (length, label) in zip(ys, bars):
                ax.text(length, y, label, va="center", fontsize=6)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=8)
        ax.set_xlim(0, PEER_AXIS_LIMIT * 1.35)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.axvline(goal, color="black", linewidth=0.8, linestyle="--")
        ax.set_title(f"{title} (dashed: the goal, {goal}x)", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].invert_yaxis()  # the panels share it: the benchmark's order, top to bottom
    axes[0].legend(fontsize=8, loc="lower right")
    title = stamp("numarena run against the best LD_PRELOAD peer" + (f" - {note}" if note else ""),
                  [source], machine=doc.get("host"), commit=doc.get("commit"))
    return save_chart(fig, path, title, [source], dpi=100)


# ---- main --------------------------------------------------------------------------------

def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    stamped = argparse.ArgumentParser(add_help=False)
    stamped.add_argument("--machine", help="the machine the data is from, for the chart titles "
                         "(default: this machine, e.g. '2-CPU Intel(R) Xeon(R) Processor')")
    stamped.add_argument("--commit", help="the commit the measured code was at (default: this "
                         "checkout's HEAD)")
    p = sub.add_parser("all", parents=[stamped])
    p.add_argument("dir")
    p.add_argument("--note", default="", help="added to every chart title, e.g. 'NUMA lab 2s'")
    p = sub.add_parser("bandwidth", parents=[stamped])
    p.add_argument("file")
    p.add_argument("out_dir")
    p = sub.add_parser("peers", parents=[stamped])
    p.add_argument("files", nargs="+")
    p.add_argument("--out", dest="out_dir")
    p = sub.add_parser("decode", parents=[stamped])
    p.add_argument("file")
    p.add_argument("out_dir")
    p = sub.add_parser("arena")
    p.add_argument("file")
    p = sub.add_parser("targets", parents=[stamped])
    p.add_argument("files", nargs="+")
    p.add_argument("--rss", nargs="+", default=[], help="bench/rss_runs.sh's JSON files")
    p.add_argument("--strict", action="store_true", help="exit 1 when a row fails")
    p.add_argument("--chart", help="also draw the rows' chart (ratio to the best general peer) "
                   "into this PNG")
    p = sub.add_parser("override")
    p.add_argument("file")
    p.add_argument("--check", action="store_true", help="exit 1 when a goal line fails")
    p.add_argument("--chart", help="also draw the ratios into this PNG")
    p.add_argument("--note", default="", help="added to the chart's title")
    p = sub.add_parser("same-shape")
    p.add_argument("dir_a")
    p.add_argument("dir_b")
    args = parser.parse_args(argv)

    if args.command == "same-shape":
        return same_shape(args.dir_a, args.dir_b)

    if args.command == "targets":
        table, failures = target_check(args.files, args.rss)
        print(table)
        if failures:
            print(f"{len(failures)} of {len(TARGET_ROWS)} rows fail:")
            for f in failures:
                print("  " + f)
        else:
            print(f"all {len(TARGET_ROWS)} rows pass")
        if args.chart:  # its path on stderr: stdout is the table (targets.md)
            print(plot_targets(args.files, args.chart, args.machine, args.commit), file=sys.stderr)
        return 1 if failures and args.strict else 0

    if args.command == "override":
        try:
            doc = load(args.file)
            table, goals, chart_rows = override_report(doc)
        except (ValueError, KeyError, TypeError) as error:
            sys.exit(f"plot_results.py override: {args.file}: {error}")
        print(table)
        if args.chart:
            print(plot_override(chart_rows, doc["numarena"], args.chart, args.file, doc,
                                args.note))
        print()
        for line, passed in goals:
            print(f"{'PASS' if passed else 'FAIL'}  {line}")
        failing = sum(1 for _, passed in goals if not passed)
        print(f"{len(goals) - failing} of {len(goals)} goal lines pass")
        return 1 if failing and args.check else 0

    if args.command == "arena":
        print(arena_table(load(args.file)))
        return 0

    if args.command == "bandwidth":
        doc = load(args.file)
        print(bandwidth_tables(doc))
        print(plot_bandwidth(doc, args.out_dir, "", [args.file], args.machine, args.commit)
              or "no heatmap: one NUMA node (1x1)")
    elif args.command == "peers":
        groups, _ = peer_runs(args.files)
        if not groups:
            sys.exit("no benchmark with items_per_second in " + ", ".join(args.files))
        print(peer_table(groups))
        if args.out_dir:
            for path in plot_peers(groups, args.out_dir, args.files, args.machine, args.commit):
                print(path)
    elif args.command == "decode":
        doc = load(args.file)
        print(decode_table(doc))
        print(plot_decode(doc, args.out_dir, "", [args.file], args.machine, args.commit))
    elif args.command == "all":
        d = args.dir
        title_note = f" - {args.note}" if args.note else ""
        sections = []
        bandwidth = os.path.join(d, "bandwidth.json")
        if os.path.exists(bandwidth):
            doc = load(bandwidth)
            sections.append("### Bandwidth and latency matrix\n\n" + bandwidth_tables(doc))
            print(plot_bandwidth(doc, d, title_note, [bandwidth], args.machine, args.commit)
                  or "no heatmap: one NUMA node (1x1)")
        peers = [os.path.join(d, f) for f in ("peers_bench.json", "peers_glibc_bench.json",
                                              "peers_tcmalloc_bench.json")
                 if os.path.exists(os.path.join(d, f))]
        if peers:
            groups, _ = peer_runs(peers)
            sections.append("### Peer comparison (x best peer; 1.00 = best)\n\n" + peer_table(groups))
            for path in plot_peers(groups, d, peers, args.machine, args.commit):
                print(path)
        decode = os.path.join(d, "decode.json")
        if os.path.exists(decode):
            doc = load(decode)
            sections.append("### Decode table\n\n" + decode_table(doc))
            print(plot_decode(doc, d, title_note, [decode], args.machine, args.commit))
        if not sections:
            sys.exit(f"{d}: none of bandwidth.json, peers_bench.json, peers_glibc_bench.json, decode.json")
        with open(os.path.join(d, "tables.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(sections))
        print(os.path.join(d, "tables.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
