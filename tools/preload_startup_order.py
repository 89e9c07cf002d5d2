#!/usr/bin/python3
"""Writes cmake/preload_startup_order.ld: the functions of libnumarena_preload.so that a
process runs at start-up and on its first allocations, placed side by side at the front of
the library's text.

Why: the kernel maps a file's pages around each page a process touches (fault-around, 64 KiB
windows on x86-64), and every such page counts in the process's RSS. Where the linker leaves
them, the ~550 functions (~320 KiB) that jemalloc's initialisation, numarena's Initialize()
and the first allocations run lie in 27 of the library's 31 windows of text, so every process
under `numarena run` -- /bin/true included -- had 1.0-1.3 MiB of the library resident. Side by
side they fit in six.

How: runs a few short programs under the library with a breakpoint on the first instruction
of each of its functions (ptrace, every thread of the program; x86-64 Linux), keeps every
function entered, and writes a linker script that gathers their sections (the objects are
built with -ffunction-sections: function F is in section .text.F, or .text.unlikely.F /
.text.startup.F where GCC judged it cold or start-up only) into one output section before
.text, with every allocation function the library exports. A second section right after it,
.text.numarena_steady, gathers what two allocation-heavy Python scripts (one with threads
handing objects to each other) run beyond that: the steady state of a small program, which
otherwise mapped 3-5 more windows for functions scattered through .text (0.2-0.3 MiB).
cmake/NumarenaPreload.cmake links with it. A name that no longer exists matches nothing and costs only its line; the
preload test "start-up functions share a few fault-around windows"
(tests/preload/startup_order_test.py) fails when the list has gone stale.

    tools/preload_startup_order.py --library build/tools/libnumarena_preload.so

prints how many 64 KiB windows the functions that ran occupy in the library given (before
writing; link again and run it with --check to see the windows after; `tools/dev.sh
startup-order` does all three). About ten seconds.
"""

import argparse
import ctypes
import datetime
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(ROOT, "cmake", "preload_startup_order.ld")
# Short single-threaded programs: one that allocates almost nothing, two that make a few
# hundred small, medium and large allocations, and an interpreter's start-up (thousands of
# small allocations, frees and reallocs).
DEFAULT_PROGRAMS = [["/bin/true"], ["/usr/bin/sort", "/etc/os-release"],
                    ["/usr/bin/gzip", "-c", "/etc/os-release"], ["/usr/bin/python3", "-c", "pass"]]
