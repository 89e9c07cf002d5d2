"""The two /metrics servers a user meets — `numarena exporter` and `numarena run
--metrics-port` — against clients that misbehave, and where they listen.

    metrics_server_test.py NUMARENA_BINARY

For each server: 50 connections that send nothing, plus one that sends half a request, are
open while a real scrape is made: it must be answered within 2 s (a server that serves one
connection at a time, or a pool of a few threads, waits for the idle ones' timeouts). A
request sent with a half-close (shutdown(SHUT_WR) after it, with and without the blank line
that ends the headers) gets its answer. Then, for `numarena run`: the listening socket is
on 127.0.0.1 only unless --metrics-listen says otherwise (read from /proc/PID/net/tcp*, so no
second interface is needed), and with --metrics-port P-Q each process of the tree that execs
serves its own port, and `numarena exporter --pid FIRST --tree` finds and sums all three; a
child made by fork() without exec serves the next port and holds none of its parent's.
Every wait has a deadline; every process started is killed at the end.
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

numarena = sys.argv[1]
failures = []
children = []


def free_ports(count):
    """`count` consecutive ports free on loopback now."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return list(range(base, base + count))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise SystemExit("no free port range")


def start(args):
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    children.append(process)
    return process


def scrape(port, timeout):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_serving(port, process, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            failures.append(f"{what} exited ({process.returncode}): {process.stderr.read()}")
            return False
        try:
            scrape(port, 5)
            return True
        except OSError:
            time.sleep(0.1)
    failures.append(f"{what} did not serve on port {port} within 30 s")
    return False


def raw_request(port, data, timeout=5):
    """Sends `data`, half-closes, reads the whole answer (b"" when none in `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
        return answer


def check_misbehaving_clients(port, what):
    idle = []
    try:
        for _ in range(50):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        partial = socket.create_connection(("127.0.0.1", port), timeout=5)
        partial.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        idle.append(partial)
        time.sleep(0.3)  # the server has seen them all
        start_time = time.monotonic()
        try:
            status, body = scrape(port, 10)
            took = time.monotonic() - start_time
            if status != 200 or "numarena_build_info{" not in body:
                failures.append(f"{what}: scrape beside idle clients: status {status}")
            elif took > 2:
                failures.append(f"{what}: a scrape beside 50 idle connections took {took:.1f} s")
        except OSError as e:
            failures.append(f"{what}: no scrape beside 50 idle connections within 10 s ({e})")
    finally:
        for s in idle:
            s.close()
    for request in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /metrics HTTP/1.0\r\n"):
        answer = raw_request(port, request)
        if not answer.startswith(b"HTTP/1.1 200") or b"numarena_build_info{" not in answer:
            failures.append(f"{what}: half-closed request {request!r} got {answer[:80]!r}")
    answer = raw_request(port, b"POST /metrics HTTP/1.1\r\n\r\n")
    if not answer.startswith(b"HTTP/1.1 405"):
        failures.append(f"{what}: POST got {answer[:80]!r}, want 405")


def answering(ports, want, deadline):
    """The ports of `ports` that answer a scrape, once `want` of them do or at the deadline."""
    served = []
    while time.monotonic() < deadline:
        served = []
        for p in ports:
            try:
                scrape(p, 5)
                served.append(p)
            except OSError:
                pass
        if len(served) >= want:
            break
        time.sleep(0.2)
    return served


def run_program_with_children(ports, make_kids, deadline):
    """`numarena run --metrics-port FIRST-LAST` of a python3 that runs `make_kids` (which sets
    `kids` to the pids of the children it makes), writes them to a file and sleeps. Returns the
    run's process and the pids ([] when none were written by the deadline)."""
    pid_file = f"/tmp/numarena-metrics-kids-{os.getpid()}-{ports[0]}"
    program = ("import os, subprocess, sys, time\n" + make_kids +
               "open(sys.argv[1] + '.tmp', 'w').write(' '.join(str(k) for k in kids))\n"
               "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
               "time.sleep(120)\n")
    run = start([numarena, "run", "--local", "--metrics-port", f"{ports[0]}-{ports[-1]}", "--",
                 sys.executable, "-c", program, pid_file])
    kids = []
    while time.monotonic() < deadline and not kids:
        try:
            kids = [int(k) for k in open(pid_file).read().split()]
        except FileNotFoundError:
            time.sleep(0.1)
    if os.path.exists(pid_file):
        os.unlink(pid_file)
    return run, kids


def listening_addresses(pid, port):
    """The local addresses (hex, as /proc/net/tcp writes them) of the sockets listening on
    `port` (state 0A) in pid's network namespace."""
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    fields = line.split()
                    address, hex_port = fields[1].split(":")
                    if fields[3] == "0A" and int(hex_port, 16) == port:
                        found.append(address)
        except FileNotFoundError:
            pass
    return found


def listener_owner(port, pids):
    """Which of `pids` holds the socket listening on loopback `port` (None: none of them)."""
    inodes = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                    inodes.append(fields[9])
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in [f"socket:[{i}]" for i in inodes]:
                    return pid
            except OSError:
                pass
    return None


try:
    # The exporter.
    port, = free_ports(1)
    exporter = start([numarena, "exporter", "--port", str(port), "--pid", "self"])
    if wait_serving(port, exporter, "numarena exporter"):
        check_misbehaving_clients(port, "numarena exporter")

    # numarena run --metrics-port: the default address, the misbehaving clients.
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    port, = free_ports(1)
    run = start([numarena, "run", "--local", "--metrics-port", str(port), "--"] + sleeper)
    if wait_serving(port, run, "numarena run --metrics-port"):
        check_misbehaving_clients(port, "numarena run --metrics-port")
        addresses = listening_addresses(run.pid, port)
        if addresses != ["0100007F"]:
            failures.append(f"numarena run --metrics-port listens on {addresses}, "
                            "want 127.0.0.1 (0100007F) only")
    run.kill()

    port, = free_ports(1)
    run = start([numarena, "run", "--local", "--metrics-port", str(port), "--metrics-listen",
                 "::", "--"] + sleeper)
    if wait_serving(port, run, "numarena run --metrics-listen ::"):
        addresses = listening_addresses(run.pid, port)
        if addresses != ["00000000000000000000000000000000"]:
            failures.append(f"--metrics-listen :: listens on {addresses}, want :: only")
    run.kill()

    # A tree of three processes (the program and two children it execs) on a range of four
    # ports: each serves its own port.
    ports = free_ports(4)
    deadline = time.monotonic() + 30
    run, kids = run_program_with_children(
        ports, "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])"
        ".pid for _ in range(2)]\n", deadline)
    served = answering(ports, 3, deadline)
    if served != ports[:3]:
        failures.append(f"--metrics-port {ports[0]}-{ports[-1]} with three processes: "
                        f"ports {served} answer, want {ports[:3]}")
    else:
        owners = {listener_owner(p, [run.pid] + kids) for p in served}
        if owners != set([run.pid] + kids):
            failures.append(f"ports {served} are served by {owners}, want {[run.pid] + kids}")
    # The exporter finds the tree from its first process and sums it per command.
    port, = free_ports(1)
    exporter = start([numarena, "exporter", "--port", str(port), "--pid", str(run.pid),
                      "--tree"])
    if wait_serving(port, exporter, "numarena exporter --tree"):
        _, body = scrape(port, 10)
        if 'numarena_processes{command="python3"} 3\n' not in body:
            failures.append("exporter --pid RUN --tree: want numarena_processes"
                            '{command="python3"} 3 in\n' +
                            "\n".join(l for l in body.splitlines() if "process" in l))
    exporter.kill()
    for kid in kids:
        os.kill(kid, 9)
    run.kill()

    # A child made by fork() without exec serves its own figures on the next free port of the
    # range, and keeps no copy of its parent's listening socket (which would hold the parent's
    # port once the parent is gone).
    ports = free_ports(3)
    deadline = time.monotonic() + 30
    run, kids = run_program_with_children(
        ports, "kids = [os.fork()]\nif kids[0] == 0:\n    time.sleep(120)\n    os._exit(0)\n",
        deadline)
    served = answering(ports, 2, deadline) if kids else []
    if not kids:
        failures.append(f"fork without exec: the program wrote no child pid: {run.poll()}")
    elif served != ports[:2]:
        failures.append(f"fork without exec on {ports[0]}-{ports[-1]}: ports {served} answer, "
                        f"want {ports[:2]} (the parent's and the child's)")
    else:
        child = kids[0]
        owners = [listener_owner(p, [run.pid, child]) for p in ports[:2]]
        if owners != [run.pid, child]:
            failures.append(f"fork without exec: ports {ports[:2]} are held by {owners}, "
                            f"want parent {run.pid} and child {child}")
        if listener_owner(ports[0], [child]) is not None:
            failures.append(f"fork without exec: the child {child} still holds the parent's "
                            f"listening socket on {ports[0]}")
        _, body = scrape(ports[1], 10)
        if 'numarena_process_memory_bytes{command="python3"' not in body:
            failures.append(f"the forked child's scrape has no process memory:\n{body[:2000]}")
    for kid in kids:
        os.kill(kid, 9)
    run.kill()
finally:
    for process in children:
        if process.poll() is None:
            process.kill()
        process.wait()

if failures:
    print("\n".join("FAILED: " + f for f in failures))
    sys.exit(1)
print("metrics servers: scrapes beside 50 idle connections in < 2 s, half-closed requests "
      "answered, 127.0.0.1 by default, one port per process of a tree, exporter --tree, "
      "a fork()ed child's own port")
