"""tools/plot_results.py's chart rules (issue 17): a fixed peer order with numarena first, a
linear axis clipped at 10x with larger ratios as text, no heatmap for a 1x1 matrix; and issue
16's target check: the 1.2x line, and "never slower than a NUMA peer" decided by a one-sided
Mann-Whitney U test of the runs."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from collections import OrderedDict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import plot_results  # noqa: E402


class PlotResultsTest(unittest.TestCase):
    def test_order_is_fixed_with_numarena_first(self):
        groups = OrderedDict()
        groups[("a", 1)] = OrderedDict([("tcmalloc", 3.0), ("numarena", 1.0), ("glibc", 2.0)])
        groups[("b", 1)] = OrderedDict([("mimalloc", 1.0), ("numarena_arena", 2.0), ("glibc", 5.0)])
        self.assertEqual(plot_results.peer_order(groups),
                         ["numarena", "numarena_arena", "glibc", "mimalloc", "tcmalloc"])

    def test_ratios_past_the_limit_are_clipped_and_written(self):
        self.assertEqual(plot_results.clipped(2.5), (2.5, " 2.50"))
        length, label = plot_results.clipped(2000.0)
        self.assertEqual(length, plot_results.PEER_AXIS_LIMIT)
        self.assertIn("2,000x", label)

    def test_one_node_matrix_draws_no_heatmap(self):
        doc = {"rows": [{"cpu_node": 0, "cells": []}], "memory_nodes": [0]}
        with tempfile.TemporaryDirectory() as out:
            self.assertIsNone(plot_results.plot_bandwidth(doc, out))
            self.assertEqual(os.listdir(out), [])

    def test_peer_chart_draws(self):
        groups = OrderedDict()
        groups[("w", 1)] = OrderedDict([("glibc", 1e6), ("numarena", 5e5), ("memkind", 5e2)])
        with tempfile.TemporaryDirectory() as out:
            paths = plot_results.plot_peers(groups, out)
            self.assertEqual([os.path.basename(p) for p in paths], ["peers_threads1.png"])
            self.assertGreater(os.path.getsize(paths[0]), 0)



class ChartStampTest(unittest.TestCase):
    """Every chart names its data's date, the machine and the commit in its title, and its
    source files in the PNG's metadata (tests/tools/docs_test.py checks bench/results by them)."""

    def metadata(self, path):
        sys.path.insert(0, os.path.dirname(__file__))
        import docs_test  # the PNG tEXt reader the documents' check uses
        return docs_test.png_text(path)

    def test_a_chart_says_when_where_and_which_commit(self):
        groups = OrderedDict()
        groups[("w", 1)] = OrderedDict([("glibc", 1e6), ("numarena", 5e5)])
        with tempfile.TemporaryDirectory() as out:
            source = os.path.join(out, "peers_bench.json")
            with open(source, "w", encoding="utf-8") as f:
                json.dump({"context": {"date": "2026-01-02T10:09:29+00:00"}, "benchmarks": []}, f)
            [path] = plot_results.plot_peers(groups, out, [source], "2-vCPU test guest", "0123abc")
            meta = self.metadata(path)
        self.assertIn("2026-01-02 10:09Z, 2-vCPU test guest, commit 0123abc", meta["Title"])
        self.assertEqual(meta["Source"], "peers_bench.json")

    def test_the_run_starts_with_its_earliest_file(self):
        with tempfile.TemporaryDirectory() as out:
            paths = []
            for i, date in enumerate(["2026-01-02T10:20:00+00:00", "2026-01-02T10:09:00+00:00"]):
                paths.append(os.path.join(out, f"{i}.json"))
                with open(paths[-1], "w", encoding="utf-8") as f:
                    json.dump({"context": {"date": date}}, f)
            self.assertEqual(plot_results.stamp_date(paths), "2026-01-02 10:09Z")
        self.assertEqual(plot_results.stamp_date([]), "date unknown")

    def test_the_server_workloads_chart_draws_every_row_with_both_frees(self):
        runs = []
        for workload, threads, _ in plot_results.TARGET_ROWS:
            for peer, ns in (("numarena_arena", 9.0), ("numarena_arena_sized", 11.0),
                             ("tcmalloc", 10.0), ("glibc_malloc", 20.0)):
                runs.append({"name": f"{workload}/{peer}/threads:{threads}",
                             "run_name": f"{workload}/{peer}", "run_type": "iteration",
                             "threads": threads, "items_per_second": 1e9 / ns})
        with tempfile.TemporaryDirectory() as out:
            source = os.path.join(out, "peers_bench.1.json")
            with open(source, "w", encoding="utf-8") as f:
                json.dump({"context": {"date": "2026-01-02T10:09:29+00:00"}, "benchmarks": runs}, f)
            path = plot_results.plot_targets([source], os.path.join(out, "chart.png"), "m", "abc1234")
            meta = self.metadata(path)
            self.assertIn("server workloads - 2026-01-02 10:09Z, m, commit abc1234", meta["Title"])
            with self.assertRaises(SystemExit):  # no row at all: said, not an empty chart
                empty = write_runs(out, "empty.json", {"mimalloc": [5.0]}, workload="other")
                plot_results.plot_targets([empty], os.path.join(out, "none.png"))

    def test_the_llama_chart_is_stamped_too(self):
        with tempfile.TemporaryDirectory() as out:
            source = os.path.join(out, "llama_host.json")
            medians = {n: {"ttft_ms": 1.0, "ms_per_token": 2.0, "peak_rss_kb": 3.0}
                       for n in ("glibc", "jemalloc", "tcmalloc", "numarena --local")}
            with open(source, "w", encoding="utf-8") as f:
                json.dump({"started": "2026-12-02 01:02 UTC", "args": {"size": "tiny"},
                           "medians": medians}, f)
            chart = os.path.join(out, "llama.png")
            root = os.path.join(os.path.dirname(__file__), "..", "..")
            subprocess.run([sys.executable, os.path.join(root, "bench", "llama_bench.py"),
                            "--replot", source, "--chart", chart, "--machine", "m",
                            "--commit", "abc1234"], check=True)
            meta = self.metadata(chart)
        self.assertIn("2026-12-02 01:02Z, m, commit abc1234", meta["Title"])
        self.assertEqual(meta["Source"], "llama_host.json")


