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
