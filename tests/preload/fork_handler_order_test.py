#!/usr/bin/python3
"""numarena's fork handler is registered after its jemalloc's, in the preload and in
libnumarena.so.

Prepare handlers run in reverse order of registration, and numarena's prepare takes locks that
its threads hold while they call jemalloc (the memory returner's walk over the heaps, for
one), so it must run before jemalloc's prepare takes every jemalloc lock (lib/os/fork.hpp).
When it ran after, a fork() beside the returner's pass deadlocked: the forking thread held
jemalloc's locks and waited for numarena's, the returner the other way round. Both libraries
run their own constructors before their jemalloc's, so numarena must initialize jemalloc
itself before it registers.

This test logs the process's pthread_atfork registrations with a preloaded shim
(atfork_log_shim.c) and finds the two handlers by their symbols in the library's symbol table.

  fork_handler_order_test.py NUMARENA_CLI PRELOAD_SO SHARED_SO SHIM_SO
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import check, failed  # noqa: E402

NUMARENA_PREPARE = "_ZN8numarena2os12_GLOBAL__N_17PrepareEv"
JEMALLOC_PREPARE_SUFFIX = "jemalloc_prefork"


def symbol_offsets(library):
    """Offsets of numarena's and jemalloc's prepare handlers in `library` (its .symtab)."""
    out = subprocess.run(["nm", library], check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue
        if fields[2] == NUMARENA_PREPARE:
            found["numarena"] = int(fields[0], 16)
        elif fields[2].endswith(JEMALLOC_PREPARE_SUFFIX):
            found["jemalloc"] = int(fields[0], 16)
    return found


def registrations(log, library):
    """(index, offset) of every registration whose prepare handler lies in `library`."""
    real = os.path.realpath(library)
    rows = []
    with open(log) as f:
        for line in f:
            index, path, offset = line.split()
            if os.path.realpath(path) == real:
                rows.append((int(index), int(offset, 16)))
    return rows


def check_order(name, log, library):
    offsets = symbol_offsets(library)
    if set(offsets) != {"numarena", "jemalloc"}:
        check(False, f"{name}: the symbol table names both prepare handlers",
              f"found {sorted(offsets)} in {library}; is it stripped?")
        return
    order = {}
    for index, offset in registrations(log, library):
        for who, at in offsets.items():
            if offset == at:
                order.setdefault(who, index)
    check(set(order) == {"numarena", "jemalloc"}, f"{name}: both handlers are registered",
          f"saw {sorted(order)}")
    if set(order) == {"numarena", "jemalloc"}:
        check(order["jemalloc"] < order["numarena"],
              f"{name}: jemalloc's handler is registered before numarena's, so numarena's "
              f"prepare runs first", f"registrations {order}")


def main():
    cli, preload, shared, shim = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        # The preload, under numarena run (which puts itself in front of LD_PRELOAD).
        log = os.path.join(tmp, "preload.log")
        env = dict(os.environ, LD_PRELOAD=shim, ATFORK_LOG=log)
        run = subprocess.run([cli, "run", "--local", "--", "/bin/true"], env=env,
                             capture_output=True, text=True, timeout=120)
        check(run.returncode == 0, "preload: numarena run /bin/true exits 0", run.stderr)
        check(os.path.exists(log), "preload: the shim logged the registrations")
        if os.path.exists(log):
            check_order("preload", log, preload)

        # libnumarena.so, loaded by a program that never used it before.
        log = os.path.join(tmp, "shared.log")
        env = dict(os.environ, LD_PRELOAD=shim, ATFORK_LOG=log)
        code = ("import ctypes, sys\n"
                f"lib = ctypes.CDLL({shared!r})\n"
                "lib.numarena_arena_for_policy.restype = ctypes.c_void_p\n"
                "lib.numarena_arena_for_policy.argtypes = [ctypes.c_char_p]\n"
                "lib.numarena_malloc.restype = ctypes.c_void_p\n"
                "lib.numarena_malloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]\n"
                "lib.numarena_free.argtypes = [ctypes.c_void_p]\n"
                "arena = lib.numarena_arena_for_policy(b'local')\n"
                "if not arena: sys.exit('numarena_arena_for_policy(local) failed')\n"
                "p = lib.numarena_malloc(arena, 64)\n"
                "if not p: sys.exit('numarena_malloc(64) failed')\n"
                "lib.numarena_free(p)\n")
        run = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
        check(run.returncode == 0, "libnumarena.so: python3 loading it exits 0", run.stderr)
        check(os.path.exists(log), "libnumarena.so: the shim logged the registrations")
        if os.path.exists(log):
            check_order("libnumarena.so", log, shared)
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
