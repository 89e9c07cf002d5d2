#!/usr/bin/env python3
"""The override benchmark: real, unmodified programs under each malloc a server operator
would preload (glibc's own, and Debian's jemalloc, mimalloc and tcmalloc as LD_PRELOAD) and
under `numarena run --membind 0` and `numarena run --local`. Every run is a process of its own;
the harness measures its wall time and its peak RSS (wait4's ru_maxrss, which covers the
program's children too: gcc's cc1) from bench/override/spawn.c, a static launcher, so the
harness's own resident set is not counted.

Programs (the "workloads" of the JSON):
  - override_shapes (bench/override/shapes.cpp): one small program per allocation shape
    (random small sizes on 2 threads, producer/consumer, larson with unsized and sized
    delete, 5-25 MiB blocks, tiny objects, many short-lived threads, false sharing);
  - Debian programs: python3 (bench/override/py_alloc.py: objects and 8 MiB bytearrays),
    `sort` on generated lines, `sqlite3` on a generated SQL workload, `gcc -O2` of a generated
    C file, `redis-server` serving `redis-benchmark` (bench/override/redis_round.sh: only the
    server runs under the allocator; Debian links redis with jemalloc, so its "glibc" run is
    Debian's jemalloc), a PyTorch decode loop (bench/override/torch_decode.py, python3-torch,
    no numarena import);
  - the llama.cpp driver (tools/llama/driver.mjs, node-llama-cpp, a generated small model):
    model load, prefill and decode in one process;
  - the fixed cost: /bin/true (peak RSS of a program that does nothing);
  - idle RSS: override_shapes idle-rss frees a burst and idles, then reports its VmRSS.

Rounds alternate: each round runs every workload once under every configuration, the order of
the configurations rotated by one per round and reversed every other round, so a slow spell of
a shared machine falls on different allocators, and no configuration always runs right after
the same one (a rotation alone keeps the cyclic order: the first numarena run after a peer's
paid the kernel's zeroing of huge pages in every round, bench/RESULTS.md, "big-blocks"). Before the runs, `cat /proc/self/maps` under each configuration shows
that its allocator really is in the process (or, for glibc, that none of the others is).

    bench/override_bench.py --numarena build/tools/numarena --shapes build/bench/override_shapes
        [--rounds 3] [--quick] [--only sort,larson,...] [--out results.json]

--quick: one round of small inputs (a few seconds in all): it proves the harness works, its
timings mean nothing. Exit status 0 when every run exited 0; 1 when one failed (the JSON is
written all the same, the failed run with its exit status and stderr); 2 on bad arguments or a
missing allocator library. tools/plot_results.py override reads the JSON: ratios to the best
peer and the goal lines (docs/benchmarks.md).
"""

import argparse
import datetime
import shutil
import json
import os
import platform
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBDIR = "/usr/lib/x86_64-linux-gnu"
# Debian 12 packages: libjemalloc2, libmimalloc2.0, libtcmalloc-minimal4.
PEER_LIBRARIES = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
PEERS = ("glibc", "jemalloc", "mimalloc", "tcmalloc")
NODE = shutil.which("node") or "node"
# Debian's interpreter, not whatever `python3` is first on PATH: a pyenv shim there is a shell
# script that starts several processes before the interpreter, and the rows would measure
# process start-up under each allocator instead of the interpreter's allocations.
PYTHON = "/usr/bin/python3"
NUMARENA_CONFIGS = ("numarena --membind 0", "numarena --local")
SHAPES = ("random-small", "producer-consumer", "larson", "larson-sized", "big-blocks",
          "tiny-objects", "many-threads", "false-sharing")


class Config:
    """One allocator: the environment that puts it in a program, and the name of its library
    in /proc/PID/maps (None for glibc's malloc)."""

    def __init__(self, name, env, marker):
        self.name, self.env, self.marker = name, env, marker


