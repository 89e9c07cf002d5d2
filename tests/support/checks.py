"""Named checks for the test scripts that run programs: each check prints "ok" or "FAILED"
with its detail, and the script ends with failed() as its exit status."""

_failures = []


def check(ok, what, detail=""):
    """Prints the check's line; a failed one is remembered, with its detail indented below."""
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        _failures.append(what)
        if detail:
            print("        " + detail.replace("\n", "\n        "), flush=True)


def check_refused_at_start(result, variable, value, expected):
    """A program run under the override with `variable`=`value` ended at start-up with status
    127 and the preload's one line naming the variable and saying what it expects."""
    check(result.returncode == 127 and
          f"numarena preload: {variable}='{value}'" in result.stderr and expected in result.stderr,
          f"{variable}={value!r} is refused at start-up with a clear line",
          f"status {result.returncode}: {result.stderr}")


def failed():
    """The number of failed checks so far."""
    return len(_failures)
