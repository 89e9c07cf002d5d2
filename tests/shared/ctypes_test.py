#!/usr/bin/env python3
"""libnumarena.so from Python's ctypes, with nothing preloaded and no glibc tunables.

    ctypes_test.py PATH/libnumarena.so

Loads the library into this interpreter (whose malloc stays glibc's), allocates on node 0,
writes the memory, asks the kernel where its pages are, frees it from another thread, and
checks the error of a bad node. A child interpreter then proves that the library's private
jemalloc runs with numarena's malloc_conf (oversize_threshold:0) and reads its own
NJE_MALLOC_CONF, not the MALLOC_CONF meant for a jemalloc the process may already have.
Exit status 0 only when every check passes.
"""
import ctypes
import mmap
import os
import subprocess
import sys
import threading

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"ctypes_test: FAILED: {what}", file=sys.stderr)


class PageCounts(ctypes.Structure):  # numarena_page_counts
    _fields_ = [("total_pages", ctypes.c_size_t), ("not_resident", ctypes.c_size_t),
                ("unmapped", ctypes.c_size_t), ("on_other_nodes", ctypes.c_size_t)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.numarena_arena_for_node.restype = ctypes.c_void_p
    lib.numarena_arena_for_node.argtypes = [ctypes.c_int]
    lib.numarena_malloc.restype = ctypes.c_void_p
    lib.numarena_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.numarena_free.restype = None
    lib.numarena_free.argtypes = [ctypes.c_void_p]
    lib.numarena_owns.restype = ctypes.c_int
    lib.numarena_owns.argtypes = [ctypes.c_void_p]
    lib.numarena_page_nodes.restype = ctypes.c_int
    lib.numarena_page_nodes.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t,
                                        ctypes.POINTER(PageCounts)]
    lib.numarena_last_error.restype = ctypes.c_int
    lib.numarena_last_error.argtypes = []
    lib.numarena_last_error_message.restype = ctypes.c_char_p
    lib.numarena_last_error_message.argtypes = []
    return lib


def main(path):
    lib = load(path)
    arena = lib.numarena_arena_for_node(0)
    check(arena is not None, "numarena_arena_for_node(0) returned NULL")

    length = 64 * mmap.PAGESIZE
    p = lib.numarena_malloc(arena, length)
    check(p is not None, f"numarena_malloc({length}) returned NULL")
    ctypes.memset(p, 0xA5, length)
    check(ctypes.string_at(p + length - 4, 4) == b"\xa5" * 4, "the memory did not keep what was written")
    check(lib.numarena_owns(p) == 1, "numarena_owns on its own block is 0")

    on_node = (ctypes.c_size_t * 2)()
    counts = PageCounts()
    code = lib.numarena_page_nodes(p, length, on_node, 2, ctypes.byref(counts))
    check(code == 0, f"numarena_page_nodes returned {code}")
    check(counts.total_pages >= 64, f"total_pages {counts.total_pages} < 64")
    check(on_node[0] == counts.total_pages,
          f"{on_node[0]} of {counts.total_pages} pages on node 0")
    check(on_node[1] == 0 and counts.not_resident == 0 and counts.unmapped == 0,
          f"pages elsewhere: node1={on_node[1]} not_resident={counts.not_resident} "
          f"unmapped={counts.unmapped}")

    # Freed on another thread than the one that allocated it.
    freer = threading.Thread(target=lib.numarena_free, args=(p,))
    freer.start()
    freer.join()

    # Python's own allocations are glibc's, not numarena's.
    python_buffer = ctypes.create_string_buffer(1 << 20)
    check(lib.numarena_owns(ctypes.addressof(python_buffer)) == 0,
          "numarena owns memory Python allocated: the library took over malloc")

    check(lib.numarena_arena_for_node(4000) is None, "numarena_arena_for_node(4000) is not NULL")
    check(lib.numarena_last_error() == 3,
          f"last error {lib.numarena_last_error()}, expected 3 (NUMARENA_INVALID_ARGUMENT)")
    message = (lib.numarena_last_error_message() or b"").decode()
    check("4000" in message, f"the error message does not name node 4000: {message!r}")

    # The private jemalloc's configuration, seen from a fresh interpreter's exit statistics.
    env = dict(os.environ, NJE_MALLOC_CONF="stats_print:true", MALLOC_CONF="lg_tcache_max:13")
    child = subprocess.run([sys.executable, __file__, "--child", path], env=env,
                           capture_output=True, text=True, timeout=120)
    check(child.returncode == 0, f"child exited {child.returncode}: {child.stderr[-2000:]}")
    stats = child.stdout + child.stderr
    check("opt.oversize_threshold: 0" in stats,
          "numarena's malloc_conf (oversize_threshold:0) is not in effect in the private jemalloc")
    # One automatic arena: numarena allocates from arenas of its own, and each automatic one
    # costs ~4 KiB of statistics at numarena's first mallctl (lib/alloc/jemalloc_heap.cpp).
    check("opt.narenas: 1\n" in stats,
          "numarena's malloc_conf (narenas:1) is not in effect in the private jemalloc")
    # No automatic thread cache: numarena never uses it (lib/alloc/jemalloc_heap.cpp).
    check("opt.tcache: false\n" in stats,
          "numarena's malloc_conf (tcache:false) is not in effect in the private jemalloc")
    check("opt.stats_print: true" in stats, "NJE_MALLOC_CONF was not read")
    check("opt.tcache_max: 8192\n" not in stats, "the private jemalloc read MALLOC_CONF")

    if failures:
        print(f"ctypes_test: {len(failures)} checks failed", file=sys.stderr)
        return 1
    print(f"ctypes_test: all checks passed ({path})")
    return 0


def child(path):
    lib = load(path)
    p = lib.numarena_malloc(lib.numarena_arena_for_node(0), 4096)
    if p is None:
        print("child: numarena_malloc failed", file=sys.stderr)
        return 1
    lib.numarena_free(p)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        sys.exit(child(sys.argv[2]))
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} PATH/libnumarena.so", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
