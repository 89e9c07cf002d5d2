#!/usr/bin/env python3
"""numarena.torch (python/numarena/torch.py over libnumarena_torch.so) on the host's node 0:
which tensors numarena makes, frees on other threads and after a block, the out-of-memory
error under a quota, and every bad input. Placement across nodes: tests/lab/torch_lab.py.

    NUMARENA_LIBRARY=build/lib/libnumarena.so.0 PYTHONPATH=python \
        /usr/bin/python3 tests/python/test_torch.py

The whole file runs under a 256 MiB-per-node quota (numarena.Budget("quota:256M")),
installed before the first tensor, so that a free that never reaches numarena shows up as a
refusal.
"""
import os
import subprocess
import sys
import threading
import unittest

import torch

import numarena
import numarena.torch as nt

MiB = 1 << 20
BUDGET = None


def setUpModule():
    global BUDGET
    BUDGET = numarena.Budget("quota:256M")
    BUDGET.install()


def tearDownModule():
    nt.use(None)


class OwnershipTest(unittest.TestCase):
    def tearDown(self):
        nt.use(None)

    def test_every_tensor_under_on_is_numarenas_and_no_other(self):
        before = torch.randn(64, 64)
        with nt.on("bind(0)") as arena:
            self.assertEqual(arena, numarena.Arena.for_policy("bind(0)"))
            self.assertEqual(nt.current(), arena)
            a = torch.randn(64, 64)
            made = [a, torch.mm(a, a), torch.cat([a, a]), torch.zeros(3, dtype=torch.int8),
                    torch.empty(3 * MiB, dtype=torch.float16), a.clone(), a + 1,
                    torch.arange(1000).to(torch.float64)]
            for tensor in made:
                self.assertTrue(nt.owns(tensor), tensor.shape)
                self.assertTrue(arena.contains(tensor.data_ptr()))
                self.assertEqual(numarena.node_of(tensor.data_ptr()), 0)
            with nt.on(None):  # an inner block wins: libtorch's allocator
                self.assertIsNone(nt.current())
                self.assertFalse(nt.owns(torch.randn(100)))
            self.assertTrue(nt.owns(torch.randn(100)))
            seen = []
            worker = threading.Thread(target=lambda: seen.append(nt.owns(torch.randn(100))))
            worker.start()
            worker.join()
            self.assertEqual(seen, [False])  # another thread is not in this block
        self.assertIsNone(nt.current())
        self.assertFalse(nt.owns(before))
        self.assertFalse(nt.owns(torch.randn(64, 64)))
        self.assertTrue(torch.equal(torch.mm(made[0], made[0]), made[1]))  # still usable
        made[4].fill_(1)  # torch.empty touched no page
        pages = nt.tensor_nodes(made[4])
        self.assertEqual(pages.pages_on_node.get(0, 0), pages.total_pages)
        self.assertGreaterEqual(pages.total_pages, 6 * MiB // 4096)

    def test_use_places_every_threads_tensors_outside_blocks(self):
        nt.use("interleave(0)")
        arena = numarena.Arena.for_policy("interleave(0)")
        self.assertEqual(nt.current(), arena)
        seen = []
        worker = threading.Thread(target=lambda: seen.append(
            arena.contains(torch.empty(1000).data_ptr())))
        worker.start()
        worker.join()
        self.assertEqual(seen, [True])
        with nt.on("bind(0)"):
            self.assertFalse(arena.contains(torch.empty(1000).data_ptr()))
        nt.use(numarena.Arena.for_node(0))
        self.assertTrue(numarena.Arena.for_node(0).contains(torch.empty(10).data_ptr()))
        nt.use(None)
        self.assertFalse(nt.owns(torch.empty(10)))

    def test_memory_target_policy(self):
        with nt.on("target(capacity@any)") as arena:
            self.assertTrue(arena.contains(torch.empty(1000).data_ptr()))

    def test_frees_on_other_threads_and_after_the_block(self):
        # 96 tensors of 8 MiB (768 MiB) through a 256 MiB quota: each must go back.
        for round_ in range(12):
            with nt.on("bind(0)"):
                made = [torch.full((8 * MiB,), round_, dtype=torch.uint8) for _ in range(8)]
            halves = [made[:4], made[4:]]
            del made
            workers = [threading.Thread(target=half.clear) for half in halves]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        with nt.on("bind(0)"):
            self.assertTrue(nt.owns(torch.empty(8 * MiB, dtype=torch.uint8)))

    def test_a_tensor_over_the_quota_raises_pytorchs_out_of_memory_error(self):
        with nt.on("bind(0)"):
            with self.assertRaises(torch.cuda.OutOfMemoryError) as caught:
                torch.empty(512 * MiB, dtype=torch.uint8)
            message = str(caught.exception)
            self.assertIsInstance(caught.exception, RuntimeError)
            self.assertIn("numarena: cannot allocate a tensor of 536870912 bytes", message)
            self.assertIn("quota", message)  # numarena's reason: the budget
            # The process and the block carry on.
            small = torch.ones(16)
            self.assertTrue(nt.owns(small))
            self.assertEqual(float(small.sum()), 16.0)

    def test_one_numarena_and_one_allocator_per_process(self):
        with open("/proc/self/maps") as maps:
            mapped = {line.split()[-1] for line in maps if line.rstrip().endswith(".so")
                      or ".so." in line}
        self.assertEqual(len([m for m in mapped if "libnumarena.so" in m]), 1, mapped)
        self.assertEqual(len([m for m in mapped if "libnumarena_torch.so" in m]), 1, mapped)
        self.assertTrue(nt._installed())


class BadInputTest(unittest.TestCase):
    def test_not_a_tensor(self):
        for function in (nt.tensor_nodes, nt.owns):
            with self.assertRaisesRegex(TypeError, "expected a torch.Tensor, not list"):
                function([1, 2, 3])
        with self.assertRaisesRegex(TypeError, "expected a torch.Tensor, not bytearray"):
            nt.correct(bytearray(10), 0)

    def test_not_a_cpu_tensor(self):
        meta = torch.empty(10, device="meta")
        for call in (lambda: nt.tensor_nodes(meta), lambda: nt.correct(meta, 0),
                     lambda: nt.owns(meta)):
            with self.assertRaisesRegex(ValueError, "is on meta, not the CPU.*cpu\\(\\)"):
                call()

    def test_sparse_and_quantized(self):
        sparse = torch.eye(3).to_sparse()
        with self.assertRaisesRegex(ValueError, "layout is torch.sparse_coo"):
            nt.tensor_nodes(sparse)
        quantized = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)
        with self.assertRaisesRegex(ValueError, "quantized tensors \\(torch.qint8\\)"):
            nt.tensor_nodes(quantized)

    def test_bad_node(self):
        t = torch.ones(1000)
        with self.assertRaises(numarena.InvalidArgumentError) as caught:
            nt.correct(t, 99)
        self.assertIsInstance(caught.exception, ValueError)
        self.assertIn("99", str(caught.exception))
        with self.assertRaisesRegex(TypeError, "node must be an int, not str"):
            nt.correct(t, "0")
        with self.assertRaisesRegex(TypeError, "node must be an int, not bool"):
            nt.correct(torch.ones(0), True)

    def test_bad_policy(self):
        with self.assertRaises(numarena.InvalidArgumentError):
            nt.on("bind(99)")
        with self.assertRaises(numarena.InvalidArgumentError):
            nt.use("bind(")
        with self.assertRaisesRegex(TypeError, "policy string, a numarena.Arena or None, not int"):
            nt.on(1)
        own = numarena.Arena.create("bind(0)")
        try:
            with self.assertRaisesRegex(numarena.InvalidArgumentError, "Arena.create"):
                nt.use(own)
        finally:
            own.destroy()

    def test_blocks_left_out_of_order_or_twice(self):
        outer, inner = nt.on("bind(0)"), nt.on(None)
        outer.__enter__()
        inner.__enter__()
        with self.assertRaisesRegex(RuntimeError, "innermost first"):
            outer.__exit__(None, None, None)
        errors = []

        def leave_elsewhere():
            try:
                inner.__exit__(None, None, None)
            except RuntimeError as error:
                errors.append(str(error))
        worker = threading.Thread(target=leave_elsewhere)
        worker.start()
        worker.join()
        self.assertEqual(len(errors), 1)
        inner.__exit__(None, None, None)
        outer.__exit__(None, None, None)
        self.assertIsNone(nt.current())
        with self.assertRaisesRegex(RuntimeError, "already entered"):
            with outer:
                pass

    def test_empty_tensor(self):
        with nt.on("bind(0)"):
            empty = torch.empty(0)
        self.assertFalse(nt.owns(empty))
        self.assertEqual(nt.tensor_nodes(empty).total_pages, 0)
        self.assertEqual(nt.correct(empty, 0).pages_checked, 0)

    def test_missing_library(self):
        env = dict(os.environ, NUMARENA_TORCH_LIBRARY="/nonexistent/libnumarena_torch.so")
        done = subprocess.run([sys.executable, "-c", "import numarena.torch"], env=env,
                              capture_output=True, text=True, timeout=120)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("ImportError", done.stderr)
        self.assertIn("NUMARENA_TORCH_LIBRARY=/nonexistent/libnumarena_torch.so", done.stderr)


