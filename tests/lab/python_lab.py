"""The Python module in the NUMA lab: placement of memory allocated from Python, asserted page
by page with the kernel's own answer (move_pages with no target nodes, called here through
libc's syscall(), not through numarena), against what QEMU was given (/lab/topology.txt).

    python3 -S python_lab.py PACKAGE_DIR            (inside the lab; tests/lab/python_lab.sh)
    python3 -S python_lab.py PACKAGE_DIR --list-files   (on the host: the files to copy in)

Checks, in every topology: a NodeBuffer bound to each node has every page there even when
touched from the farthest node's CPU; an interleaved NodeBuffer spreads its pages over all
nodes; prefault() moves a Python bytearray's pages to a node and correct() migrates the pages
of an mmap first touched elsewhere; with a quota budget installed, a NodeBuffer larger than the quota
raises MemoryError (the process lives on). In `tiny` (node 1: 256 MiB): with Budget("system")
a NodeBuffer larger than node 1 raises MemoryError instead of the kernel's OOM killer.
Exit status 0 only when every check passes.
"""
import ctypes
import faulthandler
import mmap
import os
import sys
import threading

PAGE = mmap.PAGESIZE
MIB = 1 << 20
SYS_move_pages = 279  # x86_64

failures = []


def check(ok, what):
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)


def expected_topology():
    nodes, cpus, mem_mib = [], {}, {}
    with open(os.environ["NUMARENA_LAB_TOPOLOGY_FILE"]) as lines:
        for line in lines:
            key, *values = line.split()
            if key == "nodes":
                nodes = [int(v) for v in values]
            elif key == "cpus":
                cpus[int(values[0])] = [int(v) for v in values[1:]]
            elif key == "mem_mib":
                mem_mib[int(values[0])] = int(values[1])
    return nodes, {n: cpus.get(n, []) for n in nodes}, mem_mib


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def kernel_page_nodes(address, length):
    """The node of every page of [address, address + length) per the kernel (move_pages
    with nodes = NULL); a negative entry is -errno (e.g. -EFAULT/-ENOENT: not resident)."""
    first = address - address % PAGE
    count = (address + length - first + PAGE - 1) // PAGE
    pages = (ctypes.c_void_p * count)(*[first + i * PAGE for i in range(count)])
    status = (ctypes.c_int * count)()
    result = _libc.syscall(ctypes.c_long(SYS_move_pages), ctypes.c_long(0),
                           ctypes.c_ulong(count), pages, None, status, ctypes.c_int(0))
    if result != 0:
        raise OSError(ctypes.get_errno(), "move_pages")
    return list(status)


def histogram(page_nodes):
    counts = {}
    for node in page_nodes:
        counts[node] = counts.get(node, 0) + 1
    return counts


class Pinned:
    """Runs the with-block on `cpus` (this thread), restoring the affinity afterwards."""

    def __init__(self, cpus):
        self.cpus = set(cpus)

    def __enter__(self):
        self.saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)

    def __exit__(self, *exc):
        os.sched_setaffinity(0, self.saved)


def farthest_cpu_node(numarena, node, nodes, cpus):
    with_cpus = [n for n in nodes if cpus[n]]
    return max(with_cpus, key=lambda n: (numarena.distance(node, n), n))


def touch(buffer_view):
    buffer_view[:] = b"\x5a" * len(buffer_view)


