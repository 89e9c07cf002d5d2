"""`numarena run --metrics-port P`: the program (here a python3 that only sleeps, under the
override) serves numarena's metrics at http://127.0.0.1:P/metrics.

    metrics_port_test.py NUMARENA_BINARY

Checks the status line, the content type, families from each source (node memory, the
process's memory, the override's arena with its policy, the budget), a 404 for another path,
and that a program under `numarena run` without the option serves nothing on the port.
"""
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

numarena = sys.argv[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port, with_option):
    args = [numarena, "run", "--membind", "0", "--budget", "quota:1G"]
    if with_option:
        args += ["--metrics-port", str(port)]
    return subprocess.Popen(args + ["--", sys.executable, "-c", "import time; time.sleep(60)"])


def fetch(port, path, deadline):
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()
        except (ConnectionError, urllib.error.URLError):
            if time.monotonic() > deadline:
                return None, None, None
            time.sleep(0.2)


failures = []
port = free_port()
program = start(port, True)
try:
    status, content_type, body = fetch(port, "/metrics", time.monotonic() + 60)
    if status != 200:
        failures.append(f"GET /metrics: status {status}")
    else:
        if not content_type.startswith("text/plain; version=0.0.4"):
            failures.append(f"content type {content_type}")
        for needle in ['numarena_node_memory_total_bytes{node="0"}',
                       'numarena_process_memory_bytes{command="python3",node="0"',
                       'numarena_process_local_memory_ratio{command="python3"}',
                       'numarena_build_info{version="',
                       'numarena_arena_allocated_bytes{policy="bind(0)"}',
                       'numarena_budget_capacity_bytes{node="0"} 1073741824']:
            if needle not in body:
                failures.append(f"no '{needle}' in the metrics:\n{body[:3000]}")
        allocated = [line for line in body.splitlines()
                     if line.startswith('numarena_arena_allocated_bytes{policy="bind(0)"}')]
        if not allocated or float(allocated[0].split()[-1]) <= 0:
            failures.append(f"the arena reports no allocated bytes: {allocated}")
    status, _, _ = fetch(port, "/other", time.monotonic() + 10)
    if status != 404:
        failures.append(f"GET /other: status {status}, want 404")
finally:
    program.kill()
    program.wait()

port = free_port()
program = start(port, False)
try:
    time.sleep(2)
    status, _, _ = fetch(port, "/metrics", time.monotonic() + 1)
    if status is not None:
        failures.append(f"without --metrics-port the port answered {status}")
finally:
    program.kill()
    program.wait()

if failures:
    print("\n".join("FAILED: " + f for f in failures))
    sys.exit(1)
print("numarena run --metrics-port: /metrics served, 404 elsewhere, nothing without the option")
