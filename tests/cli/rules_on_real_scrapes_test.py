"""The shipped alert rules, run by `promtool test rules` on series taken from real scrapes of
both places numarena's metrics come from: `numarena exporter` (on recorded fixture machines)
and a process's own endpoint (`numarena run --metrics-port`, on this host).

    rules_on_real_scrapes_test.py NUMARENA_BINARY RULES_FILE FIXTURES_DIR

Each scrape becomes promtool input series (every sample held constant for an hour, with the
job and instance labels a scrape adds); a scenario may change the values of some series (a
process whose memory is remote, a tripped budget) but never their names or labels, so an
alert that reads a name or label no server emits cannot fire here. Checked:
  - families both servers emit have the same label names (one name per metric, whatever
    serves it), numarena_build_info is in both, and no series has a `pid` label;
  - every metric a rule reads is in one of the scrapes;
  - each alert fires, with the labels it must keep, on the scrape whose numbers call for it
    (checked through ALERTS{alertstate="firing"}), and stays quiet where it must: on the
    healthy in-process scrape, and DeviceNumaNodeUnknown on a one-node machine whose
    devices report numa_node -1 (laptop-1node), where `numarena doctor` calls that harmless.
Every wait has a deadline; every process started is stopped.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

numarena, rules, fixtures = sys.argv[1:4]
failures = []
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
STEPS = 70  # one sample a minute for 70 minutes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_when_up(port, process, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"FAIL: {what} exited ({process.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.1)
    sys.exit(f"FAIL: {what} did not serve within 30 s")


def parse(text):
    """[(name, labels_text, {label: value}, value)] of a scrape."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            failures.append(f"unreadable sample line {line!r}")
            continue
        labels_text = m.group(2) or ""
        samples.append((m.group(1), labels_text, dict(LABEL.findall(labels_text)),
                        float(m.group(3))))
    return samples


