#!/usr/bin/env python3
"""`numarena run` keeps the C library's contract where a program can see it (docs/run.md).

    libc_contract_test.py NUMARENA_CLI PRELOAD_LIBRARY LIBC_CONTRACT

- The edge calls (aligned_alloc / memalign / posix_memalign with odd alignments, impossible
  sizes) answer under the override exactly as under the C library it replaces.
- A block freed twice in a row aborts, as glibc does, naming the double free.
- `--budget ''` is refused, not taken for "no budget".
- A malformed NUMARENA_POLICY of 100 KB gives a short error line, not the value echoed whole.
- An address-space limit (ulimit -v) numarena's reservations cannot fit under is said at
  start-up in one line, by `numarena run` and by the preload library alone.
- Under a quota, memory a program just freed is given again at once: a program that fills
  its quota until malloc says no, frees everything and asks for 128 B-4 KiB gets it all.
- malloc_usable_size (answered from numarena's class map without a call into jemalloc) says
  at least the size asked and at most a class above it, all of it writable, unchanged while
  the block lives, under glibc and under the override; there realloc to it keeps the block in
  place.
- Buffers grown by realloc in turns, 1 B to 3 MiB, keep every byte under glibc and under the
  override (whose realloc hands an outgrown medium block back to jemalloc).
- A large block realloc()ed past a neighbour keeps every byte, and its pages move into the
  new block without a fault (mremap), as under glibc; in a process that locked its memory
  (mlockall) the neighbour stays locked.
Exit status 0 only when every check passes.
"""
import os
import resource
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import check, failed  # noqa: E402


def run(args, env=None, limit_as=None):
    def lower_limit():
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, resource.RLIM_INFINITY))
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=lower_limit)


