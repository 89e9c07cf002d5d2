"""`numarena advise --for vllm|sglang|torchrun|llama.cpp|systemd` on the recorded multi-GPU
fixture machines, run as printed.

    advise_for_frameworks_test.py NUMARENA_BINARY FIXTURES_DIR

Each shell snippet is run by bash with stand-ins for vllm, python3, torchrun, llama-server
and numactl first on PATH; each stand-in records its arguments and environment. What the
frameworks require is then checked on what they would have received:
  - vLLM: --numa-bind with one --numa-bind-nodes entry per visible GPU (vLLM refuses a
    GPU index past the list), each entry the node of that GPU, VLLM_WORKER_MULTIPROC_METHOD
    =spawn (with fork vLLM binds nothing), and a warning when numactl is not on PATH;
  - SGLang: --numa-node with one entry per visible GPU, each the GPU's node;
  - torchrun: --numa-binding=node with one worker per visible GPU;
  - every CUDA_VISIBLE_DEVICES printed is exported (the snippet that refers to it sets it), and
    names GPUs in PCI address order whose node is the one advised;
  - without a GPU on the node, the server runs under numactl on that node;
  - systemd: ExecStartPre names this very binary, which runs.
Machines: ops-4gpu (two GPUs on each of two nodes), ops-good (one on each), epyc9654-snc4
(one GPU, four nodes; node 2 has none).
"""
import os
import subprocess
import sys
import tempfile

numarena, fixtures = sys.argv[1:3]
failures = []


def gpus_of(machine):
    """[(bus_id, node)] of the machine's GPUs in PCI address order (CUDA's order)."""
    root = os.path.join(fixtures, machine, "sys/bus/pci/devices")
    found = []
    for bus in sorted(os.listdir(root)):
        with open(os.path.join(root, bus, "class")) as f:
            cls = int(f.read(), 16)
        if cls >> 16 in (0x03, 0x12):
            with open(os.path.join(root, bus, "numa_node")) as f:
                found.append((bus, int(f.read())))
    return found