def write_runs(directory, name, ns_by_peer, workload="tensor_loop"):
    """A Google Benchmark JSON file with one iteration run per time (ns per item) per peer."""
    runs = []
    for peer, times in ns_by_peer.items():
        for t in times:
            runs.append({"name": f"{workload}/{peer}/real_time", "run_name": f"{workload}/{peer}",
                         "run_type": "iteration", "threads": 1, "items_per_second": 1e9 / t})
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"benchmarks": runs}, f)
    return path


class SlowerTest(unittest.TestCase):
    def test_exact_tail_of_fully_separated_samples(self):
        # 3 vs 3, every value of ours above theirs: 1 ordering of C(6, 3) = 20.
        self.assertAlmostEqual(plot_results.slower_p_value([4, 5, 6], [1, 2, 3]), 1 / 20)
        self.assertAlmostEqual(plot_results.slower_p_value([1, 2, 3], [4, 5, 6]), 1.0)
        # 5 vs 5 separated: 1 / C(10, 5).
        self.assertAlmostEqual(plot_results.slower_p_value([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]),
                               1 / 252)

    def test_exact_tail_counts_every_ordering(self):
        # U = 8 of 9 for ours = {3, 5, 6} against {1, 2, 4}: orderings with U >= 8 are the
        # separated one and this one, 2 of 20.
        self.assertAlmostEqual(plot_results.slower_p_value([3, 5, 6], [1, 2, 4]), 2 / 20)

    def test_interleaved_samples_are_not_slower(self):
        p = plot_results.slower_p_value([10.1, 10.3, 9.9, 10.4, 10.0, 10.2],
                                        [10.0, 10.2, 10.05, 9.95, 10.3, 10.15])
        self.assertGreater(p, 0.2)

    def test_ties_take_the_normal_approximation(self):
        p_separated = plot_results.slower_p_value([2] * 8, [1] * 8)
        self.assertLess(p_separated, 0.001)
        self.assertGreater(plot_results.slower_p_value([1] * 8, [1] * 8), 0.4)

    def test_verdicts(self):
        ratio, p, slower = plot_results.slower_verdict([2, 2, 2], [1, 1, 1])
        self.assertEqual((ratio, p, slower), (2.0, None, True))  # too few runs: strict
        ratio, p, slower = plot_results.slower_verdict([1, 1, 1], [2, 2, 2])
        self.assertFalse(slower)
        ratio, p, slower = plot_results.slower_verdict([10.1, 10.3, 9.9, 10.4, 10.0, 10.2],
                                                       [10.0, 10.2, 10.05, 9.95, 10.3, 10.15])
        self.assertGreater(ratio, 1.0)
        self.assertFalse(slower)
        ratio, p, slower = plot_results.slower_verdict([10.6, 10.7, 10.8, 10.9, 11.0, 10.65],
                                                       [10.0, 10.2, 10.05, 9.95, 10.3, 10.15])
        self.assertTrue(slower)
        self.assertLess(p, 0.01)