# The second group, placed right after the first in a section of its own: what a program that
# keeps allocating runs beyond its start-up (refills and flushes of the front caches, the
# depot, slab allocation in jemalloc, large blocks and their reuse, realloc), from an
# interpreter working on objects of every size. Packed together, a small program's steady
# state maps a few more windows instead of one for each function scattered through .text.
STEADY_WORKLOAD = """
import json
rows = [{"id": i, "name": "row-%d" % i * (i % 7 + 1), "values": list(range(i % 40))}
        for i in range(30000)]
text = json.dumps(rows)
back = json.loads(text)
del rows
blocks = [bytearray(4096 * (i % 600 + 1)) for i in range(400)]
for i in range(0, 400, 3):
    blocks[i] = None
grown = b""
for i in range(2000):
    grown += b"x" * (i % 97)
words = sorted(text.split(","))
del back, blocks, words
"""
# Threads: objects made in one thread and freed in another (remote frees, their batching),
# each thread's own caches filled and drained, threads ending with objects cached.
STEADY_THREADS = """
import queue, threading
handed = queue.Queue(maxsize=256)
def make(seed):
    for i in range(20000):
        handed.put([seed] * (i % 50) if i % 3 else bytes(i % 3000))
    handed.put(None)
def take():
    done = 0
    while done < 2:
        if handed.get() is None:
            done += 1
def churn(seed):
    keep = []
    for i in range(30000):
        keep.append(str(seed * i) * (i % 9))
        if len(keep) > 500:
            del keep[::2]
threads = [threading.Thread(target=f, args=a) for f, a in
           ((make, (1,)), (make, (2,)), (take, ()), (churn, (3,)), (churn, (4,)))]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""
STEADY_PROGRAMS = [["/usr/bin/python3", "-c", STEADY_WORKLOAD],
                   ["/usr/bin/python3", "-c", STEADY_THREADS]]
STEADY_SECTION = ".text.numarena_steady"
# Each program runs under both policies `numarena run` users pick most (--local and
# --membind): their start-up differs (a bind policy parses a node list, local reads the
# CPU-to-node table), and a function only one of them runs would cost its own window.
POLICIES = ["local", "bind(0)"]
WINDOW = 64 * 1024
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_TRACEME, PTRACE_PEEKTEXT, PTRACE_PEEKUSER, PTRACE_POKETEXT, PTRACE_POKEUSER = 0, 1, 3, 4, 6
PTRACE_CONT, PTRACE_SINGLESTEP, PTRACE_SETOPTIONS = 7, 9, 0x4200
PTRACE_O_TRACECLONE, PTRACE_O_TRACEEXIT, PTRACE_O_EXITKILL = 0x8, 0x40, 0x100000
PTRACE_EVENT_CLONE, PTRACE_EVENT_EXIT = 3, 6
WAIT_ALL = 0x40000000  # __WALL: threads too
RIP_OFFSET = 16 * 8  # struct user_regs_struct.rip (x86-64)


def ptrace(request, pid, addr=0, data=0):
    ctypes.set_errno(0)
    value = libc.ptrace(request, pid, ctypes.c_void_p(addr), ctypes.c_void_p(data))
    if value == -1 and ctypes.get_errno() != 0:
        raise OSError(ctypes.get_errno(), "ptrace(%d): %s" % (request, os.strerror(
            ctypes.get_errno())))
    return value & 0xFFFFFFFFFFFFFFFF


def library_base(pid, library):
    """The address the library's file offset 0 is mapped at, once its text is mapped."""
    base, has_text = None, False
    with open("/proc/%d/maps" % pid) as maps:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or os.path.realpath(fields[5]) != library:
                continue
            start, offset = int(fields[0].split("-")[0], 16), int(fields[2], 16)
            if offset == 0:
                base = start
            has_text = has_text or "x" in fields[1]
    return base if has_text else None


def functions_run(library, program, entries, policy):
    """The library's functions (of ENTRIES: {address: name}) entered in one run of PROGRAM
    under NUMARENA_POLICY=POLICY.

    The program runs under ptrace: single-stepped until the dynamic linker has mapped the
    library (before any of its code runs: that is after relocation), then with a breakpoint
    on every function's first instruction, each removed at its first hit. Every thread is
    traced (PTRACE_O_TRACECLONE): the library's own threads (the memory
    returner) run its functions too, and a breakpoint in an untraced thread would kill the
    program."""
    library = os.path.realpath(library)
    pid = os.fork()
    if pid == 0:
        try:
            ptrace(PTRACE_TRACEME, 0)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.execve(program[0], program,
                      dict(os.environ, LD_PRELOAD=library, NUMARENA_POLICY=policy))
        finally:
            os._exit(127)
    os.waitpid(pid, 0)  # stopped at exec
    ptrace(PTRACE_SETOPTIONS, pid, 0,
           PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL)
    base, steps = None, 0
    while base is None:
        ptrace(PTRACE_SINGLESTEP, pid)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSTOPPED(status):
            sys.exit("%s ended before the library was mapped" % program[0])
        steps += 1
        if steps % 256 == 0:
            base = library_base(pid, library)
    # Only the byte at each entry changes, and every write re-reads its word, so that a
    # function starting within 8 bytes of another never gets the other's byte written back.
    saved = {}
    for address in entries:
        where = base + address
        word = ptrace(PTRACE_PEEKTEXT, pid, where)
        saved[where] = word & 0xFF
        ptrace(PTRACE_POKETEXT, pid, where, (word & ~0xFF) | 0xCC)
    entered = set()
    try:
        status = follow(pid, saved, entered)
    except ProcessLookupError:
        status = None
    if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        # Killed under the breakpoints (by a trap this loop did not place) or failed: the
        # list would be short without a word.
        sys.exit("%s did not run to its end under the breakpoints (wait status %s)"
                 % (" ".join(program)[:60], status))
    return {entries[address - base] for address in entered}


