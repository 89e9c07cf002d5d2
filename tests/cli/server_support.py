"""Helpers the tests that start servers on loopback share (tests/cli/*_test.py): free ports
and stopping a process started with subprocess.Popen."""
import signal
import socket
import subprocess


def free_ports(count):
    """`count` distinct ports free on loopback now (all held open while picking, so the
    kernel cannot hand out the same one twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def stop(process):
    """SIGTERM, then SIGKILL after 15 s; waits for the process either way."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def write_prometheus_config(path, rules, jobs):
    """A Prometheus configuration at `path` that scrapes and evaluates every second, loads
    the rule file `rules`, and scrapes each job of `jobs` ({name: port}) on loopback."""
    scrapes = "".join(f"  - job_name: {name}\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{port}']\n" for name, port in jobs.items())
    with open(path, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                f"  evaluation_interval: 1s\nrule_files:\n  - {rules}\n"
                f"scrape_configs:\n{scrapes}")
