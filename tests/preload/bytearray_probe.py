"""Python allocating bytearrays under `numarena run` in the NUMA lab (tests/lab/preload_lab.cpp).
Runs with `python3 -S` (the lab VM carries only the interpreter and the encodings package).

    bytearray_probe.py place     a 64 MiB bytearray (less one page), every page written; prints
                                 "pages nodeK=D ..." with D the growth of the process's pages
                                 on node K, the kernel's own per-node page counts summed over
                                 /proc/self/numa_maps, before and after. A first bytearray of
                                 16 MiB is made (and kept) before the count starts: a large
                                 block on fresh pages makes numarena give back what it holds
                                 freed (the interpreter's start-up garbage), which would count
                                 against the second one's growth (16 MiB, not 64: the tiny
                                 lab's node 1 has room for both, its root file system and the
                                 reserve numarena keeps free; a MemoryError prints the node's
                                 meminfo). One page less
                                 than 64 MiB because a bytearray asks malloc for one byte
                                 more than its length: 64 MiB + 1 is an 80 MiB block
                                 (jemalloc's large classes are four per doubling), which
                                 numarena commits and charges whole, so the two would take
                                 160 MiB of the tiny lab's 256 MiB node 1, where the VM's
                                 root file system may hold 40 MiB more on some boots
    bytearray_probe.py exhaust   16 MiB bytearrays until MemoryError; prints
                                 "MemoryError after=M MiB" and exits 0
"""
import sys


def node_pages():
    totals = {}
    with open("/proc/self/numa_maps") as maps:
        for line in maps:
            for word in line.split()[2:]:
                if word.startswith("N") and "=" in word:
                    node, pages = word[1:].split("=")
                    totals[int(node)] = totals.get(int(node), 0) + int(pages)
    return totals


def node_memory():
    """The lines of every node's meminfo that say how full it is."""
    import os
    out = []
    base = "/sys/devices/system/node"
    for name in sorted(os.listdir(base)):
        if name.startswith("node") and name[4:].isdigit():
            with open(os.path.join(base, name, "meminfo")) as meminfo:
                keep = ("MemTotal", "MemFree", "Active(file)", "Inactive(file)", "Shmem:")
                out += [" ".join(line.split()) for line in meminfo if any(k in line for k in keep)]
    return "; ".join(out)


if sys.argv[1] == "place":
    size = (64 << 20) - 4096
    try:
        first = bytearray((16 << 20) - 4096)
        before = node_pages()
        block = bytearray(size)
    except MemoryError:
        print("MemoryError: " + node_memory())
        raise
    for i in range(0, len(block), 4096):
        block[i] = 1
    after = node_pages()
    nodes = sorted(set(before) | set(after))
    print("pages " + " ".join("node%d=%d" % (n, after.get(n, 0) - before.get(n, 0)) for n in nodes))
elif sys.argv[1] == "exhaust":
    keep = []
    try:
        while len(keep) < 4096:
            keep.append(bytearray(16 << 20))  # zero-filled: every page is touched
    except MemoryError:
        print("MemoryError after=%d MiB" % (16 * len(keep)))
        sys.exit(0)
    print("never refused after=%d MiB" % (16 * len(keep)))
    sys.exit(1)