def follow(main_pid, saved, entered):
    """Runs the stopped program `main_pid` to its end, with every thread it starts, adding to
    `entered` the address of each function whose breakpoint (in `saved`: address -> original
    byte) a thread hits. Returns the main thread's wait status at its end."""
    restored = set()
    ptrace(PTRACE_CONT, main_pid, 0, 0)
    while True:
        try:
            pid, status = os.waitpid(-1, WAIT_ALL)
        except ChildProcessError:
            return None
        if not os.WIFSTOPPED(status):
            if pid == main_pid:
                return status
            continue  # a thread ended
        event, stop_signal = status >> 16, os.WSTOPSIG(status)
        deliver = 0
        if event in (PTRACE_EVENT_CLONE, PTRACE_EVENT_EXIT) or stop_signal == signal.SIGSTOP:
            pass  # a new thread's first stop, a thread starting another, or one ending
        elif stop_signal == signal.SIGTRAP:
            try:
                where = ptrace(PTRACE_PEEKUSER, pid, RIP_OFFSET) - 1
                if where in saved:
                    word = ptrace(PTRACE_PEEKTEXT, pid, where)
                    ptrace(PTRACE_POKETEXT, pid, where, (word & ~0xFF) | saved.pop(where))
                    restored.add(where)
                    entered.add(where)
                if where in restored:
                    # This thread's trap, or another's at the same entry, queued before the
                    # byte came back: run the original instruction.
                    ptrace(PTRACE_POKEUSER, pid, RIP_OFFSET, where)
                else:
                    deliver = stop_signal
            except ProcessLookupError:
                continue  # the thread was killed meanwhile (its process is exiting)
        else:
            deliver = stop_signal
        try:
            ptrace(PTRACE_CONT, pid, 0, deliver)
        except ProcessLookupError:
            pass  # the thread is gone (its process exiting)