def main():
    cli, preload, program = sys.argv[1:4]
    base_env = {"PATH": "/usr/bin:/bin"}

    # The edges: the same answers as glibc's, every allocation numarena's.
    plain = run([program, "edges"], env=base_env)
    under = run([cli, "run", "--membind", "0", "--", program, "edges"])
    check(plain.returncode == 0 and under.returncode == 0, "the edge calls run under both",
          plain.stderr + under.stderr)
    plain_lines, under_lines = plain.stdout.splitlines(), under.stdout.splitlines()
    check(len(plain_lines) > 30 and plain_lines == under_lines,
          "every edge call answers under numarena run as under glibc",
          "\n".join(f"glibc:    {a}\nnumarena: {b}" for a, b in zip(plain_lines, under_lines)
                    if a != b))
    owned = [line for line in under.stderr.splitlines() if line.startswith("owned by numarena")]
    counts = owned[0].split(": ")[1].split(" of ") if owned else ["0", "1"]
    check(owned and counts[0] == counts[1] and int(counts[1]) > 20,
          "every block the edge calls returned is numarena's", under.stderr)

    # A double free in a row: glibc aborts, so must the override.
    for size in ("64", "1000", "65536", "3145728"):
        reference = run([program, "double-free", size], env=base_env)
        result = run([cli, "run", "--membind", "0", "--", program, "double-free", size])
        check(result.returncode == -signal.SIGABRT and
              "double free detected" in result.stderr,
              f"a {size}-byte block freed twice in a row aborts under numarena run "
              f"(glibc: {'aborts' if reference.returncode == -signal.SIGABRT else 'does not'})",
              f"exit {result.returncode}: {result.stdout}{result.stderr}")

    # --budget '' is a bad budget, not no budget.
    result = run([cli, "run", "--membind", "0", "--budget", "", "--", "/bin/true"])
    check(result.returncode == 2 and "--budget ''" in result.stderr,
          "numarena run --budget '' is refused", f"exit {result.returncode}: {result.stderr}")

    # A 100 KB policy: one short line.
    junk = "bind(" + "7," * 51200 + ")"
    result = run(["/bin/true"], env=dict(base_env, LD_PRELOAD=preload, NUMARENA_POLICY=junk))
    check(result.returncode == 127 and len(result.stderr) < 2000 and
          f"({len(junk)} bytes)" in result.stderr,
          "a 100 KB NUMARENA_POLICY is named in a short line",
          f"exit {result.returncode}, {len(result.stderr)} bytes: {result.stderr[:300]}")
    result = run([cli, "run", "--policy", junk, "--", "/bin/true"])
    check(result.returncode == 2 and len(result.stderr) < 2000,
          "numarena run --policy of 100 KB answers in a short line",
          f"exit {result.returncode}, {len(result.stderr)} bytes")

    # ulimit -v 8 GiB: /bin/true runs under glibc; numarena says what it needs, once.
    limit = 8 << 30
    control = run(["/bin/true"], env=base_env, limit_as=limit)
    check(control.returncode == 0, "/bin/true runs under an 8 GiB address-space limit")
    for args, env, status, what in (
            ([cli, "run", "--membind", "0", "--", "/bin/true"], None, 2, "numarena run --membind 0"),
            ([cli, "run", "--local", "--", "/bin/true"], None, 2, "numarena run --local"),
            (["/bin/true"], dict(base_env, LD_PRELOAD=preload, NUMARENA_POLICY="local"), 127,
             "LD_PRELOAD with NUMARENA_POLICY=local"),
            (["/bin/true"], dict(base_env, LD_PRELOAD=preload, NUMARENA_POLICY="bind(0)"), 127,
             "LD_PRELOAD with NUMARENA_POLICY=bind(0)")):
        result = run(args, env=env, limit_as=limit)
        lines = result.stderr.strip().splitlines()
        check(result.returncode == status and len(lines) == 1 and "ulimit -v" in lines[0] and
              "8.0 GiB" in lines[0],
              f"{what} under ulimit -v 8 GiB: one line that names the limit and the fix",
              f"exit {result.returncode}: {result.stderr}")
    result = run([cli, "run", "--membind", "0", "--", "/bin/true"], limit_as=1 << 40)
    check(result.returncode == 0, "numarena run --membind 0 under a 1 TiB limit runs",
          result.stderr)

    # Freed memory is given again at once under a quota.
    for policy in (["--membind", "0"], ["--local"]):
        result = run([cli, "run", *policy, "--budget", "quota:32M", "--", program, "refill"])
        check(result.returncode == 0 and "malloc said no" in result.stdout,
              f"numarena run {' '.join(policy)} --budget quota:32M: a program that filled the "
              "quota, freed everything and asked for 128 B-4 KiB at once got them all",
              f"exit {result.returncode}: {result.stdout}{result.stderr}")

    # malloc_usable_size; and buffers grown by realloc keep their contents (an outgrown block
    # goes back to jemalloc, which carves the other buffers' next steps from it). Each mode
    # holds under glibc and under both policies, with numarena's blocks in the second case.
    for mode, promise in (("usable", "malloc_usable_size keeps its contract"),
                          ("grow", "buffers grown by realloc keep every byte")):
        reference = run([program, mode], env=base_env)
        check(reference.returncode == 0, f"glibc: {promise}", reference.stdout[-2000:])
        for policy in (["--membind", "0"], ["--local"]):
            result = run([cli, "run", *policy, "--", program, mode])
            check(result.returncode == 0 and "owned by numarena: 0 of" not in result.stderr,
                  f"numarena run {' '.join(policy)}: {promise}",
                  f"exit {result.returncode}: {result.stdout[-2000:]}{result.stderr[-500:]}")

    # A large block that cannot grow where it lies moves its pages into the new block
    # (mremap), as glibc moves an mmap()ed one: its bytes arrive without a page fault.
    reference = run([program, "move"], env=base_env)
    check(reference.returncode == 0, "glibc: a realloc()ed 6 MiB block keeps every byte",
          reference.stdout[-2000:])
    # Pinned to one CPU: under --local a thread that changed nodes between the malloc and the
    # realloc would get its new block from another node's heap, and that one is copied.
    cpu = min(os.sched_getaffinity(0))
    for policy in (["--membind", "0"], ["--local"]):
        result = run(["taskset", "-c", str(cpu), cli, "run", *policy, "--", program, "move"])
        faults = next((int(word.split("=")[1]) for word in result.stdout.split()
                       if word.startswith("faults=")), None)
        check(result.returncode == 0 and "owned by numarena: 0 of" not in result.stderr and
              faults is not None and faults < 64 and "moved" in result.stdout,
              f"numarena run {' '.join(policy)}: a 6 MiB block realloc()ed past a neighbour "
              "keeps every byte and moves its 1536 pages without faulting them in again",
              f"exit {result.returncode}: {result.stdout[-2000:]}{result.stderr[-500:]} "
              f"(glibc: {reference.stdout.strip()})")

    # The same move in a process that locked its memory (mlockall) after an earlier move:
    # MREMAP_DONTUNMAP would unlock the whole mapping the block lay in, neighbours and all,
    # and a mover that remembered "nothing locked" from the first move would use it.
    reference = run([program, "locked-move"], env=base_env)
    check(reference.returncode == 0, "glibc: a realloc() under mlockall leaves the neighbour locked",
          reference.stdout[-2000:])
    if "skipped" not in reference.stdout:
        for policy in (["--membind", "0"], ["--local"]):
            result = run(["taskset", "-c", str(cpu), cli, "run", *policy, "--", program,
                          "locked-move"])
            check(result.returncode == 0 and "moved" in result.stdout,
                  f"numarena run {' '.join(policy)}: a large block realloc()ed under mlockall "
                  "moves and leaves its neighbour's mapping locked",
                  f"exit {result.returncode}: {result.stdout[-2000:]}{result.stderr[-500:]}")

    print(f"{failed()} failed" if failed() else "all passed")
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
