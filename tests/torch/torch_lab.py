"""numarena.torch from Python in the NUMA lab: where torch tensors' pages really are, asserted
page by page with the kernel's own answer (move_pages with no target nodes, through libc's
syscall(): tests/lab/python_lab.py's kernel_page_nodes, not numarena's code), against what QEMU
was given (/lab/topology.txt).

    python3 torch_lab.py TESTS_LAB_DIR EXAMPLES_DIR     (inside the lab; torch_tests.cmake)

The VM sees the host's /usr read-only (run.sh --share /usr): the interpreter, torch and
libtorch are not copied in. Checks:
  - a tensor (and an operator's output) made under numarena.torch.on("bind(1)") by a thread
    on node 0's CPU has every page on node 1; a tensor made outside is not numarena's;
  - the example decoder's weights (examples/pytorch_decoder.py's Decoder) made under
    on("interleave(<every node>)") have every page resident and a fair share on each node;
  - where the topology has a memory-only (slow) node: KV-pool blocks viewed as tensors
    (kv_block_tensors) have every page on the slow node after demote_block and read back what
    was written; after promote_block they are on their home node again.
Exit status 0 only when every check passes.
"""
import os
import sys

lab_dir, examples_dir = sys.argv[1], sys.argv[2]
sys.path[:0] = [lab_dir, examples_dir]

import torch  # noqa: E402

import numarena  # noqa: E402
import numarena.torch as nt  # noqa: E402
import pytorch_decoder  # noqa: E402
from python_lab import Pinned, check, expected_topology, failures, histogram  # noqa: E402
from python_lab import dump_stacks_before_the_deadline, kernel_page_nodes  # noqa: E402


def page_nodes_of(tensor):
    """The node of every page holding one of `tensor`'s elements, from its first element to
    its last (KV views are strided: K and V rows of a token alternate in the block)."""
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return kernel_page_nodes(tensor.data_ptr(), (last + 1) * tensor.element_size())


def all_on(tensor, node, what):
    nodes = page_nodes_of(tensor)
    check(bool(nodes) and all(n == node for n in nodes),
          f"{what}: every page on node {node} (pages per node: {histogram(nodes)})")


def test_bind_from_another_node(cpus):
    with Pinned(cpus[0]):
        with nt.on("bind(1)"):
            weights = torch.randn(1024, 256)          # 1 MiB, written by a node-0 thread
            product = weights @ weights[:256]         # an operator's output, 1 MiB
        plain = torch.ones(1 << 18)
    check(nt.owns(weights) and nt.owns(product), "tensors made under on('bind(1)') are numarena's")
    check(not nt.owns(plain), "a tensor made after the on() block is libtorch's")
    all_on(weights, 1, "randn under on('bind(1)') on node 0's CPU")
    all_on(product, 1, "matmul output under on('bind(1)') on node 0's CPU")


def test_decoder_weights_interleaved(nodes):
    policy = "interleave(" + ",".join(map(str, nodes)) + ")"
    args = pytorch_decoder.parse_args(["--layers", "2", "--vocab", "1024"])
    with nt.on(policy):
        model = pytorch_decoder.Decoder(args)
    matrices = [model.embed, model.unembed] + [
        tensor for layer in model.layers for tensor in layer.values() if tensor.dim() == 2]
    counts = {}
    for matrix in matrices:
        for node, pages in histogram(page_nodes_of(matrix)).items():
            counts[node] = counts.get(node, 0) + pages
    total = sum(counts.values())
    check(set(counts) <= set(nodes), f"decoder weights under {policy}: every page resident on "
          f"one of the policy's nodes (pages per node: {counts})")
    for node in nodes:
        # Page interleave: an equal share per node, give or take a little.
        check(counts.get(node, 0) * len(nodes) * 10 >= total * 8,
              f"decoder weights under {policy}: node {node} has {counts.get(node, 0)} of "
              f"{total} pages (at least 80% of an equal share)")


def test_kv_cold_blocks_on_slow_node(slow_node):
    pool = numarena.KvPool(layers=1, kv_heads=4, head_dim=128, dtype="fp16", heads_per_group=2,
                           cold_tier="farthest", promote_on_touch=False)
    sequence, _ = pool.create_sequence([5] * 32)
    blocks = [(block, pool.group_nodes[group]) for group in range(pool.head_groups)
              for block in pool.blocks(sequence, 0, group)]
    check(len(blocks) >= 4, f"the pool gave {len(blocks)} blocks (2 groups x 2 blocks)")

    def expected(i):
        return (torch.arange(16 * 2 * 128, dtype=torch.float32).reshape(16, 2, 128) + i).half()

    for i, (block, home) in enumerate(blocks):
        key, value = nt.kv_block_tensors(pool, block)
        key.copy_(expected(i))
        value.copy_(-expected(i))
        all_on(key, home, f"block {block}'s K view while hot")
        del key, value                                  # the views pin the block
    for block, _ in blocks:
        pool.demote_block(block)
    for i, (block, _) in enumerate(blocks):
        key, value = nt.kv_block_tensors(pool, block)
        all_on(key, slow_node, f"demoted block {block}'s K view")
        all_on(value, slow_node, f"demoted block {block}'s V view")
        check(key.equal(expected(i)) and value.equal(-expected(i)),
              f"demoted block {block}'s views read back what was written")
        del key, value
    for i, (block, home) in enumerate(blocks):
        pool.promote_block(block)
        key, value = nt.kv_block_tensors(pool, block)
        all_on(key, home, f"promoted block {block}'s K view")
        check(key.equal(expected(i)) and value.equal(-expected(i)),
              f"promoted block {block}'s views read back what was written")
        del key, value
    pool.free_sequence(sequence)
    pool.close()


def main():
    dump_stacks_before_the_deadline()
    nodes, cpus, _ = expected_topology()
    print(f"lab: {os.environ.get('NUMARENA_LAB_TOPOLOGY')}, nodes {nodes}, torch "
          f"{torch.__version__}", flush=True)
    test_bind_from_another_node(cpus)
    test_decoder_weights_interleaved(nodes)
    slow = [n for n in nodes if not cpus[n]]
    if slow:
        test_kv_cold_blocks_on_slow_node(slow[0])
    else:
        print("note: no memory-only (slow) node here: the KV cold tier is checked in cxl")
    print(f"{len(failures)} failed" if failures else "all passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
