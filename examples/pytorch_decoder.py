#!/usr/bin/env python3
"""A GPT-style decoder in PyTorch on numarena: weights placed by a policy, the KV cache in
numarena's KV pool read through block tensors (a vLLM-style block table), a batch of sequences
served with greedy decoding. Random weights: nothing is downloaded.

    NUMARENA_LIBRARY=build/lib/libnumarena.so.0 PYTHONPATH=python \\
        /usr/bin/python3 examples/pytorch_decoder.py --weights "interleave(0,1)" --check

--weights POLICY   where the weights go (numarena.torch.on; default: interleave over every
                   node with memory); "none": libtorch's allocator
--tensors POLICY   where every other tensor goes (numarena.torch.use; default "none":
                   libtorch's allocator, or what LD_PRELOAD put in place)
--check            also decodes with a plain dense KV cache and exits 1 unless both produce
                   the same tokens
--json             one JSON line: ttft_s, tpot_s, peak_rss_kib, tokens

What it prints: time to first token (the batch's prefill), time per output token (one decode
step for the whole batch), peak RSS of the process.
"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn.functional as F

import numarena
import numarena.torch as nt


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--generate", type=int, default=16)
    parser.add_argument("--tokens-per-block", type=int, default=16)
    parser.add_argument("--cold-tier", default=None, help="KvPool cold tier, e.g. farthest")
    parser.add_argument("--weights", default=None)
    parser.add_argument("--tensors", default="none")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.d_model % args.heads:
        parser.error("--d-model must be a multiple of --heads")
    return args


def policy_or_none(text):
    return None if text in (None, "none") else text


class Decoder:
    """Pre-norm transformer blocks with multi-head attention (as many KV heads as heads)."""

    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed)
        d, f = args.d_model, args.ffn

        def w(*shape):
            return torch.randn(*shape, generator=g) / math.sqrt(shape[0])
        self.heads, self.head_dim = args.heads, d // args.heads
        self.embed = torch.randn(args.vocab, d, generator=g)
        self.layers = [dict(ln1=torch.ones(d), wq=w(d, d), wk=w(d, d), wv=w(d, d), wo=w(d, d),
                            ln2=torch.ones(d), w1=w(d, f), w2=w(f, d))
                       for _ in range(args.layers)]
        self.ln_f = torch.ones(d)
        self.unembed = w(d, args.vocab)

    def qkv(self, layer, x):
        h = F.layer_norm(x, x.shape[-1:], layer["ln1"])
        shape = (x.shape[0], self.heads, self.head_dim)
        return ((h @ layer["wq"]).view(shape), (h @ layer["wk"]).view(shape),
                (h @ layer["wv"]).view(shape))

    def finish_layer(self, layer, x, attended):
        x = x + attended.reshape(x.shape) @ layer["wo"]
        h = F.layer_norm(x, x.shape[-1:], layer["ln2"])
        return x + F.gelu(h @ layer["w1"]) @ layer["w2"]

    def logits(self, x):
        return F.layer_norm(x, x.shape[-1:], self.ln_f) @ self.unembed


def attend(q, keys, values, causal):
    """q [T, H, D] against keys/values [S, H, D]; causal: query t sees keys 0..S-T+t."""
    scores = torch.einsum("thd,shd->hts", q, keys) / math.sqrt(q.shape[-1])
    if causal:
        t, s = q.shape[0], keys.shape[0]
        mask = torch.ones(t, s, dtype=torch.bool).tril(s - t)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), values)


class PagedCache:
    """The KV cache in a numarena.KvPool: per sequence, per layer and head group, a list of
    blocks (the block table); attention reads the blocks through tensor views, no copy."""

    def __init__(self, model, args):
        self.pool = numarena.KvPool(layers=args.layers, kv_heads=model.heads,
                                    head_dim=model.head_dim, dtype="fp32",
                                    tokens_per_block=args.tokens_per_block,
                                    cold_tier=args.cold_tier)
        self.length = {}

    def start(self, tokens):
        sequence, _ = self.pool.create_sequence(tokens)
        self.length[sequence] = 0
        return sequence

    def append(self, sequence, token):
        self.pool.append(sequence, [token])

    def write(self, sequence, layer, first, keys, values):
        """K/V rows [n, H, D] of tokens first .. first+n-1."""
        pool, tpb, hg = self.pool, self.pool.tokens_per_block, self.pool.heads_per_group
        for group in range(pool.head_groups):
            heads = slice(group * hg, (group + 1) * hg)
            table = pool.blocks(sequence, layer, group)
            token = first
            while token < first + keys.shape[0]:
                index, row = divmod(token, tpb)
                n = min(tpb - row, first + keys.shape[0] - token)
                k, v = nt.kv_block_tensors(pool, table[index], layer % pool.layers_per_block)
                k[row:row + n].copy_(keys[token - first:token - first + n, heads])
                v[row:row + n].copy_(values[token - first:token - first + n, heads])
                token += n
        self.length[sequence] = max(self.length[sequence], first + keys.shape[0])

    def read(self, sequence, layer):
        """K and V of every token so far, [S, H, D], gathered from the block views."""
        pool, tpb = self.pool, self.pool.tokens_per_block
        length = self.length[sequence]
        keys, values = [], []
        for group in range(pool.head_groups):
            k_rows, v_rows = [], []
            for index, block in enumerate(pool.blocks(sequence, layer, group)):
                n = min(tpb, length - index * tpb)
                if n <= 0:
                    break
                k, v = nt.kv_block_tensors(pool, block, layer % pool.layers_per_block)
                k_rows.append(k[:n])
                v_rows.append(v[:n])
            keys.append(torch.cat(k_rows))
            values.append(torch.cat(v_rows))
        return torch.cat(keys, dim=1), torch.cat(values, dim=1)

    def finish(self, sequence):
        self.pool.free_sequence(sequence)


class DenseCache:
    """The reference: plain tensors per sequence and layer."""

    def __init__(self):
        self.kv = {}

    def start(self, tokens):
        sequence = len(self.kv)
        self.kv[sequence] = {}
        return sequence

    def append(self, sequence, token):
        pass

    def write(self, sequence, layer, first, keys, values):
        old = self.kv[sequence].get(layer)
        if old is None:
            self.kv[sequence][layer] = (keys.clone(), values.clone())
        else:
            self.kv[sequence][layer] = (torch.cat([old[0], keys]), torch.cat([old[1], values]))

    def read(self, sequence, layer):
        return self.kv[sequence][layer]

    def finish(self, sequence):
        del self.kv[sequence]


def forward(model, cache, sequence, tokens, first):
    """Runs `tokens` (positions first..) through the model, writing their K/V; returns the
    logits of the last one."""
    x = model.embed[torch.tensor(tokens)]
    for index, layer in enumerate(model.layers):
        q, k, v = model.qkv(layer, x)
        cache.write(sequence, index, first, k, v)
        keys, values = cache.read(sequence, index)
        x = model.finish_layer(layer, x, attend(q, keys, values, causal=True))
    return model.logits(x[-1:])[0]


def serve(model, cache, prompts, generate):
    """Prefill every prompt (TTFT), then `generate` greedy decode steps over the batch."""
    start = time.perf_counter()
    sequences, next_tokens, outputs = [], [], []
    for prompt in prompts:
        sequence = cache.start(prompt)
        logits = forward(model, cache, sequence, prompt, 0)
        sequences.append(sequence)
        next_tokens.append(int(logits.argmax()))
        outputs.append([next_tokens[-1]])
    ttft = time.perf_counter() - start
    step_times = []
    for step in range(generate - 1):
        step_start = time.perf_counter()
        for i, sequence in enumerate(sequences):
            position = len(prompts[i]) + step
            cache.append(sequence, next_tokens[i])
            logits = forward(model, cache, sequence, [next_tokens[i]], position)
            next_tokens[i] = int(logits.argmax())
            outputs[i].append(next_tokens[i])
        step_times.append(time.perf_counter() - step_start)
    for sequence in sequences:
        cache.finish(sequence)
    tpot = sum(step_times) / len(step_times) if step_times else 0.0
    return outputs, ttft, tpot


def build(args):
    """Places the process's tensors as --tensors says and makes the model (its weights as
    --weights says) and the batch's prompts: (model, prompts, the weights' policy)."""
    weights_policy = args.weights
    if weights_policy is None:
        nodes = [n.id for n in numarena.nodes() if n.allowed and n.mem_total_bytes]
        weights_policy = "interleave(" + ",".join(map(str, nodes)) + ")"
    nt.use(policy_or_none(args.tensors))
    with nt.on(policy_or_none(weights_policy)):
        model = Decoder(args)
    g = torch.Generator().manual_seed(args.seed + 1)
    prompts = [torch.randint(args.vocab, (args.prompt,), generator=g).tolist()
               for _ in range(args.batch)]
    return model, prompts, weights_policy


def main(argv):
    args = parse_args(argv)
    model, prompts, weights_policy = build(args)
    with torch.inference_mode():
        outputs, ttft, tpot = serve(model, PagedCache(model, args), prompts, args.generate)
        matches = None
        if args.check:
            reference, _, _ = serve(model, DenseCache(), prompts, args.generate)
            matches = reference == outputs
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    weights_on = numarena.torch.tensor_nodes(model.layers[0]["w1"]).pages_on_node
    if args.json:
        print(json.dumps({"ttft_s": ttft, "tpot_s": tpot, "peak_rss_kib": peak_kib,
                          "tokens": outputs, "weights": weights_policy,
                          "weights_pages_on_node": weights_on, "check": matches}))
    else:
        print(f"weights: {weights_policy} (one FFN matrix's pages per node: {weights_on})")
        print(f"batch {args.batch} x prompt {args.prompt}, {args.generate} tokens each")
        print(f"TTFT {ttft * 1000:.1f} ms, time per output token {tpot * 1000:.2f} ms, "
              f"peak RSS {peak_kib / 1024:.0f} MiB")
        print("first sequence:", outputs[0][:16], "...")
        if matches is not None:
            print("paged KV cache matches the dense reference:", matches)
    return 0 if matches in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