def numarena_environment(cli, policy_args, base):
    """The environment `numarena run POLICY --` gives the program it execs. The runs use it
    directly: `numarena run` only checks its arguments, sets these variables and execs, but a
    process keeps the peak RSS it had before an exec in ru_maxrss, so going through the CLI
    would add the CLI's own resident set to every program's peak."""
    out = subprocess.run([cli, "run", *policy_args, "--", "env", "-0"], env=base,
                         capture_output=True, check=False)
    if out.returncode != 0:
        sys.exit(f"override_bench: numarena run {' '.join(policy_args)} failed: "
                 f"{out.stderr.decode(errors='replace').strip()}")
    env = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    return {k: v for k, v in env.items() if base.get(k) != v}


def configurations(cli):
    base = dict(os.environ)
    for name in ("LD_PRELOAD", "NUMARENA_POLICY", "NUMARENA_BUDGET", "NUMARENA_METRICS_PORT"):
        base.pop(name, None)
    configs = [Config("glibc", base, None)]
    for name in PEERS[1:]:
        library, package = PEER_LIBRARIES[name]
        path = os.path.join(LIBDIR, library)
        if not os.path.exists(path):
            sys.exit(f"override_bench: {path} is missing: install Debian's {package} "
                     "(tools/dev.sh deps)")
        configs.append(Config(name, dict(base, LD_PRELOAD=path), library.split(".so")[0]))
    for name, policy_args in (("numarena --membind 0", ["--membind", "0"]),
                              ("numarena --local", ["--local"])):
        added = numarena_environment(cli, policy_args, base)
        configs.append(Config(name, dict(base, **added), "libnumarena_preload"))
    return configs


def check_loaded(configs):
    """Each configuration's allocator is mapped into the program it starts (and glibc's run
    has none of the others): otherwise the comparison would measure glibc six times."""
    markers = sorted({c.marker for c in configs if c.marker})
    for config in configs:
        maps = subprocess.run(["cat", "/proc/self/maps"], env=config.env,
                              capture_output=True, text=True, check=True).stdout
        found = [m for m in markers if m in maps]
        want = [config.marker] if config.marker else []
        if found != want:
            sys.exit(f"override_bench: under '{config.name}' the process maps {found or 'no'} "
                     f"preloaded allocator, expected {want or 'none'}")


def write_llama_model(work, quick):
    """The llama.cpp driver's model (tools/llama/make_gguf.py, random weights)."""
    model = os.path.join(work, "model.gguf")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "llama", "make_gguf.py"), model,
                    "--size", "tiny" if quick else "small"], check=True,
                   stdout=subprocess.DEVNULL)
    return model