def text_symbols(library):
    """{name: [(address, size)]} of the library's functions (nm's t/T/w/W with a size)."""
    out = subprocess.run(["nm", "-S", library], capture_output=True, text=True,
                         check=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwW":
            symbols.setdefault(parts[3], []).append((int(parts[0], 16), int(parts[1], 16)))
    return symbols


def windows_of(names, symbols):
    """How many 64 KiB windows of the file the named functions touch, and their bytes."""
    windows, size = set(), 0
    for name in names:
        for address, length in symbols.get(name, []):
            size += length
            windows.update(range(address // WINDOW, (address + max(length, 1) - 1) // WINDOW + 1))
    return len(windows), size


def sections_of(name):
    """The input sections GCC may put function NAME in under -ffunction-sections: .text.NAME,
    or with a prefix for code it judged cold (.cold parts, functions only cold code calls),
    start-up only (called from static constructors) or hot. A complete-object constructor
    or destructor (C1, D1) is an alias of the base-object one (C2, D2), whose section it is."""
    if name.endswith(".cold"):
        return [".text.unlikely." + name[:-len(".cold")]]
    bases = [name]
    for alias, base in (("C1E", "C2E"), ("D1E", "D2E"), ("C1I", "C2I")):
        if alias in name:
            bases.append(name.replace(alias, base, 1))
    return [prefix + base for base in bases
            for prefix in (".text.", ".text.unlikely.", ".text.startup.", ".text.hot.")]


def linker_script(names, steady_names, commit):
    lines = [
        "/* libnumarena_preload.so: the functions a process runs at start-up and on its first",
        " * allocations, side by side before .text, so that they share the fewest 64 KiB",
        " * fault-around windows (see tools/preload_startup_order.py, which wrote this file).",
        " * Written %s at %s from: %s;" % (
            datetime.date.today().isoformat(), commit,
            "; ".join(" ".join(p) for p in DEFAULT_PROGRAMS)),
        " * each under NUMARENA_POLICY=%s. Then, in %s, the functions" % (
            " and ".join(POLICIES), STEADY_SECTION),
        " * only allocation-heavy Python scripts run (STEADY_PROGRAMS in the tool). */",
        "SECTIONS",
        "{",
        "  .text.numarena_startup :",
        "  {",
    ]
    # Not built with -ffunction-sections: glibc's libc_nonshared.a (pthread_atfork, which
    # jemalloc and numarena call at start-up), GCC's crtbeginS.o (frame_dummy, which every
    # process runs from .init_array; nm gives it no size, so the trace never sees it) and
    # Abseil's LowLevelAlloc, whose allocation functions sit in a section of their own
    # (ABSL_ATTRIBUTE_SECTION(malloc_hook)).
    lines.append("    *libc_nonshared.a:*(.text .text.*)")
    lines.append("    *crtbeginS.o(.text .text.*)")
    # _fini, which the dynamic linker calls at exit: crti.o's prologue and crtn.o's epilogue
    # of it, in link order as in the default script's .fini, but here rather than after all
    # of .text, where it cost every process a window of its own at exit.
    lines.append("    KEEP (*(SORT_NONE(.fini)))")
    lines.append("    *(malloc_hook)")
    for name in sorted(names):
        lines.append("    *(%s)" % " ".join(sections_of(name)))
    lines += ["  }", "  %s :" % STEADY_SECTION, "  {"]
    for name in sorted(steady_names):
        lines.append("    *(%s)" % " ".join(sections_of(name)))
    lines += ["  }", "}", "INSERT BEFORE .text;", ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, help="libnumarena_preload.so to profile")
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    parser.add_argument("--check", action="store_true",
                        help="only print the windows the start-up functions occupy")
    args = parser.parse_args()
    library = os.path.abspath(args.library)
    symbols = text_symbols(library)
    entries = {}
    for name, spans in symbols.items():
        for address, _ in spans:
            entries.setdefault(address, name)
    def run_all(programs):
        names = set()
        for program in programs:
            for policy in POLICIES:
                found = functions_run(library, program, entries, policy)
                if not found:
                    sys.exit("no function of %s ran in %s: is it the library the program "
                             "loaded?" % (library, " ".join(program)[:60]))
                names |= found
        return names
    # Every allocation function the library exports (malloc, free, operator new and delete in
    # all their forms, ...) is an entry point some program calls on its first allocation;
    # the programs above are C and Python, which call no operator delete.
    exported = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                              text=True, check=True).stdout.split("\n")
    entry_points = {fields[2] for fields in (line.split() for line in exported)
                    if len(fields) == 3 and fields[1] in "TW"
                    and not fields[2].startswith("numarena_") and fields[2] in symbols}
    names = run_all(DEFAULT_PROGRAMS) | entry_points
    steady_names = run_all(STEADY_PROGRAMS) - names
    total_windows = len({a // WINDOW for spans in symbols.values() for a, _ in spans})
    windows, size = windows_of(names, symbols)
    print("%d functions ran (%d KiB); they touch %d of the %d 64 KiB windows holding text"
          % (len(names), size // 1024, windows, total_windows))
    windows, size = windows_of(names | steady_names, symbols)
    print("with the %d more the steady workload ran (%d KiB in all): %d windows"
          % (len(steady_names), size // 1024, windows))
    if args.check:
        return
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    with open(args.output, "w") as out:
        out.write(linker_script(names, steady_names, commit))
    print("wrote", os.path.relpath(args.output, os.getcwd()))


if __name__ == "__main__":
    main()