def advise(machine, args):
    run = subprocess.run([numarena, "advise", *args, "--sysfs-root",
                          os.path.join(fixtures, machine, "sys")],
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        failures.append(f"{machine} advise {args}: exit {run.returncode}: {run.stderr}")
    return run.stdout


def run_snippet(snippet, with_numactl=True):
    """Runs `snippet` with the stand-ins; {program: (argv, env)} of those called, stderr."""
    with tempfile.TemporaryDirectory(prefix="numarena-advise-") as work:
        stubs = os.path.join(work, "bin")
        os.mkdir(stubs)
        programs = ["vllm", "python3", "torchrun", "llama-server"]
        if with_numactl:
            programs.append("numactl")
        for program in programs:
            path = os.path.join(stubs, program)
            with open(path, "w") as f:
                f.write("#!/bin/sh\n"
                        f"printf '%s\\n' \"$@\" > '{work}/{program}.args'\n"
                        f"env > '{work}/{program}.env'\n")
            os.chmod(path, 0o755)
        script = os.path.join(work, "advice.sh")
        with open(script, "w") as f:
            f.write(snippet)
        env = {"PATH": stubs + ":/usr/bin:/bin", "MODEL": "m", "SCRIPT": "s.py", "HOME": work}
        if not with_numactl:  # a PATH without numactl at all: the stand-ins and env
            tools = os.path.join(work, "tools")
            os.mkdir(tools)
            os.symlink("/usr/bin/env", os.path.join(tools, "env"))
            env["PATH"] = stubs + ":" + tools
        run = subprocess.run(["/bin/bash", "-eu", script], capture_output=True, text=True,
                             env=env, timeout=60)
        if run.returncode != 0:
            failures.append(f"the snippet failed ({run.returncode}): {run.stderr}\n{snippet}")
        called = {}
        for program in programs:
            args_file = os.path.join(work, program + ".args")
            if os.path.exists(args_file):
                with open(args_file) as f:
                    argv = f.read().splitlines()
                with open(os.path.join(work, program + ".env")) as f:
                    environ = dict(line.split("=", 1) for line in f.read().splitlines()
                                   if "=" in line)
                called[program] = (argv, environ)
        return called, run.stderr


def values_after(argv, flag):
    """The words after `flag` up to the next option."""
    if flag not in argv:
        return None
    out = []
    for word in argv[argv.index(flag) + 1:]:
        if word.startswith("-"):
            break
        out.append(word)
    return out


def visible(env, machine, node, what):
    """The CUDA_VISIBLE_DEVICES list, checked against the machine's GPUs on `node`."""
    gpus = gpus_of(machine)
    text = env.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        failures.append(f"{what}: CUDA_VISIBLE_DEVICES is not exported")
        return []
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        failures.append(f"{what}: CUDA_DEVICE_ORDER is {env.get('CUDA_DEVICE_ORDER')}")
    indices = [int(i) for i in text.split(",")]
    for i in indices:
        if i >= len(gpus) or gpus[i][1] != node:
            failures.append(f"{what}: CUDA_VISIBLE_DEVICES={text} names GPU {i}, not on node {node}")
    return indices


def check_frameworks(machine, args, node):
    what = f"{machine} advise {' '.join(args)}"
    expected_gpus = [i for i, (_, n) in enumerate(gpus_of(machine)) if n == node]
    if "--gpu" in args:
        expected_gpus = [int(args[args.index("--gpu") + 1])]

    called, _ = run_snippet(advise(machine, args + ["--for", "vllm"]))
    argv, env = called.get("vllm", ([], {}))
    indices = visible(env, machine, node, what + " --for vllm")
    if indices != expected_gpus:
        failures.append(f"{what} --for vllm: GPUs {indices}, want {expected_gpus}")
    nodes = values_after(argv, "--numa-bind-nodes")
    if "--numa-bind" not in argv or nodes != [str(node)] * len(indices):
        failures.append(f"{what} --for vllm: vllm got {argv}; want --numa-bind and "
                        f"--numa-bind-nodes {' '.join([str(node)] * len(indices))}")
    if env.get("VLLM_WORKER_MULTIPROC_METHOD") != "spawn":
        failures.append(f"{what} --for vllm: VLLM_WORKER_MULTIPROC_METHOD is "
                        f"{env.get('VLLM_WORKER_MULTIPROC_METHOD')}, vLLM binds only with spawn")
    _, stderr = run_snippet(advise(machine, args + ["--for", "vllm"]), with_numactl=False)
    if "numactl is not on PATH" not in stderr:
        failures.append(f"{what} --for vllm: no word about the missing numactl ({stderr!r})")

    called, _ = run_snippet(advise(machine, args + ["--for", "sglang"]))
    argv, env = called.get("python3", ([], {}))
    indices = visible(env, machine, node, what + " --for sglang")
    if argv[:2] != ["-m", "sglang.launch_server"] or \
            values_after(argv, "--numa-node") != [str(node)] * len(indices):
        failures.append(f"{what} --for sglang: python3 got {argv}; want --numa-node "
                        f"{' '.join([str(node)] * len(indices))}")

    called, _ = run_snippet(advise(machine, args + ["--for", "torchrun"]))
    argv, env = called.get("torchrun", ([], {}))
    indices = visible(env, machine, node, what + " --for torchrun")
    if "--numa-binding=node" not in argv or f"--nproc_per_node={len(indices)}" not in argv:
        failures.append(f"{what} --for torchrun: torchrun got {argv}; want --numa-binding=node "
                        f"--nproc_per_node={len(indices)}")


# Two GPUs on each node: the node forms give two GPUs and two list entries.
check_frameworks("ops-4gpu", ["--node", "1"], 1)
check_frameworks("ops-4gpu", ["--node", "0"], 0)
check_frameworks("ops-4gpu", ["--nic", "0000:21:00.0"], 0)
for index, (_, node) in enumerate(gpus_of("ops-4gpu")):
    check_frameworks("ops-4gpu", ["--gpu", str(index)], node)
check_frameworks("ops-good", ["--node", "1"], 1)

# A node without a GPU: the whole server under numactl on the node.
for target, program in (("vllm", "vllm"), ("sglang", "python3"), ("torchrun", "torchrun"),
                        ("llama.cpp", "llama-server")):
    called, _ = run_snippet(advise("epyc9654-snc4", ["--node", "2", "--for", target]))
    argv, env = called.get("numactl", ([], {}))
    if argv[:2] != ["--cpunodebind=2", "--membind=2"] or program not in argv:
        failures.append(f"epyc9654-snc4 --node 2 --for {target}: numactl got {argv}")
    if "CUDA_VISIBLE_DEVICES" in env:
        failures.append(f"epyc9654-snc4 --node 2 --for {target}: CUDA_VISIBLE_DEVICES set")

# systemd: the health check is this binary, and it runs.
unit = advise("ops-4gpu", ["--gpu", "2", "--for", "systemd"])
check = [line for line in unit.splitlines() if line.startswith("ExecStartPre=")]
if not check:
    failures.append(f"no ExecStartPre in\n{unit}")
else:
    words = check[-1][len("ExecStartPre="):].split()
    if not os.path.isfile(words[0]) or not os.path.samefile(words[0], numarena):
        failures.append(f"ExecStartPre runs {words[0]}, not this numarena ({numarena})")
    elif words[1:] != ["doctor", "--check", "--gpu", "0000:c1:00.0"]:
        failures.append(f"ExecStartPre: {words}")
    elif subprocess.run([words[0], "doctor", "--help"], capture_output=True).returncode != 0:
        failures.append(f"{words[0]} doctor --help fails")
    if "CUDA_VISIBLE_DEVICES=2\n" not in unit:
        failures.append(f"the unit does not make GPU 2 visible:\n{unit}")

# docs/operators.md shows one output as the tool prints it now.
docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                    "operators.md")
with open(docs) as f:
    text = f.read()
marker = "<!-- advise-example: --gpu 2 --for vllm (ops-4gpu) -->\n```sh\n$ numarena advise --gpu 2 --for vllm\n"
if marker not in text:
    failures.append("docs/operators.md lost its advise example block")
else:
    shown = text.split(marker, 1)[1].split("```", 1)[0]
    printed = advise("ops-4gpu", ["--gpu", "2", "--for", "vllm"])
    if shown != printed:
        failures.append(f"docs/operators.md shows\n{shown}\nbut advise prints\n{printed}")

if failures:
    print("\n".join("FAILED: " + f for f in failures))
    sys.exit(1)
print("advise --for: vllm, sglang, torchrun, llama.cpp and systemd run as printed, one node "
      "per visible GPU")
