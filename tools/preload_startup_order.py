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
of each of its functions (ptrace; x86-64 Linux), keeps every function entered, and writes a
linker script that gathers their sections (the objects are built with -ffunction-sections:
function F is in section .text.F, or .text.unlikely.F / .text.startup.F where GCC judged it
cold or start-up only) into one output section before .text. cmake/NumarenaPreload.cmake
links with it. A name that no longer exists matches nothing and costs only its line; the
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
PTRACE_O_TRACEEXIT, PTRACE_O_EXITKILL, PTRACE_EVENT_EXIT = 0x40, 0x100000, 6
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
    on every function's first instruction, each removed at its first hit. Single-threaded
    programs only (a breakpoint in an untraced thread would kill it)."""
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
    ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL)
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
    entered, signal_number = set(), 0
    try:
        follow(pid, base, saved, entered, signal_number)
    except ProcessLookupError:
        # The program died under the breakpoints (python3 -c pass, at times: a trap this loop did
        # not place, or one in an untraced thread, ends it): keep what it ran until then.
        print("note: %s ended early under the breakpoints; its list may be short"
              % program[0], file=sys.stderr)
        try:
            os.waitpid(pid, 0)  # reap it, if the loop has not
        except ChildProcessError:
            pass
    return {entries[address] for address in entered}


def follow(pid, base, saved, entered, signal_number):
    """Runs the stopped program `pid` to its end, adding to `entered` the offset of each
    function whose breakpoint (in `saved`: address -> original byte) it hits."""
    while True:
        ptrace(PTRACE_CONT, pid, 0, signal_number)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSTOPPED(status):
            break
        signal_number = 0
        if status >> 8 == signal.SIGTRAP | (PTRACE_EVENT_EXIT << 8):
            ptrace(PTRACE_CONT, pid)
            os.waitpid(pid, 0)
            break
        if os.WSTOPSIG(status) != signal.SIGTRAP:
            signal_number = os.WSTOPSIG(status)
            continue
        where = ptrace(PTRACE_PEEKUSER, pid, RIP_OFFSET) - 1
        if where not in saved:
            continue
        word = ptrace(PTRACE_PEEKTEXT, pid, where)
        ptrace(PTRACE_POKETEXT, pid, where, (word & ~0xFF) | saved.pop(where))
        ptrace(PTRACE_POKEUSER, pid, RIP_OFFSET, where)
        entered.add(where - base)


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


def linker_script(names, programs, commit):
    lines = [
        "/* libnumarena_preload.so: the functions a process runs at start-up and on its first",
        " * allocations, side by side before .text, so that they share the fewest 64 KiB",
        " * fault-around windows (see tools/preload_startup_order.py, which wrote this file).",
        " * Written %s at %s from: %s;" % (
            datetime.date.today().isoformat(), commit,
            "; ".join(" ".join(p) for p in programs)),
        " * each under NUMARENA_POLICY=%s. */" % " and ".join(POLICIES),
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
    names = set()
    for program in DEFAULT_PROGRAMS:
        for policy in POLICIES:
            found = functions_run(library, program, entries, policy)
            if not found:
                sys.exit("no function of %s ran in %s: is it the library the program loaded?"
                         % (library, " ".join(program)))
            names |= found
    total_windows = len({a // WINDOW for spans in symbols.values() for a, _ in spans})
    windows, size = windows_of(names, symbols)
    print("%d functions ran (%d KiB); they touch %d of the %d 64 KiB windows holding text"
          % (len(names), size // 1024, windows, total_windows))
    if args.check:
        return
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    with open(args.output, "w") as out:
        out.write(linker_script(names, DEFAULT_PROGRAMS, commit))
    print("wrote", os.path.relpath(args.output, os.getcwd()))


if __name__ == "__main__":
    main()
