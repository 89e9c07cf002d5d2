#!/usr/bin/env python3
"""A PyTorch decode loop for bench/override_bench.py: plain torch (Debian's python3-torch), no
numarena import, so under `numarena run` every tensor comes from the malloc override as it
would in an unmodified server. A 4-layer GPT-style decoder with random weights prefills a
batch of prompts, then decodes token by token with a KV cache that grows by torch.cat (a new
tensor per layer per step, the old one freed: the allocation pattern of a naive server).

    torch_decode.py SCALE      (1 = the benchmark's size; 0.05 for a smoke run)
"""
import sys

import torch


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    torch.manual_seed(35)
    torch.set_num_threads(1)
    layers, d_model, heads, ffn, vocab = 4, 512, 8, 2048, 8192
    batch, prompt = 4, 64
    steps = max(2, int(64 * scale))
    head = d_model // heads
    weights = [{
        "qkv": torch.randn(d_model, 3 * d_model) / d_model ** 0.5,
        "out": torch.randn(d_model, d_model) / d_model ** 0.5,
        "up": torch.randn(d_model, ffn) / d_model ** 0.5,
        "down": torch.randn(ffn, d_model) / ffn ** 0.5,
    } for _ in range(layers)]
    embed = torch.randn(vocab, d_model) / d_model ** 0.5
    cache = [None] * layers

    def step(tokens):
        x = embed[tokens]  # (batch, t, d)
        for i, w in enumerate(weights):
            q, k, v = (x @ w["qkv"]).split(d_model, dim=-1)
            shape = (x.shape[0], x.shape[1], heads, head)
            q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            scores = q @ k.transpose(-1, -2) / head ** 0.5
            if q.shape[2] > 1:  # the prefill: each prompt position sees itself and before
                scores = scores + torch.full(scores.shape[-2:], float("-inf")).triu(1)
            a = torch.softmax(scores, dim=-1) @ v
            x = x + a.transpose(1, 2).reshape(x.shape) @ w["out"]
            x = x + torch.relu(x @ w["up"]) @ w["down"]
        return (x[:, -1] @ embed.T).argmax(dim=-1, keepdim=True)

    with torch.no_grad():
        tokens = torch.randint(0, vocab, (batch, prompt))
        nxt = step(tokens)
        out = [nxt]
        for _ in range(steps):
            nxt = step(nxt)
            out.append(nxt)
    generated = torch.cat(out, dim=1)
    if generated.shape != (batch, steps + 1):
        sys.exit(f"torch_decode: generated {tuple(generated.shape)}")
    print(f"tokens={generated.numel()}")


if __name__ == "__main__":
    main()