class TargetCheckTest(unittest.TestCase):
    def check(self, numarena, memkind, jemalloc_arena):
        """Each argument lists one peer's runs per process: a number is a process of one run,
        a list a process of several."""
        def processes(times):
            return [t if isinstance(t, list) else [t] for t in times]
        # The general peers ten times slower keep the 1.2x line out of the way.
        by_peer = {p: [[10 * t for t in run] for run in processes(numarena)]
                   for p in plot_results.TARGET_GENERAL}
        by_peer.update({"numarena_arena": processes(numarena),
                        "numarena_arena_sized": processes(numarena),
                        "memkind_node": processes(memkind),
                        "jemalloc_arena": processes(jemalloc_arena)})
        with tempfile.TemporaryDirectory() as d:
            count = max(len(runs) for runs in by_peer.values())
            paths = [write_runs(d, f"peers_bench.{n}.json",
                                {p: runs[n] for p, runs in by_peer.items() if n < len(runs)})
                     for n in range(count)]
            table, failures = plot_results.target_check(paths)
        row = [line for line in table.splitlines() if "`tensor_loop`" in line][0]
        return row, [f for f in failures if f.startswith("tensor_loop")]

    def test_a_tie_in_the_noise_passes_and_says_so(self):
        row, failures = self.check([10.1, 10.3, 9.9, 10.4, 10.0, 10.2],
                                   [10.0, 10.2, 10.05, 9.95, 10.3, 10.15],
                                   [10.0, 10.2, 10.05, 9.95, 10.3, 10.15])
        self.assertEqual(failures, [])
        self.assertIn("tie with memkind_node", row)

    def test_measurably_slower_fails(self):
        _, failures = self.check([10.6, 10.7, 10.8, 10.9, 11.0, 10.65],
                                 [10.0, 10.2, 10.05, 9.95, 10.3, 10.15],
                                 [9.0] * 6)
        self.assertEqual(len(failures), 1)
        self.assertIn("slower than memkind_node", failures[0])
        self.assertIn("slower than jemalloc_arena", failures[0])

    def test_too_few_processes_fail_on_any_excess(self):
        _, failures = self.check([10.2, 10.1, 10.3], [10.0, 10.2, 10.1], [10.0, 10.2, 10.1])
        self.assertEqual(len(failures), 1)
        # Many runs in three processes are still three processes.
        _, failures = self.check([[10.2] * 5, [10.1] * 5, [10.3] * 5],
                                 [[10.0] * 5, [10.2] * 5, [10.1] * 5], [[9.0] * 5] * 3)
        self.assertEqual(len(failures), 1)

    def test_one_slow_process_is_one_slow_value(self):
        # Five processes each, the spread between processes larger than within one (numarena's
        # third process got slow pages for all five runs). Over runs the test says slower
        # (p = 0.037); over processes numarena's medians sit among the peer's (p = 0.27).
        numarena = [[10.26, 10.28, 10.3, 10.32, 10.34], [9.96, 9.98, 10.0, 10.02, 10.04],
                    [11.96, 11.98, 12.0, 12.02, 12.04], [9.86, 9.88, 9.9, 9.92, 9.94],
                    [10.16, 10.18, 10.2, 10.22, 10.24]]
        peer = [[9.97, 9.99, 10.01, 10.03, 10.05], [10.07, 10.09, 10.11, 10.13, 10.15],
                [9.92, 9.94, 9.96, 9.98, 10.0], [10.02, 10.04, 10.06, 10.08, 10.1],
                [10.12, 10.14, 10.16, 10.18, 10.2]]
        flat_ours = [t for runs in numarena for t in runs]
        flat_theirs = [t for runs in peer for t in runs]
        self.assertTrue(plot_results.slower_verdict(flat_ours, flat_theirs)[2])
        row, failures = self.check(numarena, peer, peer)
        self.assertEqual(failures, [])
        self.assertIn("tie with memkind_node", row)

    def test_slower_in_every_process_fails(self):
        _, failures = self.check([[10.8, 10.9, 10.7]] * 5 + [[10.75, 10.85, 10.8]],
                                 [[10.0, 10.1, 9.9]] * 5 + [[10.05, 10.0, 9.95]],
                                 [[10.0, 10.1, 9.9]] * 6)
        self.assertEqual(len(failures), 1)
        self.assertIn("slower than memkind_node", failures[0])

    def test_faster_passes_without_a_test(self):
        row, failures = self.check([9.0] * 6, [10.0] * 6, [10.0] * 6)
        self.assertEqual(failures, [])
        self.assertNotIn("tie", row)


