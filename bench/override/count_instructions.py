"""Counts the instructions one malloc and one free execute, natively, by single-stepping them
under gdb (ptrace): user-mode instructions only, the vDSO's included, the kernel's not. No
hardware counter is needed (the shared hosts' VMs have none), and unlike valgrind the program
runs on the real kernel, so glibc registers rseq as it does in production (valgrind 3.19
refuses rseq and turns getcpu into a system call).

    gdb -q -batch -x bench/override/count_instructions.py \
        --args build/bench/override_shapes pairs 0.05

Environment: COUNT_PRELOAD_ENV, "NAME=VALUE NAME=VALUE" given to the program only (e.g. the
LD_PRELOAD and NUMARENA_POLICY that `numarena run --local` sets; gdb itself keeps its own
malloc); COUNT_SKIP (default 20000) calls of malloc to let pass first, so the caches are warm;
COUNT_PAIRS (default 30) pairs to count; COUNT_TRACE=1 also prints, for the last pair, how
many of the instructions each function executed. Prints "malloc min=A median=B" and
"free min=C median=D".
"""
import os
import statistics

import gdb  # noqa: the module gdb gives its Python scripts


def value(expression):
    return int(gdb.parse_and_eval(expression))


def function_at(pc):
    text = gdb.execute(f"info symbol {pc}", to_string=True)
    return text.split(" in section")[0].split(" + ")[0].strip()


def count_until_return(per_function=None):
    """At a function's first instruction: steps until it has returned to its caller. With a
    dict, adds up there how many instructions each function executed."""
    ret = value("*(unsigned long *)$sp")
    entry_sp = value("$sp")
    steps = 0
    while True:
        if per_function is not None:
            name = function_at(value("$pc"))
            per_function[name] = per_function.get(name, 0) + 1
        gdb.execute("stepi", to_string=True)
        steps += 1
        if value("$pc") == ret and value("$sp") > entry_sp:
            return steps


def main():
    gdb.execute("set startup-with-shell off")
    gdb.execute("set pagination off")
    gdb.execute("set breakpoint pending on")
    for item in os.environ.get("COUNT_PRELOAD_ENV", "").split():
        gdb.execute(f"set environment {item}")
    skip = int(os.environ.get("COUNT_SKIP", "20000"))
    pairs = int(os.environ.get("COUNT_PAIRS", "30"))
    gdb.execute("break malloc", to_string=True)
    gdb.execute(f"ignore 1 {skip}", to_string=True)
    gdb.execute("run", to_string=True)
    gdb.execute("delete", to_string=True)
    counts = {"malloc": [], "free": []}
    trace = os.environ.get("COUNT_TRACE") == "1"
    traced = {"malloc": {}, "free": {}}
    for i in range(pairs):
        last = trace and i == pairs - 1
        counts["malloc"].append(count_until_return(traced["malloc"] if last else None))
        gdb.execute("break free", to_string=True)
        gdb.execute("continue", to_string=True)
        gdb.execute("delete", to_string=True)
        counts["free"].append(count_until_return(traced["free"] if last else None))
        gdb.execute("break malloc", to_string=True)
        gdb.execute("continue", to_string=True)
        gdb.execute("delete", to_string=True)
    for name, values in counts.items():
        print(f"{name} min={min(values)} median={statistics.median(values)}")
        for function, n in sorted(traced[name].items(), key=lambda item: -item[1]):
            print(f"  {n:5d}  {function}")
    gdb.execute("kill", to_string=True)


main()
