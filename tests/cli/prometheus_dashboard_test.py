"""Every query of the shipped Grafana dashboard and every expression of the shipped alert
rules, evaluated by a real Prometheus server (Debian's `prometheus`) on loopback that scrapes
both kinds of numarena endpoint: `numarena exporter` (on the ops-good fixture machine, with
--pid, --device and a --pid that is gone) and a python3 under `numarena run --metrics-port`.

    prometheus_dashboard_test.py NUMARENA_BINARY RULES_FILE DASHBOARD_FILE FIXTURE_TREE

Each panel query (Grafana's $instance taken as all instances, $__rate_interval as 1m) and
each rule expression must return at least one series through /api/v1/query. A rule's
comparisons are evaluated with `bool` (`x > bool 10`), so the test asks "does this
expression see its series" rather than "does the alert fire now"; Prometheus must also
report every rule group healthy (no evaluation error). Ports are the kernel's picks, every
wait has a deadline (90 s in all), and every process started is stopped.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from server_support import free_ports, stop, write_prometheus_config

numarena, rules, dashboard, fixture = sys.argv[1:5]
DEADLINE = time.monotonic() + 90
failures = []


def api(url, path, **params):
    """The `data` of a Prometheus API answer, or None while it cannot answer."""
    query = "?" + urllib.parse.urlencode(params) if params else ""
    try:
        with urllib.request.urlopen(url + path + query, timeout=5) as r:
            reply = json.loads(r.read().decode())
    except (OSError, ValueError):
        return None
    return reply.get("data") if reply.get("status") == "success" else None


def wait(what, check, processes):
    while time.monotonic() < DEADLINE:
        for name, process in processes:
            if process.poll() is not None:
                sys.exit(f"FAIL: {name} exited ({process.returncode}) while waiting for {what}")
        result = check()
        if result:
            return result
        time.sleep(0.25)
    sys.exit(f"FAIL: no {what} within the test's 90 s")


def with_bool(expr):
    """`expr` with `bool` after every comparison outside label matchers and strings."""
    out, depth, quote, i = [], 0, None, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif c == "{":
            depth += 1
            out.append(c)
        elif c == "}":
            depth -= 1
            out.append(c)
        elif depth == 0 and expr[i:i + 2] in ("==", "!=", ">=", "<="):
            out.append(expr[i:i + 2] + " bool")
            i += 1
        elif depth == 0 and c in "<>":
            out.append(c + " bool")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def queries():
    """(what, PromQL) for every dashboard target and every rule expression."""
    import yaml
    with open(dashboard) as f:
        board = json.load(f)
    found = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = (target["expr"].replace("$instance", ".*")
                    .replace("$__rate_interval", "1m"))
            found.append((f"panel '{panel['title']}' {target['refId']}", expr))
    with open(rules) as f:
        for group in yaml.safe_load(f)["groups"]:
            for rule in group["rules"]:
                found.append((f"rule {rule['alert']}", with_bool(rule["expr"])))
    return found


def main():
    prometheus = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(prometheus, os.X_OK):
        sys.exit("FAIL: no prometheus binary: install Debian's prometheus package "
                 "(tools/dev.sh deps does)")
    work = tempfile.mkdtemp(prefix="numarena-dashboard-")
    running = []
    try:
        exporter_port, process_port, prometheus_port = free_ports(3)
        log = open(os.path.join(work, "log"), "w")
        running.append(("numarena exporter", subprocess.Popen(
            [numarena, "exporter", "--port", str(exporter_port),
             "--sysfs-root", os.path.join(fixture, "sys"),
             "--procfs-root", os.path.join(fixture, "proc"),
             "--pid", "4242", "--pid", "999999999", "--device", "0000:c1:00.0"],
            stdout=log, stderr=subprocess.STDOUT)))
        running.append(("numarena run --metrics-port", subprocess.Popen(
            [numarena, "run", "--local", "--budget", "quota:64M", "--metrics-port",
             str(process_port), "--", sys.executable, "-c", "import time; time.sleep(120)"],
            stdout=log, stderr=subprocess.STDOUT)))
        config = os.path.join(work, "prometheus.yml")
        write_prometheus_config(config, os.path.abspath(rules),
                                {"numarena-exporter": exporter_port,
                                 "numarena-process": process_port})
        running.append(("prometheus", subprocess.Popen(
            [prometheus, "--config.file", config, "--storage.tsdb.path",
             os.path.join(work, "data"), "--web.listen-address", f"127.0.0.1:{prometheus_port}"],
            stdout=log, stderr=subprocess.STDOUT)))
        url = f"http://127.0.0.1:{prometheus_port}"

        def both_up():
            data = api(url, "/api/v1/targets")
            targets = data["activeTargets"] if data else []
            return len([t for t in targets if t["health"] == "up"]) == 2
        wait("both targets up", both_up, running)
        # Two scrapes of each, so that rate() and increase() have their two samples.
        def two_samples():
            data = api(url, "/api/v1/query",
                       query="count(count_over_time(numarena_build_info[1m]) >= 2)")
            result = (data or {}).get("result") or []
            return bool(result) and result[0]["value"][1] == "2"
        wait("two samples of each target", two_samples, running)

        pending = queries()
        while pending and time.monotonic() < DEADLINE:
            still = []
            for what, expr in pending:
                data = api(url, "/api/v1/query", query=expr)
                if data is None or not data.get("result"):
                    still.append((what, expr))
            pending = still
            if pending:
                time.sleep(0.5)
        for what, expr in pending:
            failures.append(f"{what} returns no data: {expr}")

        groups = (api(url, "/api/v1/rules") or {}).get("groups", [])
        evaluated = [r for g in groups for r in g["rules"]]
        if not evaluated:
            failures.append("Prometheus loaded no rules")
        for rule in evaluated:
            if rule.get("health") not in ("ok", "unknown"):
                failures.append(f"rule {rule['name']}: {rule.get('health')} {rule.get('lastError')}")
    finally:
        for _, process in running:
            stop(process)
        shutil.rmtree(work, ignore_errors=True)

    if failures:
        print("\n".join("FAILED: " + f for f in failures))
        sys.exit(1)
    print(f"{len(queries())} dashboard and rule queries return data from a real Prometheus")


main()
