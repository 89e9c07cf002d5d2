"""bench/override_bench.py works end to end (issue 35): a --quick run of one workload of each
kind (a shape, a Debian program, the fixed cost, idle RSS) under every configuration writes
JSON with one successful run of each, the idle RSS read from the program, and
tools/plot_results.py override reads it. Timings are not checked: they mean nothing here.

    override_bench_smoke_test.py NUMARENA_CLI OVERRIDE_SHAPES
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HARNESS = os.path.join(ROOT, "bench", "override_bench.py")
PLOT = os.path.join(ROOT, "tools", "plot_results.py")
CONFIGS = ["glibc", "jemalloc", "mimalloc", "tcmalloc", "numarena --membind 0",
           "numarena --local"]
WORKLOADS = {"random-small": "shape", "sort": "program", "/bin/true": "fixed",
             "idle-rss": "idle"}


def main():
    cli, shapes = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "override.json")
        run = subprocess.run([sys.executable, HARNESS, "--numarena", cli, "--shapes", shapes,
                              "--quick", "--only", ",".join(WORKLOADS), "--out", out],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        with open(out) as f:
            doc = json.load(f)
        assert doc["benchmark"] == "override" and doc["quick"] is True, doc.keys()
        assert sorted(doc["workloads"]) == sorted(WORKLOADS), doc["workloads"].keys()
        for name, kind in WORKLOADS.items():
            workload = doc["workloads"][name]
            assert workload["kind"] == kind, (name, workload["kind"])
            assert sorted(workload["runs"]) == sorted(CONFIGS), workload["runs"].keys()
            for config, runs in workload["runs"].items():
                assert len(runs) == 1, (name, config, runs)
                run = runs[0]
                assert run["exit"] == 0 and run["wall_s"] > 0, (name, config, run)
                # The program's own peak: every program here maps libc, and none of them
                # reaches the harness's ~15 MiB but idle-rss (its burst) and perhaps sort.
                assert 500 < run["maxrss_kib"], (name, config, run)
                if kind == "fixed":
                    assert run["maxrss_kib"] < 12 * 1024, (name, config, run)
                if kind == "idle":
                    # VmRSS read by the program itself (ru_maxrss is updated lazily and may
                    # trail it by a few pages)
                    assert 0 < run["idle_rss_kib"] < 2 * run["maxrss_kib"], (name, config, run)
        report = subprocess.run([sys.executable, PLOT, "override", out], capture_output=True,
                                text=True)
        assert report.returncode == 0, report.stderr
        assert "goal lines pass" in report.stdout and "| random-small |" in report.stdout, \
            report.stdout
        bad = subprocess.run([sys.executable, HARNESS, "--numarena", cli, "--shapes", shapes,
                              "--quick", "--only", "no-such-program", "--out", out],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and "unknown workloads ['no-such-program']" in bad.stderr, \
            bad.stderr
    print("override_bench smoke: 1 passed, 0 failed")


main()