def test_bound_buffers(numarena, nodes, cpus):
    # Allocated and touched on the farthest node's CPU: only the binding can put the pages
    # on `node` (neither first touch nor the allocating thread's node would).
    for node in nodes:
        toucher = farthest_cpu_node(numarena, node, nodes, cpus)
        with Pinned(cpus[toucher]):
            buf = numarena.NodeBuffer(8 * MIB, node=node, alignment=PAGE)
            touch(buf.view())
        with buf:
            found = histogram(kernel_page_nodes(buf.address, buf.size))
            check(found == {node: buf.size // PAGE},
                  f"NodeBuffer(node={node}) touched from node {toucher}: pages {found}")
            report = numarena.page_nodes(buf)
            check(report.pages_on_node == {node: buf.size // PAGE},
                  f"numarena.page_nodes agrees for node {node}: {report.pages_on_node}")


def test_interleaved_buffer(numarena, nodes):
    policy = "interleave(" + ",".join(str(n) for n in nodes) + ")"
    with numarena.NodeBuffer(32 * MIB, policy=policy, alignment=2 * MIB) as buf:
        check(buf.node == numarena.NODE_MIXED, f"{policy}: node_of says mixed ({buf.node})")
        touch(buf.view())
        found = histogram(kernel_page_nodes(buf.address, buf.size))
        pages = buf.size // PAGE
        fair = pages // len(nodes)
        check(set(found) == set(nodes) and min(found.values()) >= fair // 2,
              f"NodeBuffer(policy={policy!r}): {pages} pages spread over every node: {found}")


def test_prefault_and_correct(numarena, nodes, cpus):
    target = nodes[-1]
    data = bytearray(8 * MIB)  # Python's own (glibc) memory, untouched pages
    report = numarena.prefault(data, target)
    found = histogram(kernel_page_nodes(ctypes.addressof(
        (ctypes.c_char * len(data)).from_buffer(data)), len(data)))
    check(found == {target: report.pages_checked} and report.failed == 0,
          f"prefault(bytearray, {target}): {report}, kernel: {found}")

    # correct() of memory first touched elsewhere: a fresh anonymous mapping (Python's mmap
    # module), so every page's first touch is ours, on `source` (a bytearray may reuse heap
    # pages glibc's calloc already touched wherever the thread ran).
    source = next(n for n in nodes if cpus[n] and n != target)
    moved = mmap.mmap(-1, 8 * MIB)
    moved.madvise(mmap.MADV_NOHUGEPAGE)  # base pages: one move_pages entry is one page
    with Pinned(cpus[source]):
        moved[:] = b"\1" * len(moved)
    anchor = (ctypes.c_char * len(moved)).from_buffer(moved)
    address = ctypes.addressof(anchor)
    before = histogram(kernel_page_nodes(address, len(moved)))
    report = numarena.correct(moved, target)
    after = histogram(kernel_page_nodes(address, len(moved)))
    check(before == {source: len(moved) // PAGE} and report.moved == len(moved) // PAGE and
          after == {target: len(moved) // PAGE},
          f"correct(mmap, {target}) after first touch on {source}: before {before}, "
          f"{report}, after {after}")
    check(moved[0] == 1 and moved[len(moved) - 1] == 1, "correct() kept the contents")
    del anchor
    moved.close()


def test_quota_budget(numarena, nodes):
    # 48 MiB: over the 32 MiB quota but well inside what the smallest lab node (256 MiB,
    # about 137 MiB free) can take, so the quota refuses it and not the node's free-memory
    # check (a 128 MiB request under quota:64M was refused by the node check on "tiny").
    node = nodes[-1]
    with numarena.Budget("quota:32M") as budget:
        try:
            numarena.NodeBuffer(48 * MIB, node=node)
            check(False, f"quota:32M: a 48 MiB NodeBuffer on node {node} was allowed")
        except MemoryError as error:
            check(isinstance(error, numarena.ResourceExhaustedError) and "quota" in str(error),
                  f"quota:32M: 48 MiB on node {node} raises MemoryError from the quota: {error}")
        with numarena.NodeBuffer(16 * MIB, node=node) as buf:
            touch(buf.view())
            snapshot = {n.node: n for n in budget.snapshot()}[node]
            check(snapshot.numarena_bytes >= 16 * MIB and snapshot.refusals >= 1,
                  f"quota:32M: the budget counted 16 MiB and the refusal: {snapshot}")
        check(budget.admit(node, 1 * MIB) == numarena.Admission.OK and
              budget.admit(node, 1 << 30) == numarena.Admission.NEVER,
              "quota:32M: admit says OK for 1 MiB and NEVER for 1 GiB")


def test_system_budget_on_a_small_node(numarena, mem_mib):
    small = 1
    with numarena.Budget("system") as budget:
        capacity = {n.node: n for n in budget.snapshot()}[small].capacity
        check(capacity <= mem_mib[small] * MIB,
              f"system budget: node {small} capacity {capacity} <= {mem_mib[small]} MiB")
        try:
            buf = numarena.NodeBuffer((mem_mib[small] + 64) * MIB, node=small)
            touch(buf.view())
            check(False, "system budget: a NodeBuffer larger than node 1 was allowed")
        except MemoryError as error:
            check(True, f"system budget: larger than node {small} raises MemoryError "
                        f"(no OOM kill): {error}")
        # The node still serves what fits.
        with numarena.NodeBuffer(32 * MIB, node=small) as buf:
            touch(buf.view())
            found = histogram(kernel_page_nodes(buf.address, buf.size))
            check(set(found) == {small}, f"system budget: 32 MiB still lands on node "
                                         f"{small}: {found}")


def test_threads(numarena, nodes, cpus):
    # Each pinned thread allocates for its own node (current_node) and frees on another.
    results, buffers = {}, {}

    def work(node):
        with Pinned(cpus[node]):
            here = numarena.current_node()
            buf = numarena.NodeBuffer(4 * MIB, node=here, alignment=PAGE)
            touch(buf.view())
            results[node] = (here, histogram(kernel_page_nodes(buf.address, buf.size)))
            buffers[node] = buf

    threads = [threading.Thread(target=work, args=(n,)) for n in nodes if cpus[n]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for node, (here, found) in sorted(results.items()):
        check(here == node and found == {node: 4 * MIB // PAGE},
              f"thread pinned to node {node}: current_node {here}, pages {found}")
    for buf in buffers.values():
        buf.close()  # on the main thread, not the allocating one


def dump_stacks_before_the_deadline():
    # The lab kills a VM that runs past its timeout and CI keeps only what is printed: a few
    # seconds before the lab's watchdog (NUMARENA_LAB_DEADLINE, in seconds of uptime), every
    # Python thread's stack goes to stderr.
    deadline = os.environ.get("NUMARENA_LAB_DEADLINE")
    if not deadline:
        return
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    faulthandler.dump_traceback_later(max(1.0, float(deadline) - uptime - 5), exit=False)


def main():
    dump_stacks_before_the_deadline()
    package_dir = sys.argv[1]
    sys.path.insert(0, package_dir)
    if os.environ.get("NUMARENA_LAB_TOPOLOGY"):
        print(f"python_lab: importing numarena from {package_dir}", file=sys.stderr, flush=True)
    import numarena  # noqa: E402 (the package directory comes from the command line)

    if "--list-files" in sys.argv[2:]:
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if path and os.path.exists(path):
                print(os.path.realpath(path))
        return 0

    topology = os.environ.get("NUMARENA_LAB_TOPOLOGY")
    if not topology:
        print("python_lab: run me in the NUMA lab (tests/lab/python_lab.sh)", file=sys.stderr)
        return 2
    nodes, cpus, mem_mib = expected_topology()
    print(f"python_lab: topology {topology}, nodes {nodes}, library {numarena.library_path}",
          flush=True)
    check([n.id for n in numarena.nodes()] == nodes,
          f"numarena.nodes() lists the nodes QEMU was given: {[n.id for n in numarena.nodes()]}")
    test_bound_buffers(numarena, nodes, cpus)
    test_interleaved_buffer(numarena, nodes)
    test_prefault_and_correct(numarena, nodes, cpus)
    test_threads(numarena, nodes, cpus)
    test_quota_budget(numarena, nodes)
    if topology == "tiny":
        test_system_budget_on_a_small_node(numarena, mem_mib)
    metrics = numarena.metrics_text()
    check('numarena_arena_allocated_bytes{policy="bind(0)"}' in metrics,
          "metrics_text() reports the arenas Python used")
    if failures:
        print(f"python_lab: {len(failures)} checks failed", file=sys.stderr)
        return 1
    print("python_lab: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
