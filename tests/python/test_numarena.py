#!/usr/bin/env python3
"""The Python module `numarena` (python/numarena/) on the host's own node 0: every function,
every error path a caller can reach, how the library is found, and the buffer protocol with
and without numpy. Placement across nodes is proven in the lab (tests/lab/python_lab.py).

    NUMARENA_LIBRARY=build/lib/libnumarena.so PYTHONPATH=python python3 tests/python/test_numarena.py

NUMARENA_TEST_NUMPY=1 makes the numpy tests mandatory (ctest sets it when numpy imports at
configure time); otherwise they are skipped when numpy is missing.
"""
import ctypes
import gc
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from unittest import mock

import numarena
from numarena import _capi

try:
    import numpy
except ImportError:
    if os.environ.get("NUMARENA_TEST_NUMPY") == "1":
        raise
    numpy = None

PAGE = mmap.PAGESIZE
needs_numpy = unittest.skipIf(numpy is None, "numpy is not installed (python3-numpy)")


def child(code, env):
    """Runs `code` in a fresh interpreter with `env`; returns (status, stdout + stderr)."""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


class LibraryLoadingTest(unittest.TestCase):
    """NUMARENA_LIBRARY, then the package's directory, then the dynamic loader's search."""

    def setUp(self):
        self.library = os.path.realpath(numarena.library_path)
        self.package = os.path.dirname(os.path.dirname(os.path.abspath(numarena.__file__)))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("NUMARENA_LIBRARY", "LD_LIBRARY_PATH")}

    def test_explicit_path_that_does_not_exist(self):
        env = dict(self.env, PYTHONPATH=self.package, NUMARENA_LIBRARY="/nonexistent/libx.so")
        status, out = child("import numarena", env)
        self.assertNotEqual(status, 0)
        self.assertIn("ImportError", out)
        self.assertIn("NUMARENA_LIBRARY=/nonexistent/libx.so", out)
        self.assertIn("no such file", out)

    def test_explicit_path_that_is_not_a_library(self):
        env = dict(self.env, PYTHONPATH=self.package, NUMARENA_LIBRARY=__file__)
        status, out = child("import numarena", env)
        self.assertNotEqual(status, 0)
        self.assertIn("ImportError: numarena: cannot load libnumarena.so", out)
        self.assertIn("invalid ELF header", out)

    def test_dynamic_loader_search(self):
        env = dict(self.env, PYTHONPATH=self.package,
                   LD_LIBRARY_PATH=os.path.dirname(self.library))
        status, out = child("import numarena; print(numarena.library_path, numarena.version())",
                            env)
        self.assertEqual(status, 0, out)
        self.assertEqual(out.split(), ["libnumarena.so.0", numarena.version()])

    def test_package_directory(self):
        with tempfile.TemporaryDirectory() as root:
            shutil.copytree(os.path.join(self.package, "numarena"),
                            os.path.join(root, "numarena"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copy(self.library, os.path.join(root, "numarena", "libnumarena.so.0"))
            # The compiled part of the package, as `cmake --install` puts it beside __init__.py.
            shutil.copy(os.path.join(os.path.dirname(self.library), "_buffer.abi3.so"),
                        os.path.join(root, "numarena", "_buffer.abi3.so"))
            env = dict(self.env, PYTHONPATH=root)
            status, out = child("import numarena; print(numarena.library_path)", env)
            self.assertEqual(status, 0, out)
            self.assertEqual(out.strip(), os.path.join(root, "numarena", "libnumarena.so.0"))

    def test_nowhere(self):
        env = dict(self.env, PYTHONPATH=self.package)
        status, _ = child("import ctypes; ctypes.CDLL('libnumarena.so.0')", env)
        if status == 0:
            self.skipTest("libnumarena.so.0 is installed where the dynamic loader finds it")
        status, out = child("import numarena", env)
        self.assertNotEqual(status, 0)
        self.assertIn("the package directory, the installed library, then the dynamic loader's",
                      out)
        self.assertIn("set NUMARENA_LIBRARY", out)


class ErrorsTest(unittest.TestCase):
    def test_every_code_maps_to_a_builtin(self):
        expected = {
            _capi.INVALID_ARGUMENT: ValueError, _capi.RESOURCE_EXHAUSTED: MemoryError,
            _capi.PERMISSION_DENIED: PermissionError, _capi.FAILED_PRECONDITION: RuntimeError,
            _capi.NOT_FOUND: FileNotFoundError, _capi.OUT_OF_RANGE: IndexError,
            _capi.UNIMPLEMENTED: NotImplementedError, _capi.DATA_LOSS: OSError,
            _capi.INTERNAL: OSError, _capi.UNKNOWN: OSError,
        }
        for code, builtin in expected.items():
            error = _capi.error_for(code, f"message {code}")
            self.assertIsInstance(error, builtin)
            self.assertIsInstance(error, numarena.NumarenaError)
            self.assertEqual(error.code, code)
            self.assertEqual(str(error), f"message {code}")
            self.assertEqual(type(error).__module__, "numarena")

    def test_failure_without_an_error_is_reported(self):
        _capi.lib.numarena_clear_error()
        error = _capi.last_error()
        self.assertIsInstance(error, numarena.SystemNumarenaError)
        self.assertIn("without an error", str(error))

    def test_errors_are_per_thread(self):
        # Each thread's failure raises its own message even when they interleave.
        barrier = threading.Barrier(4)
        seen = {}

        def fail(node):
            barrier.wait()
            for _ in range(200):
                try:
                    numarena.Arena.for_node(node)
                except ValueError as error:
                    if str(node) not in str(error):
                        seen[node] = str(error)
                        return
            seen[node] = "ok"

        threads = [threading.Thread(target=fail, args=(n,)) for n in (901, 902, 903, 904)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(seen, {n: "ok" for n in (901, 902, 903, 904)})


class TopologyTest(unittest.TestCase):
    def test_nodes(self):
        nodes = numarena.nodes()
        self.assertGreaterEqual(len(nodes), 1)
        self.assertEqual([n.id for n in nodes], sorted(n.id for n in nodes))
        first = nodes[0]
        self.assertEqual(first.id, 0)
        self.assertGreaterEqual(first.cpu_count, 1)
        self.assertTrue(first.allowed)
        self.assertGreater(first.mem_total_bytes, 0)
        self.assertLessEqual(first.mem_free_bytes, first.mem_total_bytes)
        self.assertEqual(first.distances[0], 10)
        self.assertEqual(set(first.distances), {n.id for n in nodes})

    def test_distance(self):
        self.assertEqual(numarena.distance(0, 0), 10)
        with self.assertRaises(numarena.InvalidArgumentError) as caught:
            numarena.distance(0, 999)
        self.assertIn("999", str(caught.exception))
        self.assertIsInstance(caught.exception, ValueError)
        with self.assertRaises(ValueError):
            numarena.distance(1 << 40, 0)  # would be truncated to node 0 by ctypes
        with self.assertRaises(TypeError):
            numarena.distance("0", 0)
        with self.assertRaises(TypeError):
            numarena.distance(True, 0)

    def test_current_node(self):
        allowed = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, {min(allowed)})
            self.assertEqual(numarena.current_node(), 0)
        finally:
            os.sched_setaffinity(0, allowed)

    def test_summary(self):
        text = numarena.topology_summary()
        self.assertTrue(text.startswith("node 0: CPUs"), text)
        self.assertIn("process: CPUs", text)

    def test_version(self):
        self.assertEqual(numarena.version(), "0.1.0")


class NodeBufferTest(unittest.TestCase):
    def test_node_buffer_through_memoryview(self):
        with numarena.NodeBuffer(64 * PAGE, node=0) as buf:
            self.assertEqual(len(buf), 64 * PAGE)
            self.assertEqual(buf.size, 64 * PAGE)
            self.assertGreaterEqual(buf.usable_size, 64 * PAGE)
            self.assertEqual(buf.node, 0)
            self.assertEqual(buf.arena.policy, "bind(0)")
            through_ctypes = (ctypes.c_ubyte * 8).from_buffer(buf)
            self.assertEqual(buf.address, ctypes.addressof(through_ctypes))
            del through_ctypes
            self.assertEqual(buf.address % 16, 0)
            raw = memoryview(buf)
            self.assertEqual((raw.format, raw.nbytes, raw.readonly, raw.contiguous),
                             ("B", 64 * PAGE, False, True))
            view = raw.cast("B")
            self.assertEqual(buf.view().format, "B")
            view[:] = b"\xa5" * (64 * PAGE)  # the memory itself: no copy in between
            self.assertEqual(ctypes.string_at(buf.address + 64 * PAGE - 4, 4), b"\xa5" * 4)
            ctypes.memset(buf.address, 7, 1)
            self.assertEqual(view[0], 7)
            self.assertEqual(buf[0], 7)
            self.assertEqual(view.cast("I")[1], 0xA5A5A5A5)
            self.assertTrue(numarena.owns(buf))
            self.assertEqual(numarena.node_of(buf), 0)
            found = buf.page_nodes()
            self.assertEqual(found.pages_on_node.get(0, 0), found.total_pages)
            self.assertGreaterEqual(found.total_pages, 64)
            view.release()
            raw.release()
        self.assertTrue(buf.closed)

    def test_policy_and_arena(self):
        with numarena.NodeBuffer(4 * PAGE, policy="interleave(0)") as buf:
            self.assertEqual(buf.arena.policy, numarena.Arena.for_policy("interleave(0)").policy)
            self.assertIs(buf.arena, numarena.Arena.for_policy("interleave(0)"))
            buf.view()[:] = b"x" * (4 * PAGE)
        arena = numarena.Arena.for_node(0)
        self.assertIs(arena, numarena.Arena.for_node(0))
        self.assertIn("bind(0)", repr(arena))
        with arena.buffer(PAGE, alignment=PAGE, zero=True) as buf:
            self.assertEqual(buf.address % PAGE, 0)
            self.assertEqual(bytes(buf), b"\0" * PAGE)
        arena.purge()

    def test_arena_create_and_destroy(self):
        shared = numarena.Arena.for_node(0)
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "shared"):
            shared.destroy()
        for _ in range(20):
            arena = numarena.Arena.create("bind(0)")
            self.assertIsNot(arena, shared)
            self.assertEqual(arena.policy, "bind(0)")
            buf = arena.buffer(1 << 20)
            buf.view()[:] = b"y" * (1 << 20)
            # An open buffer keeps the arena: its memory would vanish under its views.
            with self.assertRaisesRegex(numarena.FailedPreconditionError, "1 NodeBuffer"):
                arena.destroy()
            self.assertFalse(arena.destroyed)
            buf.close()
            arena.buffer(100)  # never closed, but unreachable: collected, then not counted
            gc.collect()
            arena.destroy()
            self.assertTrue(arena.destroyed)
            arena.destroy()  # a second call does nothing
            with self.assertRaisesRegex(numarena.FailedPreconditionError, "destroyed"):
                arena.buffer(10)
        with self.assertRaises(numarena.InvalidArgumentError):
            numarena.Arena.create("bogus")

    def test_arena_contains(self):
        shared = numarena.Arena.for_node(0)
        own = numarena.Arena.create("bind(0)")
        with shared.buffer(4096) as a, own.buffer(4096) as b:
            self.assertTrue(shared.contains(a))
            self.assertFalse(own.contains(a))  # same node, another arena
            self.assertTrue(own.contains(b.address))
            self.assertFalse(shared.contains(b))
            self.assertFalse(shared.contains(bytearray(64)))
        own.destroy()
        self.assertFalse(own.contains(0))

    def test_arena_create_with_options(self):
        arena = numarena.Arena.create("bind(0)", shards=2)
        self.assertEqual(arena.options, {"shards": 2, "hugetlb_page_bytes": 0})
        with arena.buffer(1 << 20) as buf:
            buf.view()[:] = b"z" * (1 << 20)
            self.assertEqual(numarena.node_of(buf.address), 0)
        arena.destroy()
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "destroyed"):
            arena.options
        self.assertEqual(numarena.Arena.for_node(0).options["shards"], 0)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "shards 9"):
            numarena.Arena.create("bind(0)", shards=9)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "shards -1"):
            numarena.Arena.create("bind(0)", shards=-1)
        with self.assertRaises(numarena.InvalidArgumentError):
            numarena.Arena.create("bind(0)", shards=1 << 40)  # not truncated to another count
        with self.assertRaises(TypeError):
            numarena.Arena.create("bind(0)", shards="2")
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "huge"):
            numarena.Arena.create("bind(0)", hugetlb_page_bytes=3 << 20)

    def test_zero_and_alignment(self):
        with numarena.NodeBuffer(3 * PAGE + 5, node=0) as dirty:
            dirty.view()[:] = b"\xff" * len(dirty)
        for alignment in (None, 64, 2 * PAGE):
            with numarena.NodeBuffer(3 * PAGE + 5, node=0, alignment=alignment,
                                     zero=True) as buf:
                self.assertEqual(bytes(buf), b"\0" * (3 * PAGE + 5))
                if alignment:
                    self.assertEqual(buf.address % alignment, 0)

    def test_size_zero(self):
        with numarena.NodeBuffer(0, node=0) as buf:
            self.assertEqual(memoryview(buf).nbytes, 0)
            self.assertNotEqual(buf.address, 0)

    def test_bad_arguments(self):
        cases = [
            (lambda: numarena.NodeBuffer(10), TypeError, "exactly one"),
            (lambda: numarena.NodeBuffer(10, node=0, policy="bind(0)"), TypeError,
             "got node, policy"),
            (lambda: numarena.NodeBuffer(10, arena="bind(0)"), TypeError, "numarena.Arena"),
            (lambda: numarena.NodeBuffer("10", node=0), TypeError, "size must be an int"),
            (lambda: numarena.NodeBuffer(10, node="0"), TypeError, "node must be an int"),
            (lambda: numarena.NodeBuffer(-1, node=0), numarena.InvalidArgumentError,
             "-1 is not a size"),
            (lambda: numarena.NodeBuffer(10, node=999), numarena.InvalidArgumentError, "999"),
            (lambda: numarena.NodeBuffer(10, policy="bogus"), numarena.InvalidArgumentError,
             "bind(NODES)"),
            (lambda: numarena.NodeBuffer(10, policy="bind(0)\0x"),
             numarena.InvalidArgumentError, "NUL"),
            (lambda: numarena.NodeBuffer(10, policy=0), TypeError, "must be a str"),
            (lambda: numarena.NodeBuffer(10, node=0, alignment=48),
             numarena.InvalidArgumentError, "not a power of two"),
            (lambda: numarena.NodeBuffer(10, node=0, alignment=0),
             numarena.InvalidArgumentError, "not a power of two"),
            (lambda: numarena.NodeBuffer(2**64 - 1, node=0), numarena.InvalidArgumentError,
             "too large"),
            (lambda: numarena.NodeBuffer(1 << 62, node=0), numarena.ResourceExhaustedError,
             "can never be placed"),
        ]
        for call, error, text in cases:
            with self.assertRaises(error) as caught:
                call()
            self.assertIn(text, str(caught.exception))
        with self.assertRaises(MemoryError):  # the built-in, for code that knows no numarena
            numarena.NodeBuffer(1 << 62, node=0)

    def test_closed(self):
        buf = numarena.NodeBuffer(PAGE, node=0)
        self.assertFalse(buf.closed)
        self.assertIn("bind(0)", repr(buf))
        buf.close()
        buf.close()  # a second close does nothing
        self.assertTrue(buf.closed)
        self.assertIn("closed", repr(buf))
        self.assertEqual(buf.size, PAGE)
        for name in ("address", "usable_size", "node"):
            with self.assertRaisesRegex(ValueError, f"NodeBuffer.{name}: the buffer is closed"):
                getattr(buf, name)
        for method in (buf.page_nodes, buf.prefault, buf.correct, buf.__enter__, buf.view):
            with self.assertRaisesRegex(ValueError, "the buffer is closed"):
                method()
        for function in (numarena.page_nodes, numarena.owns, numarena.node_of):
            with self.assertRaisesRegex(ValueError, "the buffer is closed"):
                function(buf)
        with self.assertRaisesRegex(ValueError, "the buffer is closed"):
            numarena.prefault(buf, 0)

    def test_closed_buffer_exports_nothing(self):
        # Closed: no view, index, numpy array or ctypes object reaches the freed memory.
        buf = numarena.NodeBuffer(PAGE, node=0)
        buf.close()
        reused = numarena.NodeBuffer(PAGE, node=0)
        reused[:] = b"\7" * PAGE
        attempts = [lambda: memoryview(buf), lambda: bytes(buf), lambda: buf[0],
                    lambda: buf.__setitem__(0, 42), lambda: buf[0:4],
                    lambda: (ctypes.c_ubyte * PAGE).from_buffer(buf)]
        if numpy is not None:
            attempts.append(lambda: numpy.frombuffer(buf, dtype=numpy.uint8))
        for attempt in attempts:
            with self.assertRaisesRegex(ValueError, "the buffer is closed"):
                attempt()
        with self.assertRaises(TypeError):  # not a ctypes object: no way to its address
            ctypes.addressof(buf)
        self.assertEqual(bytes(reused), b"\7" * PAGE)
        reused.close()

    def test_close_refuses_while_views_exist(self):
        # As mmap.mmap: a view made before close() keeps close() from freeing the memory.
        buf = numarena.NodeBuffer(PAGE, node=0)
        view = memoryview(buf)
        with self.assertRaisesRegex(BufferError, "1 view of the buffer still exists"):
            buf.close()
        self.assertFalse(buf.closed)
        view[0] = 5  # still allocated, still the buffer's
        self.assertEqual(buf[0], 5)
        holders = [(ctypes.c_ubyte * 4).from_buffer(buf), buf.view()]
        if numpy is not None:
            holders.append(numpy.frombuffer(buf, dtype=numpy.uint8))
        with self.assertRaisesRegex(BufferError, f"{len(holders) + 1} views"):
            buf.close()
        with self.assertRaisesRegex(BufferError, "still exist"):
            with buf:
                pass
        view.release()
        for holder in holders:
            if isinstance(holder, memoryview):
                holder.release()
        del holders, holder  # the loop variable still held the last one
        buf.close()
        self.assertTrue(buf.closed)
        with self.assertRaisesRegex(ValueError, "the buffer is closed"):
            memoryview(buf)

    def test_placement_refuses_read_only_memory(self):
        # prefault and correct bind and move pages: never those of an immutable object.
        for function in (numarena.prefault, numarena.correct):
            for target in (b"abc" * PAGE, memoryview(bytearray(PAGE)).toreadonly()):
                with self.assertRaisesRegex(TypeError, "read-only memory"):
                    function(target, 0)
        self.assertEqual(numarena.page_nodes(b"abc").total_pages, 1)  # looking is fine
        report = numarena.prefault(bytearray(PAGE), 0)
        self.assertEqual(report.node, 0)

    def test_freed_exactly_once(self):
        freed = []
        real_free = numarena._free

        def counting_free(address):
            freed.append(address)
            real_free(address)

        with mock.patch.object(numarena, "_free", counting_free):
            # close(), then more closes, `with` exits and collection: one free.
            buf = numarena.NodeBuffer(PAGE, node=0)
            address = buf.address
            with buf:
                pass
            buf.close()
            del buf
            gc.collect()
            self.assertEqual(freed, [address])

            # Never closed: freed when collected, and not while a view holds the buffer.
            freed.clear()
            buf = numarena.NodeBuffer(PAGE, node=0)
            address = buf.address
            view = buf.view()
            del buf
            gc.collect()
            self.assertEqual(freed, [])
            view[0] = 1  # still the buffer's memory, still allocated
            view.release()
            del view
            gc.collect()
            self.assertEqual(freed, [address])

            # A failure after the allocation frees it before raising.
            freed.clear()
            with mock.patch.object(numarena._capi.buffer_module.Exporter, "__init__",
                                   side_effect=RuntimeError("boom")):
                with self.assertRaisesRegex(RuntimeError, "boom"):
                    numarena.NodeBuffer(PAGE, node=0)
            self.assertEqual(len(freed), 1)

    def test_freed_on_another_thread(self):
        buf = numarena.NodeBuffer(PAGE, node=0)
        buf.view()[:] = b"\1" * PAGE
        closer = threading.Thread(target=buf.close)
        closer.start()
        closer.join()
        self.assertTrue(buf.closed)

    def test_not_picklable(self):
        import pickle
        with numarena.NodeBuffer(16, node=0) as buf:
            with self.assertRaisesRegex(TypeError, "cannot be pickled"):
                pickle.dumps(buf)

    def test_prefault_and_correct_of_a_node_buffer(self):
        with numarena.NodeBuffer(16 * PAGE, node=0, alignment=PAGE) as buf:
            report = buf.prefault()
            self.assertEqual(report.node, 0)
            self.assertEqual(report.pages_checked, 16)
            self.assertEqual(report.already_local + report.moved, 16)
            report = buf.correct(0)
            self.assertEqual((report.pages_checked, report.already_local), (16, 16))
        with numarena.NodeBuffer(PAGE, policy="interleave(0)") as mixed:
            self.assertEqual(mixed.node, numarena.NODE_MIXED)
            with self.assertRaisesRegex(ValueError, "not on one node"):
                mixed.prefault()
            self.assertEqual(mixed.prefault(0).node, 0)


