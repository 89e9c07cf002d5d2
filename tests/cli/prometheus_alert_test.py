"""A real Prometheus server (Debian's `prometheus` package) scrapes `numarena exporter` on
loopback with the shipped alert rules loaded, and NumarenaBudgetWarn goes pending when a
node's budget passes its warn line.

    prometheus_alert_test.py NUMARENA_BINARY RULES_FILE FIXTURE_TREE

The exporter reports the budget a System-mode budget gives each node (used = MemTotal -
MemFree of the node's meminfo), read afresh at every scrape; `--pid` adds only a process's
per-node memory. So the test runs the exporter on a copy of a fixture machine
(--sysfs-root/--procfs-root) whose node 0 meminfo it rewrites: 50 % used (no alert), then
82 % used (past warn at 80 %, below admission-closed at 85 %). Prometheus scrapes every second
and evaluates the rules every second; the rules file is the shipped one, unchanged: an alert
is "pending" from the first evaluation that finds its expression true, before its `for:`
(2m for NumarenaBudgetWarn) has elapsed, so nothing needs shortening.

Checked through Prometheus's HTTP API: the target is up, the alert is absent while the node
is at 50 %, then pending for node 0 only, with the job and instance labels kept (the rule
once dropped them), and NumarenaBudgetTripped never appears. Ports are the kernel's free
picks; every wait has a deadline; both servers are stopped and the temporary directory
removed whatever happens. A missing prometheus binary is a failure, not a skip: the
project's scripts (tools/dev.sh) install it.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from server_support import free_ports, stop, write_prometheus_config

numarena, rules, fixture = sys.argv[1:4]
DEADLINE_SECONDS = 60


def fail(message):
    print("FAIL:", message, file=sys.stderr)
    sys.exit(1)


def get(url, timeout=5):
    """The body of a GET, or None when the server does not answer (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode()
    except (ConnectionError, urllib.error.URLError, socket.timeout):
        return None


def wait_for(what, check, processes, seconds=DEADLINE_SECONDS):
    """Polls `check` until it returns a true value; fails after `seconds` or when one of
    `processes` has exited."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        for name, process, log in processes:
            if process.poll() is not None:
                fail(f"{name} exited with status {process.returncode} while waiting for {what}; "
                     f"its log:\n{read(log)}")
        last = check()
        if last:
            return last
        time.sleep(0.25)
    fail(f"no {what} within {seconds} s")


def read(path):
    with open(path, errors="replace") as f:
        return f.read()[-4000:]


def write_meminfo(path, total_kb, used_fraction):
    """Node meminfo with `used_fraction` of MemTotal used, replaced atomically so a scrape
    never reads half a file."""
    free_kb = int(total_kb * (1 - used_fraction))
    text = (f"Node 0 MemTotal:       {total_kb} kB\n"
            f"Node 0 MemFree:        {free_kb} kB\n"
            f"Node 0 MemUsed:        {total_kb - free_kb} kB\n")
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def alerts(prometheus_url):
    body = get(prometheus_url + "/api/v1/alerts")
    if body is None:
        return None
    reply = json.loads(body)
    if reply.get("status") != "success":
        fail(f"/api/v1/alerts answered {body}")
    return reply["data"]["alerts"]


def main():
    prometheus = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not os.access(prometheus, os.X_OK):
        fail("the prometheus binary is missing: install Debian's prometheus package "
             "(tools/dev.sh deps does)")
    work = tempfile.mkdtemp(prefix="numarena-prometheus-")
    running = []
    try:
        machine = os.path.join(work, "machine")
        shutil.copytree(fixture, machine)
        meminfo = os.path.join(machine, "sys/devices/system/node/node0/meminfo")
        total_kb = 64 << 20  # 64 GiB, as the fixture's node 0
        write_meminfo(meminfo, total_kb, 0.50)

        exporter_port, prometheus_port = free_ports(2)
        exporter_log = os.path.join(work, "exporter.log")
        exporter = subprocess.Popen(
            [numarena, "exporter", "--port", str(exporter_port),
             "--sysfs-root", os.path.join(machine, "sys"),
             "--procfs-root", os.path.join(machine, "proc")],
            stdout=open(exporter_log, "w"), stderr=subprocess.STDOUT)
        running.append(("numarena exporter", exporter, exporter_log))

        config = os.path.join(work, "prometheus.yml")
        write_prometheus_config(config, rules, {"numarena": exporter_port})
        prometheus_log = os.path.join(work, "prometheus.log")
        server = subprocess.Popen(
            [prometheus, "--config.file", config,
             "--storage.tsdb.path", os.path.join(work, "data"),
             "--web.listen-address", f"127.0.0.1:{prometheus_port}"],
            stdout=open(prometheus_log, "w"), stderr=subprocess.STDOUT)
        running.append(("prometheus", server, prometheus_log))
        url = f"http://127.0.0.1:{prometheus_port}"

        wait_for("Prometheus ready", lambda: get(url + "/-/ready") is not None, running)

        def target_up():
            body = get(url + "/api/v1/targets")
            targets = json.loads(body)["data"]["activeTargets"] if body else []
            return any(t["health"] == "up" for t in targets)
        wait_for("exporter target up", target_up, running)

        # The 50 % sample has been scraped and evaluated: no budget alert yet.
        def usage_seen(value):
            def check():
                body = get(url + "/api/v1/query?query=numarena_budget_usage_ratio%7Bnode%3D%220%22%7D")
                if body is None:
                    return False
                result = json.loads(body)["data"]["result"]
                return bool(result) and abs(float(result[0]["value"][1]) - value) < 0.01
            return check
        wait_for("node 0 usage 0.5 in Prometheus", usage_seen(0.50), running)
        time.sleep(2.5)  # two more rule evaluations on the 50 % sample
        budget_alerts = [a for a in alerts(url) or [] if a["labels"]["alertname"].startswith("NumarenaBudget")]
        if budget_alerts:
            fail(f"a budget alert at 50 % usage: {budget_alerts}")

        # Past the warn line (80 %), below admission-closed (85 %).
        write_meminfo(meminfo, total_kb, 0.82)
        wait_for("node 0 usage 0.82 in Prometheus", usage_seen(0.82), running)

        def warn_pending():
            for a in alerts(url) or []:
                if a["labels"]["alertname"] == "NumarenaBudgetWarn":
                    return a
            return None
        alert = wait_for("NumarenaBudgetWarn alert", warn_pending, running)
        print("alert:", json.dumps(alert))
        labels = alert["labels"]
        problems = []
        if alert["state"] != "pending":
            problems.append(f"state {alert['state']}, expected pending (for: 2m has not passed)")
        if labels.get("node") != "0":
            problems.append(f"node label {labels.get('node')}, expected 0")
        if labels.get("job") != "numarena":
            problems.append(f"job label {labels.get('job')}, expected numarena (kept by the rule)")
        if labels.get("instance") != f"127.0.0.1:{exporter_port}":
            problems.append(f"instance label {labels.get('instance')}")
        if labels.get("severity") != "warning":
            problems.append(f"severity {labels.get('severity')}")
        if abs(float(alert["value"]) - 0.82) > 0.01:
            problems.append(f"value {alert['value']}, expected 0.82")
        others = [a["labels"] for a in alerts(url) or []
                  if a["labels"]["alertname"].startswith("NumarenaBudget")
                  and (a["labels"]["alertname"], a["labels"].get("node")) != ("NumarenaBudgetWarn", "0")]
        if others:
            problems.append(f"other budget alerts: {others}")
        if problems:
            fail("; ".join(problems))
        print("NumarenaBudgetWarn pending for node 0 at 82 % with job and instance kept")
    finally:
        for _, process, _ in reversed(running):
            stop(process)
        shutil.rmtree(work, ignore_errors=True)


main()