def exporter_scrape(args, what):
    port = free_port()
    process = subprocess.Popen([numarena, "exporter", "--port", str(port)] + args,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return parse(scrape_when_up(port, process, what))
    finally:
        process.terminate()
        process.wait(timeout=15)


def machine(name):
    root = os.path.join(fixtures, name)
    return ["--sysfs-root", os.path.join(root, "sys"), "--procfs-root", os.path.join(root, "proc")]


def series(samples, instance, change=None):
    """promtool input_series for `samples` scraped as job "numarena" at `instance`; `change`
    maps a sample (name, labels) to its new value, or None to keep it."""
    out = []
    for name, labels_text, labels, value in samples:
        if change is not None:
            new = change(name, labels)
            value = value if new is None else new
        if not math.isfinite(value):
            continue
        extra = f'job="numarena",instance="{instance}"'
        text = f"{name}{{{labels_text + ',' if labels_text else ''}{extra}}}"
        out.append({"series": text, "values": " ".join([repr(value)] * STEPS)})
    return out


def firing(alertname, eval_time, expected):
    """A promql test: the firing alerts named `alertname` at `eval_time` are exactly
    `expected` (each a dict of the alert's labels, alertname and alertstate added)."""
    samples = []
    for labels in expected:
        all_labels = dict(labels, alertname=alertname, alertstate="firing")
        text = ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
        samples.append({"labels": f"ALERTS{{{text}}}", "value": 1})
    return {"expr": f'ALERTS{{alertname="{alertname}",alertstate="firing"}}',
            "eval_time": eval_time, "exp_samples": samples}


def alert_names():
    with open(rules) as f:
        return re.findall(r"^\s*- alert: (\w+)", f.read(), re.M)


def main():
    # The exporter on recorded two-node machines: ops-good (process 4242 "llm-server" on node
    # 0, GPU 0000:c1:00.0 on node 1), ops-unknown-node (a GPU with numa_node -1); and the
    # one-node laptop whose devices all say -1.
    exporter_good = exporter_scrape(machine("ops-good") + [
        "--pid", "4242", "--pid", "999999999", "--device", "0000:c1:00.0"], "exporter ops-good")
    exporter_unknown = exporter_scrape(machine("ops-unknown-node"), "exporter ops-unknown-node")
    exporter_laptop = exporter_scrape(machine("laptop-1node"), "exporter laptop-1node")

    # A process's own endpoint: python3 under the override with a 64 MiB quota.
    port = free_port()
    program = subprocess.Popen(
        [numarena, "run", "--local", "--budget", "quota:64M", "--metrics-port", str(port), "--",
         sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        in_process = parse(scrape_when_up(port, program, "numarena run --metrics-port"))
    finally:
        program.kill()
        program.wait()

    # One name per metric: the families both serve carry the same label names.
    def label_names(samples):
        names = {}
        for name, _, labels, _ in samples:
            names.setdefault(name, set()).update(labels)
        return names
    exporter_labels, in_process_labels = label_names(exporter_good), label_names(in_process)
    for name in sorted(set(exporter_labels) & set(in_process_labels)):
        if exporter_labels[name] != in_process_labels[name]:
            failures.append(f"{name}: labels {sorted(exporter_labels[name])} from the exporter, "
                            f"{sorted(in_process_labels[name])} in process")
    for family in ("numarena_build_info", "numarena_process_local_memory_ratio",
                   "numarena_process_memory_bytes"):
        for what, labels in (("the exporter", exporter_labels), ("in process", in_process_labels)):
            if family not in labels:
                failures.append(f"no {family} from {what}")
    for what, samples in (("exporter", exporter_good), ("in process", in_process)):
        with_pid = sorted({name for name, _, labels, _ in samples if "pid" in labels})
        if with_pid:
            failures.append(f"{what}: series with a pid label: {with_pid}")

    # Every metric a rule reads is served.
    with open(rules) as f:
        rule_text = f.read()
    served = set(exporter_labels) | set(in_process_labels) | set(label_names(exporter_unknown))
    for name in sorted(set(re.findall(r"\b(numarena_[a-z0-9_]+)\b", rule_text))):
        if name not in served:
            failures.append(f"the rules read {name}, which no scrape has")

    good = "exporter-good:9464"
    unknown = "exporter-unknown:9464"
    laptop = "exporter-laptop:9464"
    local = "in-process:9464"
    base = {"job": "numarena"}
    remote = lambda name, labels: 0.5 if name == "numarena_process_local_memory_ratio" else None

    def budget_full(name, labels):
        if name == "numarena_budget_usage_ratio":
            return 0.95
        if name == "numarena_budget_state":
            return 1.0 if labels["state"] == "tripped" else 0.0
        return None

    tests = [
        # The exporter's real figures: a GPU far from the process, a --pid that is gone.
        {"interval": "1m", "input_series": series(exporter_good, good),
         "promql_expr_test": [
             firing("DeviceOnRemoteNumaNode", "10m", [dict(
                 base, instance=good, severity="critical", command="llm-server",
                 bus_id="0000:c1:00.0", kind="gpu")]),
             firing("NumarenaExporterTargetGone", "10m", [dict(
                 base, instance=good, severity="warning", state="gone")]),
             firing("NumaProcessMemoryRemote", "20m", []),
             firing("DeviceNumaNodeUnknown", "60m", [])]},
        # The same process with half its memory remote.
        {"interval": "1m", "input_series": series(exporter_good, good, remote),
         "promql_expr_test": [firing("NumaProcessMemoryRemote", "20m", [dict(
             base, instance=good, severity="warning", command="llm-server")])]},
        # numa_node -1 on a two-node machine: after 30 minutes; on the one-node laptop: never.
        {"interval": "1m",
         "input_series": series(exporter_unknown, unknown) + series(exporter_laptop, laptop),
         "promql_expr_test": [
             firing("DeviceNumaNodeUnknown", "10m", []),
             firing("DeviceNumaNodeUnknown", "40m", [dict(
                 base, instance=unknown, severity="warning", bus_id="0000:41:00.0",
                 kind="gpu")])]},
        # The in-process endpoint: healthy as scraped; remote memory and a full budget fire.
        {"interval": "1m", "input_series": series(in_process, local),
         "promql_expr_test": [firing(name, "60m", []) for name in alert_names()]},
        {"interval": "1m", "input_series": series(in_process, local, remote),
         "promql_expr_test": [firing("NumaProcessMemoryRemote", "20m", [dict(
             base, instance=local, severity="warning", command="python3")])]},
        {"interval": "1m", "input_series": series(in_process, local, budget_full),
         "promql_expr_test": [
             firing("NumarenaBudgetTripped", "5m", [dict(
                 base, instance=local, severity="critical", node="0", state="tripped")]),
             firing("NumarenaBudgetWarn", "5m", [dict(
                 base, instance=local, severity="warning", node="0")])]},
    ]
    work = tempfile.mkdtemp(prefix="numarena-rules-")
    try:
        shutil.copy(rules, os.path.join(work, "rules.yml"))
        test_file = os.path.join(work, "tests.yml")
        with open(test_file, "w") as f:
            json.dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                       "tests": tests}, f)
        result = subprocess.run(["promtool", "test", "rules", test_file], capture_output=True,
                                text=True, timeout=120)
        if result.returncode != 0:
            failures.append("promtool test rules on the real scrapes:\n" + result.stdout[-6000:]
                            + result.stderr[-2000:])
    finally:
        shutil.rmtree(work)

    if failures:
        print("\n".join("FAILED: " + f for f in failures))
        sys.exit(1)
    print(f"{len(alert_names())} alerts checked by promtool on real scrapes of the exporter "
          "and an in-process endpoint")


main()
