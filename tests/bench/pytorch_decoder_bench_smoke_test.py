"""bench/pytorch_decoder_bench.py works end to end (issue 36): a two-turn lockstep run of a
small decoder under every configuration (glibc, the three preloads, `numarena run`, and
numarena.torch alone and over each preload) prints one report with a cold serve and two warm
serves per configuration, every ratio it promises, and per-turn quartiles; a worker that dies
makes the driver fail with the worker's command, not hang; unknown configurations and a CPU
the process may not use are refused. Timings are not checked: they mean nothing here.

    pytorch_decoder_bench_smoke_test.py BUILD_DIR
"""
import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DRIVER = os.path.join(ROOT, "bench", "pytorch_decoder_bench.py")
CONFIGS = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "run-membind0", "run-local",
           "numarena.torch", "numarena.torch+jemalloc", "numarena.torch+tcmalloc",
           "numarena.torch+mimalloc"]
SMALL = ["--", "--layers", "1", "--batch", "2", "--prompt", "8", "--generate", "3",
         "--vocab", "512"]


def run(build, *args):
    return subprocess.run([sys.executable, DRIVER, "--build", build, *args],
                          capture_output=True, text=True, timeout=600)


def check_ratio(entry, with_quartiles):
    assert entry["ratio"] > 0, entry
    if with_quartiles:
        q1, median, q3 = entry["per_turn_q1_median_q3"]
        assert 0 < q1 <= median <= q3, entry
    else:
        assert "per_turn_q1_median_q3" not in entry, entry


def check_against(report_part):
    for key in ("ttft_s", "tpot_s"):
        check_ratio(report_part[key], with_quartiles=True)
    check_ratio(report_part["peak_rss_kib"], with_quartiles=False)


def check_quartiles_stay_in_range():
    """Two per-turn ratios far apart (a loaded host) once gave a negative first quartile."""
    spec = importlib.util.spec_from_file_location("pytorch_decoder_bench", DRIVER)
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)
    for values in ([0.3, 3.4], [0.9, 1.0, 7.5], [2.0]):
        q1, median, q3 = driver.quartiles(values)
        assert min(values) <= q1 <= median <= q3 <= max(values), (values, q1, median, q3)


def main():
    check_quartiles_stay_in_range()
    build = sys.argv[1]
    done = run(build, "--turns", "2", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["method"] == "lockstep" and report["turns"] == 2 and report["cpu"] == 0, report
    assert list(report["medians"]) == CONFIGS, report["medians"].keys()
    for name in CONFIGS:
        serves = report["serves"][name]
        assert len(serves) == 2, (name, serves)  # the cold serve is reported apart
        assert all(s["ttft_s"] > 0 and s["tpot_s"] > 0 for s in serves), (name, serves)
        assert report["cold_ttft_s"][name] > 0, name
        assert report["medians"][name]["peak_rss_kib"] > 10 * 1024, name  # torch alone: more
    check_against(report["numarena.torch_vs_fastest"])
    assert report["numarena.torch_best_combination"].startswith("numarena.torch+"), report
    check_against(report["numarena.torch_best_combination_vs_fastest"])
    over = report["numarena.torch_over_its_preload"]
    assert sorted(over) == sorted(c for c in CONFIGS if "+" in c), over.keys()
    for name, part in over.items():
        assert part["ttft_s"]["to"] == name.split("+")[1], part
        check_against(part)

    # A worker that cannot start (a decoder argument it refuses): the driver fails, naming it.
    done = run(build, "--turns", "1", "--only", "glibc", "--", "--layers", "not-a-number")
    assert done.returncode != 0, done.stdout
    assert "decoder_worker.py" in done.stderr and "without an answer" in done.stderr, \
        done.stderr[-2000:]

    done = run(build, "--turns", "1", "--only", "glibc", "no-such-config")
    assert done.returncode == 2 and "unknown configurations" in done.stderr, done.stderr
    done = run(build, "--turns", "1", "--cpu", str(os.cpu_count() + 7), "--only", "glibc")
    assert done.returncode == 2 and "not a CPU this process may run on" in done.stderr, \
        done.stderr
    done = run(build, "--turns", "0", "--only", "glibc")
    assert done.returncode == 2 and "--turns must be at least 1" in done.stderr, done.stderr
    print("pytorch_decoder_bench smoke test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
