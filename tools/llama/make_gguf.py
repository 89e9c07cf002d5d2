#!/usr/bin/env python3
"""Write a llama-architecture GGUF model with random weights, for running llama.cpp in tests
and benchmarks where no real model can be downloaded.

The text such a model generates is noise, but loading it, the KV cache, the compute buffers
and every matrix product are llama.cpp's real ones, at the sizes chosen here.

    make_gguf.py OUT.gguf [--size tiny|small|medium|large] [--embd N] [--layers N] [--ff N]
                 [--heads N] [--kv-heads N] [--ctx N] [--type f32|f16] [--seed N]

Sizes (weights only; the vocabulary is 256 byte tokens plus <unk>, <s>, </s>):
    tiny    embd 128,  2 layers,  ff 352,  f32:   1.7 MiB (CI)
    small   embd 512,  8 layers,  ff 1408, f16:  45.5 MiB
    medium  embd 1024, 12 layers, ff 2816, f16: 271 MiB  (the host benchmark)
    large   embd 1536, 16 layers, ff 4096, f16: 794 MiB

Standard library only. The format is GGUF version 3 (ggml's docs/gguf.md): little-endian
header, metadata key/values, tensor infos, then tensor data aligned to general.alignment.
"""

import argparse
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# Metadata value types (gguf_type).
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# Tensor element types (ggml_type).
GGML_F32, GGML_F16 = 0, 1
# llama.cpp's token types (llama_token_type).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6

PRESETS = {
    "tiny": dict(embd=128, layers=2, ff=352, heads=4, kv_heads=2, type="f32"),
    "small": dict(embd=512, layers=8, ff=1408, heads=8, kv_heads=4, type="f16"),
    "medium": dict(embd=1024, layers=12, ff=2816, heads=16, kv_heads=8, type="f16"),
    "large": dict(embd=1536, layers=16, ff=4096, heads=16, kv_heads=8, type="f16"),
}


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Metadata:
    def __init__(self):
        self.items = []

    def u32(self, key, v):
        self.items.append(gguf_string(key) + struct.pack("<II", T_UINT32, v))

    def i32(self, key, v):
        self.items.append(gguf_string(key) + struct.pack("<Ii", T_INT32, v))

    def f32(self, key, v):
        self.items.append(gguf_string(key) + struct.pack("<If", T_FLOAT32, v))

    def boolean(self, key, v):
        self.items.append(gguf_string(key) + struct.pack("<I?", T_BOOL, v))

    def string(self, key, v):
        self.items.append(gguf_string(key) + struct.pack("<I", T_STRING) + gguf_string(v))

    def array(self, key, elem_type, values):
        head = gguf_string(key) + struct.pack("<IIQ", T_ARRAY, elem_type, len(values))
        if elem_type == T_STRING:
            body = b"".join(gguf_string(v) for v in values)
        elif elem_type == T_FLOAT32:
            body = struct.pack("<%df" % len(values), *values)
        elif elem_type == T_INT32:
            body = struct.pack("<%di" % len(values), *values)
        else:
            raise ValueError("array type %d is not written here" % elem_type)
        self.items.append(head + body)


