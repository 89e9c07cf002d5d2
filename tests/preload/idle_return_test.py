#!/usr/bin/env python3
"""Memory return under `numarena run` (NUMARENA_RETURN_IDLE_MS, docs/run.md).

    idle_return_test.py NUMARENA_CLI IDLE_RETURN

- A program that frees a 128 MiB burst and then makes no call at all gets its resident set
  back to within 24 MiB of where it started (the default schedule, 1 s), with no call from it:
  the wait is bounded by two minutes, so a slow host only makes it take longer.
- NUMARENA_RETURN_IDLE_MS=0 keeps the freed memory (3 s idle: at least half of the burst is
  still resident, as before memory return existed).
- With NUMARENA_RETURN_IDLE_MS=0 still, malloc_trim(0) right after the frees returns 1 and
  gives the burst back at once (the override's malloc_trim purges numarena's caches and dirty
  pages; glibc's would trim only glibc's own heap).
- A bad value ends the program at start-up with a line naming the variable, status 127.
Exit status 0 only when every check passes.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import check, check_refused_at_start, failed  # noqa: E402


def run(args, extra_env=None):
    env = dict(os.environ)
    env.pop("NUMARENA_RETURN_IDLE_MS", None)
    env.update(extra_env or {})
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)


def main():
    cli, program = sys.argv[1:3]
    returned = run([cli, "run", "--membind", "0", "--", program, "returned", "120"])
    check(returned.returncode == 0,
          "a burst freed before an idle goes back to the kernel without calls",
          returned.stdout + returned.stderr)
    kept = run([cli, "run", "--membind", "0", "--", program, "kept", "3"],
               {"NUMARENA_RETURN_IDLE_MS": "0"})
    check(kept.returncode == 0, "NUMARENA_RETURN_IDLE_MS=0 keeps freed memory for reuse",
          kept.stdout + kept.stderr)
    trimmed = run([cli, "run", "--membind", "0", "--", program, "trimmed", "0"],
                  {"NUMARENA_RETURN_IDLE_MS": "0"})
    check(trimmed.returncode == 0, "malloc_trim(0) gives a freed burst back at once",
          trimmed.stdout + trimmed.stderr)
    for bad in ("abc", "-5", "3600001", "99999999999999999999"):
        refused = run([cli, "run", "--membind", "0", "--", program, "kept", "0"],
                      {"NUMARENA_RETURN_IDLE_MS": bad})
        check_refused_at_start(refused, "NUMARENA_RETURN_IDLE_MS", bad, "milliseconds")
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
