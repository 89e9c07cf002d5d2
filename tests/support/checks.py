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


def failed():
    """The number of failed checks so far."""
    return len(_failures)