class PeakRowsTest(unittest.TestCase):
    def test_median_over_processes_of_each_process_peak(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            # Three processes, three repetitions each: peaks 30, 10 and 20 -> median 20.
            for n, growths in enumerate([[10, 30, 20], [5, 10, 7], [20, 12, 1]]):
                runs = [{"name": "larson_like/glibc_malloc", "run_name": "larson_like/glibc_malloc",
                         "run_type": "iteration", "threads": 2, "rss_growth": g}
                        for g in growths]
                path = os.path.join(d, f"rss.{n}.json")
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"benchmarks": runs}, f)
                paths.append(path)
            self.assertEqual(plot_results.peak_rows(paths, "rss_growth"),
                             {("larson_like", 2): {"glibc_malloc": 20}})


def override_doc(numarena_time=1.0, numarena_rss=1000, true_rss=1500, idle_rss=3000,
                 failed_exit=0):
    """A bench/override_bench.py document: two peers (glibc, tcmalloc), both numarena
    configurations, one shape, /bin/true and idle-rss; each numarena figure as given."""
    peers = ["glibc", "tcmalloc"]
    ours = ["numarena --membind 0", "numarena --local"]

    def runs(peer_value, our_value, field, our_exit=0):
        table = {p: [{"wall_s": 1.0, "maxrss_kib": 1000, "exit": 0, field: peer_value}]
                 for p in peers}
        table["tcmalloc"][0][field] = peer_value * 2  # glibc is the best peer
        for c in ours:
            table[c] = [{"wall_s": 1.0, "maxrss_kib": 1000, "exit": our_exit, field: our_value}]
        return table

    return {
        "benchmark": "override", "date": "2026-12-06T00:00:00+00:00", "commit": "abc",
        "rounds": 1, "load_average": [0.1, 0.1, 0.1], "quick": False,
        "peers": peers, "numarena": ours,
        "workloads": {
            "larson": {"kind": "shape", "runs": runs(1.0, numarena_time, "wall_s", failed_exit)},
            "larson-rss": {"kind": "program", "runs": runs(1000, numarena_rss, "maxrss_kib")},
            "/bin/true": {"kind": "fixed", "runs": runs(1000, true_rss, "maxrss_kib")},
            "idle-rss": {"kind": "idle", "runs": runs(3000, idle_rss, "idle_rss_kib")},
        },
    }


