"""tools/plot_results.py's chart rules (issue 17): a fixed peer order with numarena first, a
linear axis clipped at 10x with larger ratios as text, no heatmap for a 1x1 matrix."""
import os
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


if __name__ == "__main__":
    unittest.main()
