#!/usr/bin/env python3
"""Transparent huge pages under `numarena run` (NUMARENA_HUGE_PAGES, docs/run.md).

    huge_pages_test.py NUMARENA_CLI

python3 runs under the override and allocates a 9 MiB bytearray (malloc), then reads the
kernel's THPeligible for the mapping that holds its middle (/proc/self/smaps):
- by default the block is not eligible (the override asks for no huge pages, as glibc,
  jemalloc, tcmalloc and mimalloc do);
- with --huge-pages, and with NUMARENA_HUGE_PAGES=1 in the environment, it is;
- NUMARENA_HUGE_PAGES=0 is the default said out loud;
- any other value ends the program at start-up with a line naming the variable, status 127.
Skipped (77) when the kernel gives no transparent huge pages on request (THP "never").
Exit status 0 only when every check passes.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import check, check_refused_at_start, failed  # noqa: E402

PROBE = r"""
import ctypes
block = bytearray(9 << 20)
middle = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block)) + len(block) // 2
inside = False
with open("/proc/self/smaps") as smaps:
    for line in smaps:
        first = line.split()[0]
        if "-" in first and not first.endswith(":"):
            begin, end = (int(x, 16) for x in first.split("-"))
            inside = begin <= middle < end
        elif inside and line.startswith("THPeligible:"):
            print("eligible=%s" % line.split()[1])
            break
    else:
        print("eligible=none")
"""


def run(cli, flags, extra_env=None):
    env = dict(os.environ)
    env.pop("NUMARENA_HUGE_PAGES", None)
    env.update(extra_env or {})
    return subprocess.run([cli, "run", "--membind", "0"] + flags + ["--", sys.executable, "-c",
                                                                     PROBE],
                          capture_output=True, text=True, env=env, timeout=120)


def main():
    cli = sys.argv[1]
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            modes = f.read().strip()
    except OSError as e:
        print(f"skipped: no transparent huge pages here ({e})")
        return 77
    if "[never]" in modes:
        print(f"skipped: transparent huge pages are off ({modes})")
        return 77
    cases = [
        ("by default", [], None, "0"),
        ("NUMARENA_HUGE_PAGES=0", [], {"NUMARENA_HUGE_PAGES": "0"}, "0"),
        ("--huge-pages", ["--huge-pages"], None, "1"),
        ("NUMARENA_HUGE_PAGES=1", [], {"NUMARENA_HUGE_PAGES": "1"}, "1"),
    ]
    for name, flags, env, expected in cases:
        result = run(cli, flags, env)
        check(result.returncode == 0 and result.stdout.strip() == f"eligible={expected}",
              f"{name}: a 9 MiB block's pages are {'' if expected == '1' else 'not '}"
              "eligible for transparent huge pages",
              f"status {result.returncode}: {result.stdout}{result.stderr}")
    for bad in ("yes", "2", "10", " 1"):
        check_refused_at_start(run(cli, [], {"NUMARENA_HUGE_PAGES": bad}), "NUMARENA_HUGE_PAGES",
                               bad, "expected 1")
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