class OverrideReportTest(unittest.TestCase):
    """issue 35's goal lines over bench/override_bench.py's JSON."""

    def lines(self, doc):
        _, goals, _ = plot_results.override_report(doc)
        return goals

    def failing(self, doc):
        return [line for line, passed in self.lines(doc) if not passed]

    def test_at_par_passes_every_line(self):
        goals = self.lines(override_doc())
        self.assertEqual(self.failing(override_doc()), [])
        # 2 configurations x (time + RSS of 2 programs, fixed cost, idle RSS, geomean)
        self.assertEqual(len(goals), 2 * (2 * 2 + 1 + 1 + 1))

    def test_each_threshold_is_the_issues(self):
        # 1.1x passes its own line; the geometric mean (sqrt(1.1 * 1.0)) is over 1.0
        self.assertEqual([f for f in self.failing(override_doc(numarena_time=1.1))
                          if "geometric mean" not in f], [])
        failing = self.failing(override_doc(numarena_time=1.12))
        self.assertTrue(any("larson under numarena --local: time 1.12x" in f for f in failing))
        self.assertTrue(any("geometric mean" in f for f in failing))
        self.assertEqual(self.failing(override_doc(numarena_rss=1200)), [])
        self.assertEqual(len(self.failing(override_doc(numarena_rss=1210))), 2)
        self.assertEqual(self.failing(override_doc(true_rss=1000 + 2048)), [])
        failing = self.failing(override_doc(true_rss=1000 + 2049))
        self.assertEqual(len(failing), 2)
        self.assertIn("fixed cost", failing[0])
        self.assertEqual(self.failing(override_doc(idle_rss=3600)), [])
        failing = self.failing(override_doc(idle_rss=3700))
        self.assertEqual(len(failing), 2)
        self.assertIn("after a freed burst", failing[0])

    def test_geometric_mean_below_one_offsets_a_slow_program(self):
        doc = override_doc()
        for c in doc["numarena"]:
            doc["workloads"]["larson-rss"]["runs"][c][0]["wall_s"] = 0.5
            doc["workloads"]["larson"]["runs"][c][0]["wall_s"] = 1.05
        self.assertEqual(self.failing(doc), [])  # sqrt(0.5 * 1.05) < 1, each within 1.1x

    def test_a_failed_run_is_a_failing_line(self):
        failing = self.failing(override_doc(failed_exit=139))
        self.assertTrue(any("larson under numarena --membind 0: every configuration ran" in f
                            for f in failing))

    def test_exit_status_reflects_goals_only_with_check(self):
        script = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "plot_results.py")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "override.json")
            for doc, with_check in ((override_doc(), 0), (override_doc(numarena_time=2.0), 1)):
                with open(path, "w") as f:
                    json.dump(doc, f)
                plain = subprocess.run([sys.executable, script, "override", path],
                                       capture_output=True, text=True)
                checked = subprocess.run([sys.executable, script, "override", path, "--check"],
                                         capture_output=True, text=True)
                self.assertEqual(plain.returncode, 0, plain.stderr)
                self.assertEqual(checked.returncode, with_check, checked.stdout)
                self.assertIn("goal lines pass", plain.stdout)
            chart = os.path.join(d, "override.png")
            drawn = subprocess.run([sys.executable, script, "override", path, "--chart", chart],
                                   capture_output=True, text=True)
            self.assertEqual(drawn.returncode, 0, drawn.stderr)
            with open(chart, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
            with open(path, "w") as f:
                json.dump({"benchmarks": []}, f)
            wrong = subprocess.run([sys.executable, script, "override", path],
                                   capture_output=True, text=True)
            self.assertNotEqual(wrong.returncode, 0)
            self.assertIn("not bench/override_bench.py's JSON", wrong.stderr)


if __name__ == "__main__":
    unittest.main()