class AddressesTest(unittest.TestCase):
    def test_bytearray(self):
        data = bytearray(b"\1" * (32 * PAGE))
        found = numarena.page_nodes(data)
        self.assertEqual(found.pages_on_node.get(0, 0) + found.not_resident + found.unmapped,
                         found.total_pages)
        self.assertGreaterEqual(found.total_pages, 32)
        self.assertEqual(found.unmapped, 0)
        report = numarena.prefault(data, 0)
        self.assertEqual(report.pages_checked,
                         report.already_local + report.moved + report.not_resident +
                         report.failed)
        self.assertEqual(report.failed, 0)
        found = numarena.page_nodes(data)
        self.assertEqual(found.pages_on_node, {0: found.total_pages})
        self.assertEqual(numarena.correct(data, 0).moved, 0)
        self.assertFalse(numarena.owns(data))
        self.assertEqual(numarena.node_of(data), numarena.NODE_NONE)

    def test_the_buffer_is_held_during_the_call(self):
        # A bytearray cannot be resized while numarena works on it (its buffer is exported).
        data = bytearray(PAGE)
        span = numarena._Span(data, None, "test")
        with self.assertRaises(BufferError):
            data.extend(b"x")
        span.close()
        data.extend(b"x")

    def test_readonly_and_mmap_and_memoryview(self):
        self.assertGreaterEqual(numarena.page_nodes(b"x" * (4 * PAGE)).total_pages, 4)
        mapping = mmap.mmap(-1, 8 * PAGE)
        found = numarena.page_nodes(mapping)
        self.assertEqual((found.total_pages, found.pages_on_node), (8, {}))
        self.assertEqual(found.not_resident + found.unmapped, 8)  # never touched
        mapping[:PAGE] = b"\1" * PAGE
        self.assertEqual(numarena.page_nodes(memoryview(mapping)[:PAGE]).pages_on_node, {0: 1})
        self.assertEqual(numarena.prefault(mapping, 0).pages_checked, 8)
        self.assertEqual(numarena.page_nodes(mapping).pages_on_node, {0: 8})
        mapping.close()

    def test_int_address_and_length(self):
        mapping = mmap.mmap(-1, 4 * PAGE)
        anchor = ctypes.c_char.from_buffer(mapping)
        address = ctypes.addressof(anchor)
        report = numarena.prefault(address, 0, 4 * PAGE)
        self.assertEqual(report.pages_checked, 4)
        self.assertEqual(numarena.page_nodes(address, 2 * PAGE).pages_on_node, {0: 2})
        self.assertEqual(numarena.correct(address, 0, 4 * PAGE).already_local, 4)
        del anchor
        mapping.close()
        # The range is unmapped now: the kernel says so.
        found = numarena.page_nodes(address, 4 * PAGE)
        self.assertEqual((found.unmapped, found.pages_on_node), (4, {}))
        with self.assertRaises(numarena.InvalidArgumentError) as caught:
            numarena.prefault(address, 0, 4 * PAGE)
        self.assertIn("EFAULT", str(caught.exception))
        self.assertEqual(numarena.correct(address, 0, 4 * PAGE).failed, 4)

    def test_bad_targets(self):
        data = bytearray(PAGE)
        cases = [
            (lambda: numarena.page_nodes(12345), TypeError, "needs a length"),
            (lambda: numarena.page_nodes([1, 2, 3]), TypeError, "neither an int address"),
            (lambda: numarena.page_nodes("text"), TypeError, "neither an int address"),
            (lambda: numarena.page_nodes(True, 1), TypeError, "neither an int address"),
            (lambda: numarena.page_nodes(data, PAGE + 1), numarena.InvalidArgumentError,
             "more than the buffer's"),
            (lambda: numarena.page_nodes(data, -1), numarena.InvalidArgumentError,
             "not a size"),
            (lambda: numarena.page_nodes(-4096, 10), numarena.InvalidArgumentError,
             "not a size"),
            (lambda: numarena.page_nodes(2**64 - PAGE, 1 << 20), numarena.InvalidArgumentError,
             "past the end of the address space"),
            (lambda: numarena.prefault(data, 999), numarena.InvalidArgumentError, "999"),
            (lambda: numarena.correct(data, 999), numarena.InvalidArgumentError, "999"),
            (lambda: numarena.prefault(data, 1 << 40), numarena.InvalidArgumentError,
             "out of range"),
            (lambda: numarena.prefault(data, "0"), TypeError, "node must be an int"),
        ]
        for call, error, text in cases:
            with self.assertRaises(error) as caught:
                call()
            self.assertIn(text, str(caught.exception))
        data.extend(b"x")  # no buffer was left exported by the failures

    @needs_numpy
    def test_numpy_over_a_node_buffer(self):
        with numarena.NodeBuffer(1 << 20, node=0, alignment=64) as buf:
            array = numpy.frombuffer(buf, dtype=numpy.float32)
            self.assertEqual(array.shape, (1 << 18,))
            self.assertEqual(array.__array_interface__["data"][0], buf.address)  # no copy
            self.assertTrue(array.flags.writeable)
            array[:] = 2.5
            self.assertEqual(ctypes.c_float.from_address(buf.address + 4 * 1000).value, 2.5)
            self.assertEqual(numarena.page_nodes(array).pages_on_node.get(0), 256 +
                             (1 if buf.address % PAGE else 0))
            matrix = array.reshape(512, 512)
            self.assertEqual(numarena.node_of(matrix), 0)
            del array, matrix

    @needs_numpy
    def test_numpy_arrays_anywhere(self):
        array = numpy.ones(1 << 18, dtype=numpy.float64)  # numpy's own (glibc) memory
        report = numarena.prefault(array, 0)
        self.assertEqual(report.failed, 0)
        self.assertGreaterEqual(report.pages_checked, (array.nbytes // PAGE))
        self.assertEqual(numarena.page_nodes(array).pages_on_node.get(0),
                         numarena.page_nodes(array).total_pages)
        address, _ = array.__array_interface__["data"]
        self.assertEqual(numarena.correct(address, 0, array.nbytes).failed, 0)
        with self.assertRaisesRegex(TypeError, "not C-contiguous|contiguous"):
            numarena.page_nodes(array[::2])
        self.assertEqual(numarena.page_nodes(array.reshape(512, 512)).total_pages,
                         numarena.page_nodes(array).total_pages)


class BudgetTest(unittest.TestCase):
    def tearDown(self):
        if numarena._installed is not None:
            numarena._installed.uninstall()

    def test_bad_specs(self):
        for spec, text in (("bogus", "is not a budget"), ("quota:", "positive size"),
                           ("quota:0", "positive size"), ("", "is not a budget"),
                           ("system\0x", "NUL")):
            with self.assertRaises(numarena.InvalidArgumentError) as caught:
                numarena.Budget(spec)
            self.assertIn(text, str(caught.exception))
        with self.assertRaises(TypeError):
            numarena.Budget(8 << 30)

    def test_snapshot_and_admit(self):
        budget = numarena.Budget("quota:64M")
        snapshot = budget.snapshot()
        self.assertEqual([n.node for n in snapshot], [n.id for n in numarena.nodes()])
        first = snapshot[0]
        self.assertEqual(first.capacity, 64 << 20)
        self.assertEqual(first.state, numarena.NodeState.NORMAL)
        self.assertLess(first.warn_bytes, first.admission_bytes)
        self.assertLess(first.admission_bytes, first.trip_bytes)
        self.assertEqual(budget.admit(0, 1 << 20), numarena.Admission.OK)
        self.assertEqual(budget.admit(0, 1 << 30, numarena.Priority.LOW),
                         numarena.Admission.NEVER)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "77"):
            budget.admit(77, 1)
        with self.assertRaisesRegex(numarena.InvalidArgumentError, "priority 7"):
            budget.admit(0, 1, 7)
        with self.assertRaises(TypeError):
            budget.admit(0, 1, "high")
        with self.assertRaises(numarena.InvalidArgumentError):
            budget.admit(0, -1)
        budget.close()
        budget.close()
        self.assertTrue(budget.closed)
        for call in (budget.snapshot, lambda: budget.admit(0, 1), budget.install,
                     budget.uninstall):
            with self.assertRaisesRegex(ValueError, "the budget is closed"):
                call()

    def test_install_gates_allocation(self):
        budget = numarena.Budget("quota:64M")
        self.assertFalse(budget.installed)
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "not installed"):
            budget.uninstall()
        budget.install()
        self.assertTrue(budget.installed)
        other = numarena.Budget("quota:1G")
        with self.assertRaises(numarena.FailedPreconditionError) as caught:
            other.install()
        self.assertIsInstance(caught.exception, RuntimeError)
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "not installed"):
            other.uninstall()
        other.close()
        # A full quota: MemoryError with the library's message, never an OOM kill.
        with self.assertRaises(MemoryError) as caught:
            numarena.NodeBuffer(256 << 20, node=0)
        self.assertIsInstance(caught.exception, numarena.ResourceExhaustedError)
        self.assertIn("budget", str(caught.exception).lower())
        self.assertGreaterEqual(budget.snapshot()[0].refusals, 1)
        with numarena.NodeBuffer(8 << 20, node=0) as buf:
            buf.view()[:] = b"\1" * len(buf)
            self.assertGreaterEqual(budget.snapshot()[0].numarena_bytes, 8 << 20)
        with self.assertRaisesRegex(numarena.FailedPreconditionError, "uninstall"):
            budget.close()
        self.assertIn("installed", repr(budget))
        budget.uninstall()
        self.assertFalse(budget.installed)
        budget.close()

    def test_context_manager(self):
        with numarena.Budget("quota:1G") as budget:
            self.assertTrue(budget.installed)
        self.assertFalse(budget.installed)
        self.assertTrue(budget.closed)

    def test_installed_budget_outlives_its_name(self):
        budget = numarena.Budget("quota:1G")
        budget.install()
        del budget
        gc.collect()
        self.assertIsNotNone(numarena._installed)
        self.assertEqual(numarena._installed.snapshot()[0].capacity, 1 << 30)