def write_inputs(work, quick):
    """Generated inputs, the same for every configuration (a fixed seed)."""
    rng = random.Random(35)
    lines = 20_000 if quick else 600_000
    sort_input = os.path.join(work, "lines.txt")
    with open(sort_input, "w") as f:
        for _ in range(lines):
            f.write("%016x %s\n" % (rng.getrandbits(64), "w" * rng.randrange(4, 60)))
    rows = 2_000 if quick else 150_000
    sql = os.path.join(work, "workload.sql")
    with open(sql, "w") as f:
        f.write("CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v TEXT, n INTEGER);\nBEGIN;\n")
        for i in range(rows):
            f.write("INSERT INTO t(k, v, n) VALUES('k%d', '%s', %d);\n"
                    % (rng.randrange(rows // 10 + 1), "v" * rng.randrange(8, 200),
                       rng.randrange(1000)))
        f.write("COMMIT;\nCREATE INDEX t_k ON t(k);\n"
                "SELECT k, count(*), sum(n), max(length(v)) FROM t GROUP BY k ORDER BY 3 DESC "
                "LIMIT 5;\n"
                "SELECT count(*) FROM t a JOIN t b ON a.k = b.k WHERE a.n < 10;\n")
    functions = 30 if quick else 900
    source = os.path.join(work, "compile_me.c")
    with open(source, "w") as f:
        for i in range(functions):
            f.write("struct s%d { int a[%d]; double d; };\n" % (i, 1 + i % 7))
            f.write("int f%d(int x) { struct s%d s = {0}; for (int i = 0; i < %d; ++i) "
                    "{ s.a[i %% %d] += x * i; s.d += s.a[0] / (x + 1.0); } "
                    "return s.a[0] + (int)s.d; }\n" % (i, i, 10 + i % 13, 1 + i % 7))
    return {"sort": sort_input, "sql": sql, "source": source}


def workloads(shapes_program, inputs, quick):
    """(name, kind, argv, stdin path or None); kind: shape, program, fixed or idle. The llama.cpp
    driver's argv names its model as "{model}", written only when it is chosen."""
    scale = "0.02" if quick else "1"
    here = os.path.join(ROOT, "bench", "override")
    script = os.path.join(here, "py_alloc.py")
    prompt, tokens = ("8", "8") if quick else ("64", "64")
    result = [(shape, "shape", [shapes_program, shape, scale], None) for shape in SHAPES]
    result += [
        ("python3 objects", "program",
         [PYTHON, script, "objects", "1" if quick else "15"], None),
        ("python3 bytearrays", "program",
         [PYTHON, script, "bytearrays", "64" if quick else "1024"], None),
        ("sort", "program", ["sort", "-o", "/dev/null", inputs["sort"]], None),
        ("sqlite3", "program", ["sqlite3", ":memory:"], inputs["sql"]),
        ("gcc -O2", "program", ["gcc", "-O2", "-c", inputs["source"], "-o", "/dev/null"], None),
        ("redis", "program",
         [os.path.join(here, "redis_round.sh"), "5000" if quick else "100000", "256"], None),
        ("pytorch decode", "program",
         ["/usr/bin/python3", os.path.join(here, "torch_decode.py"), "0.05" if quick else "1"],
         None),
        ("llama.cpp", "program",
         [NODE, os.path.join(ROOT, "tools", "llama", "driver.mjs"), "--model", "{model}",
          "--prompt-tokens", prompt, "--tokens", tokens, "--ctx", "256", "--threads", "1"],
         None),
        ("/bin/true", "fixed", ["/bin/true"], None),
        ("idle-rss", "idle", [shapes_program, "idle-rss", "0.1" if quick else "1"], None),
    ]
    return result


def missing_programs(names):
    """What the chosen workloads need that this machine lacks, each with how to get it."""
    missing = []
    if "redis" in names and not (shutil.which("redis-server") and
                                 shutil.which("redis-benchmark")):
        missing.append("redis needs Debian's redis-server and redis-tools")
    if "pytorch decode" in names and subprocess.run(
            ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        missing.append("pytorch decode needs Debian's python3-torch")
    if "llama.cpp" in names and not (
            shutil.which(NODE) and
            os.path.isdir(os.path.join(ROOT, "tools", "llama", "node_modules", "node-llama-cpp"))):
        missing.append("llama.cpp needs Node.js >= 20 on PATH and tools/llama/node_modules")
    return missing


def run_one(spawn, config, argv, stdin_path):
    """Runs argv under config through override_spawn: wall seconds, peak RSS (KiB), CPU
    seconds, exit status, output."""
    env = dict(config.env, LC_ALL="C")
    with open(stdin_path or os.devnull, "rb") as stdin, \
            tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(mode="r") as result:
        process = subprocess.run([spawn, result.name, *argv], env=env,
                                 stdin=stdin, stdout=out, stderr=err, check=False)
        fields = dict(item.split("=", 1) for item in result.read().split())
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode(errors="replace")[-2000:]
        if process.returncode != 0 or "status" not in fields:
            return {"wall_s": 0.0, "maxrss_kib": 0, "cpu_s": 0.0, "exit": -1, "stdout": "",
                    "stderr": f"override_spawn exited {process.returncode}: {stderr}"}
        return {
            "wall_s": int(fields["wall_ns"]) / 1e9,
            "maxrss_kib": int(fields["maxrss_kib"]),
            "cpu_s": (int(fields["utime_us"]) + int(fields["stime_us"])) / 1e6,
            "exit": int(fields["status"]),
            "stdout": out.read().decode(errors="replace")[-2000:],
            "stderr": stderr,
        }


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numarena", required=True, help="the numarena CLI")
    parser.add_argument("--shapes", required=True, help="override_shapes (build/bench/)")
    parser.add_argument("--spawn", help="override_spawn (default: beside --shapes)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--out", default="override_bench.json")
    args = parser.parse_args()
    spawn = os.path.abspath(args.spawn or os.path.join(os.path.dirname(args.shapes),
                                                       "override_spawn"))
    for path, what in ((args.numarena, "--numarena"), (args.shapes, "--shapes"),
                       (spawn, "--spawn")):
        if not os.access(path, os.X_OK):
            sys.exit(f"override_bench: {what} {path} is not an executable (build it first: "
                     "cmake --build build --target numarena_cli numarena_preload override_shapes"
                     " override_spawn)")
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if rounds < 1:
        sys.exit("override_bench: --rounds must be at least 1")
    cli = os.path.abspath(args.numarena)
    commit = git_commit()  # of the tree the run started from
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    configs = configurations(cli)
    check_loaded(configs)
    with tempfile.TemporaryDirectory(prefix="override_bench.") as work:
        inputs = write_inputs(work, args.quick)
        chosen = workloads(os.path.abspath(args.shapes), inputs, args.quick)
        if args.only:
            wanted = set(args.only.split(","))
            unknown = wanted - {w[0] for w in chosen}
            if unknown:
                sys.exit(f"override_bench: unknown workloads {sorted(unknown)}; known: "
                         f"{[w[0] for w in chosen]}")
            chosen = [w for w in chosen if w[0] in wanted]
        missing = missing_programs([w[0] for w in chosen])
        if missing:
            sys.exit("override_bench: " + "; ".join(missing) + " (or leave those workloads out "
                     "with --only)")
        if any(w[0] == "llama.cpp" for w in chosen):
            model = write_llama_model(work, args.quick)
            chosen = [(n, k, [model if a == "{model}" else a for a in argv], i)
                      for n, k, argv, i in chosen]
        results = {name: {"kind": kind, "argv": argv[1:] if kind != "program" else argv,
                          "runs": {c.name: [] for c in configs}}
                   for name, kind, argv, _ in chosen}
        failed = 0
        for r in range(rounds):
            for name, kind, argv, stdin_path in chosen:
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                if r % 2 == 1:
                    order.reverse()
                for config in order:
                    run = run_one(spawn, config, argv, stdin_path)
                    if kind == "idle":
                        for word in run["stdout"].split():
                            if word.startswith("rss_kib="):
                                run["idle_rss_kib"] = int(word.split("=", 1)[1])
                    ok = run["exit"] == 0 and (kind != "idle" or "idle_rss_kib" in run)
                    if ok:
                        run.pop("stderr")
                    else:
                        failed += 1
                        print(f"override_bench: {name} under {config.name} failed "
                              f"(exit {run['exit']}): {run['stderr'].strip()[-500:]}",
                              file=sys.stderr)
                    run.pop("stdout")
                    results[name]["runs"][config.name].append(run)
                    print(f"round {r + 1}/{rounds} {name:20} {config.name:22} "
                          f"{run['wall_s']:7.3f} s {run['maxrss_kib'] / 1024:8.1f} MiB",
                          file=sys.stderr)
    document = {
        "benchmark": "override",
        "date": started,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "commit": commit,
        "quick": args.quick,
        "rounds": rounds,
        "peers": list(PEERS),
        "numarena": list(NUMARENA_CONFIGS),
        "workloads": results,
    }
    with open(args.out, "w") as f:
        json.dump(document, f, indent=1)
    print(f"override_bench: wrote {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