def byte_vocabulary():
    """SentencePiece-style ('llama') vocabulary: <unk>, <s>, </s>, then one token per byte
    (<0x00>..<0xFF>, type BYTE). Every text falls back to byte tokens, so any prompt
    tokenizes without merges."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    scores = [0.0] * len(tokens)
    return tokens, scores, types


class RandomSource:
    """Weights from a fixed pool of N(0, 0.02) values, read at a per-tensor offset: drawing
    hundreds of millions of Python floats one by one would take minutes, and the values only
    need to be small and varied (no overflow in f16, no NaN after the norms)."""

    POOL = 1 << 16

    def __init__(self, seed, elem):
        rng = random.Random(seed)
        values = [rng.gauss(0.0, 0.02) for _ in range(self.POOL)]
        fmt = "<%d%s" % (self.POOL, "e" if elem == GGML_F16 else "f")
        pool = struct.pack(fmt, *values)
        self.elem_size = 2 if elem == GGML_F16 else 4
        self.pool = pool + pool  # a window from any offset reads without wrapping
        self.rng = rng

    def write(self, out, count):
        nbytes = count * self.elem_size
        chunk = self.POOL * self.elem_size
        while nbytes > 0:
            start = self.rng.randrange(self.POOL) * self.elem_size
            n = min(nbytes, chunk)
            out.write(self.pool[start:start + n])
            nbytes -= n


def padding(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def build(args):
    p = dict(PRESETS[args.size])
    for k in ("embd", "layers", "ff", "heads", "kv_heads", "type"):
        v = getattr(args, k)
        if v is not None:
            p[k] = v
    embd, layers, ff, heads, kv_heads = p["embd"], p["layers"], p["ff"], p["heads"], p["kv_heads"]
    if embd <= 0 or layers <= 0 or ff <= 0 or heads <= 0 or kv_heads <= 0:
        sys.exit("make_gguf: --embd, --layers, --ff, --heads and --kv-heads must be positive")
    if embd % heads or heads % kv_heads:
        sys.exit("make_gguf: --embd must be a multiple of --heads, and --heads of --kv-heads "
                 "(got embd %d, heads %d, kv-heads %d)" % (embd, heads, kv_heads))
    head_dim = embd // heads
    if head_dim % 2:
        sys.exit("make_gguf: the head size embd/heads must be even for RoPE (got %d)" % head_dim)
    kv_dim = head_dim * kv_heads
    elem = GGML_F16 if p["type"] == "f16" else GGML_F32
    tokens, scores, types = byte_vocabulary()
    vocab = len(tokens)

    md = Metadata()
    md.string("general.architecture", "llama")
    md.string("general.name", "numarena random %s" % args.size)
    md.u32("general.alignment", ALIGNMENT)
    md.u32("general.file_type", 1 if elem == GGML_F16 else 0)
    md.u32("llama.context_length", args.ctx)
    md.u32("llama.embedding_length", embd)
    md.u32("llama.block_count", layers)
    md.u32("llama.feed_forward_length", ff)
    md.u32("llama.attention.head_count", heads)
    md.u32("llama.attention.head_count_kv", kv_heads)
    md.u32("llama.rope.dimension_count", head_dim)
    md.f32("llama.rope.freq_base", 10000.0)
    md.f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    md.u32("llama.vocab_size", vocab)
    md.string("tokenizer.ggml.model", "llama")
    md.array("tokenizer.ggml.tokens", T_STRING, tokens)
    md.array("tokenizer.ggml.scores", T_FLOAT32, scores)
    md.array("tokenizer.ggml.token_type", T_INT32, types)
    md.u32("tokenizer.ggml.unknown_token_id", 0)
    md.u32("tokenizer.ggml.bos_token_id", 1)
    md.u32("tokenizer.ggml.eos_token_id", 2)
    md.boolean("tokenizer.ggml.add_bos_token", True)
    md.boolean("tokenizer.ggml.add_eos_token", False)

    # ggml's dimension order: ne[0] is the row length (a matrix's input size).
    tensors = [("token_embd.weight", [embd, vocab], elem)]
    for i in range(layers):
        b = "blk.%d." % i
        tensors += [
            (b + "attn_norm.weight", [embd], GGML_F32),
            (b + "attn_q.weight", [embd, embd], elem),
            (b + "attn_k.weight", [embd, kv_dim], elem),
            (b + "attn_v.weight", [embd, kv_dim], elem),
            (b + "attn_output.weight", [embd, embd], elem),
            (b + "ffn_norm.weight", [embd], GGML_F32),
            (b + "ffn_gate.weight", [embd, ff], elem),
            (b + "ffn_up.weight", [embd, ff], elem),
            (b + "ffn_down.weight", [ff, embd], elem),
        ]
    tensors += [("output_norm.weight", [embd], GGML_F32), ("output.weight", [embd, vocab], elem)]
    return md, tensors


def write(path, md, tensors, seed):
    infos = []
    offset = 0
    layout = []
    for name, dims, elem in tensors:
        count = 1
        for d in dims:
            count *= d
        nbytes = count * (2 if elem == GGML_F16 else 4)
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", elem, offset))
        layout.append((name, count, elem, nbytes))
        offset += nbytes + padding(nbytes)

    header = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(md.items))
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(header)
        for item in md.items:
            out.write(item)
        for info in infos:
            out.write(info)
        out.write(b"\0" * padding(out.tell()))
        sources = {e: RandomSource(seed + e, e) for e in (GGML_F32, GGML_F16)}
        for name, count, elem, nbytes in layout:
            if name.endswith("norm.weight"):
                out.write(struct.pack("<f", 1.0) * count)
            else:
                sources[elem].write(out, count)
            out.write(b"\0" * padding(nbytes))
    os.replace(tmp, path)
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--embd", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--ff", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", dest="kv_heads", type=int)
    ap.add_argument("--type", choices=["f32", "f16"])
    ap.add_argument("--ctx", type=int, default=2048, help="llama.context_length (default 2048)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    md, tensors = build(args)
    data = write(args.out, md, tensors, args.seed)
    print("%s: %d tensors, %.1f MiB of weights" % (args.out, len(tensors), data / 2**20))


if __name__ == "__main__":
    main()