class MetricsTest(unittest.TestCase):
    def test_metrics_of_used_arenas(self):
        with numarena.NodeBuffer(1 << 20, node=0) as buf:
            buf.view()[:] = b"\1" * len(buf)
            text = numarena.metrics_text()
        self.assertIn("# TYPE numarena_node_memory_total_bytes gauge", text)
        self.assertIn('numarena_arena_allocated_bytes{policy="bind(0)"}', text)
        self.assertNotIn("numarena_budget_", text)
        only = numarena.metrics_text(arenas=[])
        self.assertNotIn("numarena_arena_", only)

    def test_metrics_with_a_budget(self):
        budget = numarena.Budget("quota:64M")
        text = numarena.metrics_text(budget=budget)
        self.assertIn('numarena_budget_capacity_bytes{node="0"} 67108864', text)
        with budget:
            self.assertIn('numarena_budget_capacity_bytes{node="0"} 67108864',
                          numarena.metrics_text())
        with self.assertRaisesRegex(ValueError, "the budget is closed"):
            numarena.metrics_text(budget=budget)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "is not an Arena"):
            numarena.metrics_text(arenas=["bind(0)"])
        with self.assertRaisesRegex(TypeError, "must be a Budget"):
            numarena.metrics_text(budget="system")

    def test_older_library(self):
        with mock.patch.object(_capi, "has_metrics", False):
            with self.assertRaisesRegex(NotImplementedError, "no numarena_metrics_text"):
                numarena.metrics_text()

    def test_grows_its_buffer(self):
        # The text is longer than read_text's first guess: the loop must fetch all of it.
        length, text = _capi.read_text(
            lambda b, n: _capi.lib.numarena_metrics_text(None, 0, None, b, n), 16)
        self.assertEqual(len(text.encode()), length)
        self.assertTrue(text.endswith("\n"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