class KvBlockTensorsTest(unittest.TestCase):
    """KV-pool blocks as tensors on one node (no cold tier here: demotion and promotion of
    viewed blocks are tests/torch/torch_kv_test.cpp's and, on real nodes, the lab's)."""

    def make_pool(self, **kwargs):
        options = dict(layers=2, kv_heads=4, head_dim=8, dtype="fp32", tokens_per_block=4,
                       heads_per_group=2, home_nodes=[0])
        options.update(kwargs)
        pool = numarena.KvPool(**options)
        self.addCleanup(pool.close)
        return pool

    def test_views_are_the_blocks_memory(self):
        pool = self.make_pool()
        seq, reused = pool.create_sequence(list(range(8)))
        self.assertEqual(reused, 0)
        block = pool.blocks(seq, 1, 1)[1]
        key, value = nt.kv_block_tensors(pool, block)
        self.assertEqual(tuple(key.shape), (4, 2, 8))
        self.assertEqual(key.dtype, torch.float32)
        self.assertEqual(key.device.type, "cpu")
        self.assertEqual(pool.locate(block).pins, 2)  # one pin per view
        # A token's rows written by kv_write appear in the views (token 5 = block 1, row 1;
        # group 1 = heads 2 and 3), with no copy between.
        rows = torch.arange(32.0).reshape(4, 8)
        nt.kv_write(pool, seq, 1, 5, rows, -rows)
        self.assertTrue(torch.equal(key[1], rows[2:4]))
        self.assertTrue(torch.equal(value[1], -rows[2:4]))
        again, again_value = nt.kv_block_tensors(pool, block)
        self.assertEqual(again.data_ptr(), key.data_ptr())
        key[3].fill_(7.0)
        self.assertTrue(torch.equal(again[3], torch.full((2, 8), 7.0)))
        self.assertFalse(key.is_contiguous())
        self.assertTrue(nt.tensor_nodes(key).pages_on_node.get(0))
        del key, value, again, again_value
        self.assertEqual(pool.locate(block), numarena.BlockLocation("hot", 0, 0))

    def test_placement_audit(self):
        pool = self.make_pool()
        seq, _ = pool.create_sequence(list(range(8)))
        rows = torch.arange(32.0).reshape(4, 8)
        for layer in range(2):
            for token in range(8):
                nt.kv_write(pool, seq, layer, token, rows, rows)
        # One node here: the kernel has had nowhere to move the pages.
        audit = pool.audit(correct=True)
        self.assertEqual(audit["blocks_checked"], 2 * 2 * 2)  # 2 spans x 2 layers x 2 groups
        self.assertGreater(audit["pages_checked"], 0)
        self.assertEqual(audit["hot_pages_misplaced"] + audit["cold_pages_misplaced"], 0)
        self.assertEqual(audit["pages_moved_back"], 0)
        self.assertIs(audit["wrapped"], True)
        self.assertEqual(pool.audit(max_blocks=3)["blocks_checked"], 3)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "max_blocks"):
            pool.audit(max_blocks=0)

    def test_a_slice_keeps_the_pin_and_the_pool(self):
        pool = self.make_pool(dtype="bf16")
        seq, _ = pool.create_sequence([1, 2, 3, 4])
        block = pool.blocks(seq, 0, 0)[0]
        key, value = nt.kv_block_tensors(pool, block)
        self.assertEqual(key.dtype, torch.bfloat16)
        value.fill_(1.5)
        row = value[2]
        del key, value
        self.assertEqual(pool.locate(block).pins, 1)  # the slice holds the V view's pin
        pool.close()  # deferred: the slice still reads the block's memory
        self.assertEqual(float(row.float().sum()), 1.5 * 16)
        del row

    def test_fp8_is_bytes(self):
        pool = self.make_pool(dtype="fp8")
        seq, _ = pool.create_sequence([1])
        key, _ = nt.kv_block_tensors(pool, pool.blocks(seq, 0, 0)[0])
        self.assertEqual(key.dtype, torch.uint8)

    def test_bad_input(self):
        pool = self.make_pool()
        seq, _ = pool.create_sequence([1, 2, 3, 4])
        block = pool.blocks(seq, 0, 0)[0]
        rows = torch.zeros(4, 8)
        with self.assertRaisesRegex(TypeError, "expected a numarena.KvPool, not str"):
            nt.kv_block_tensors("pool", block)
        with self.assertRaisesRegex(TypeError, "block must be an int id, not float"):
            nt.kv_block_tensors(pool, 1.0)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "layer_in_block 1 is outside"):
            nt.kv_block_tensors(pool, block, 1)
        with self.assertRaisesRegex(TypeError, "key has dtype torch.float16, the pool holds "
                                               "fp32 \\(torch.float32\\); convert with"):
            nt.kv_write(pool, seq, 0, 0, rows.half(), rows)
        with self.assertRaisesRegex(TypeError, "value has dtype torch.int64"):
            nt.kv_write(pool, seq, 0, 0, rows, rows.long())
        with self.assertRaisesRegex(ValueError, "key has shape \\(8, 4\\), not \\[kv_heads"):
            nt.kv_write(pool, seq, 0, 0, rows.t(), rows)
        with self.assertRaisesRegex(ValueError, "is on meta, not the CPU"):
            nt.kv_write(pool, seq, 0, 0, torch.zeros(4, 8, device="meta"), rows)
        with self.assertRaisesRegex(IndexError, "token 4 is past the sequence's 4 token slots"):
            nt.kv_write(pool, seq, 0, 4, rows, rows)
        with self.assertRaises(numarena.FailedPreconditionError):
            pool.demote_block(block)  # no cold tier
        pool.free_sequence(seq)
        pool.create_sequence([9, 9, 9, 9])  # reuses the span: the old id is stale
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "stale"):
            nt.kv_block_tensors(pool, block)
        with self.assertRaises(numarena.InvalidArgumentError):
            numarena.KvPool(layers=2, kv_heads=3, head_dim=8, heads_per_group=2)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "cold_tier \"moon\""):
            numarena.KvPool(layers=1, kv_heads=1, head_dim=8, cold_tier="moon")
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "dtype 'int4'"):
            numarena.KvPool(layers=1, kv_heads=1, head_dim=8, dtype="int4")
        pool.close()
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "the pool is closed"):
            nt.kv_block_tensors(pool, block)


if __name__ == "__main__":
    unittest.main(verbosity=2)
