#!/usr/bin/env python3
"""Writes the infer job's seeded weights as a safetensors file, with numpy alone.

The numbers are the ones `infer --seed S` draws itself (model.hpp, generate_tensor):
integer arithmetic mod 2^64 and exact float32 steps, so a run from this file must
match a run from the seed to the last bit. The file uses Hugging Face Llama's names
and [out, in] layout, F32, little-endian.
  write_weights.py --seed 1 --vocab 256 --dim 128 --layers 2 --heads 4 --kv-heads 2 \\
      --head-dim 32 --ffn 256 [--untied] --out model.safetensors
"""
import argparse
import json
import struct

import numpy as np

M64 = (1 << 64) - 1


def finalise(z):  # splitmix64's finaliser on a uint64 array (wrapping)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def generate(seed, index, shape):
    with np.errstate(over="ignore"):
        key = finalise(np.array([(seed + (index + 1) * 0xD1B54A32D192ED03) & M64], dtype=np.uint64))[0]
        n = int(np.prod(shape))
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = finalise(key + i * np.uint64(0x9E3779B97F4A7C15))
    u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
    a = np.float32(2) * u - np.float32(1)
    if len(shape) == 1:
        w = np.float32(1) + np.float32(0.1) * a
    else:
        w = a * np.float32(1.0 / np.sqrt(float(shape[1])))
    return w.astype(np.float32).reshape(shape)


def specs(c):
    t = [("model.embed_tokens.weight", (c.vocab, c.dim))]
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    for l in range(c.layers):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", (c.dim,)),
              (p + "self_attn.q_proj.weight", (q, c.dim)),
              (p + "self_attn.k_proj.weight", (kv, c.dim)),
              (p + "self_attn.v_proj.weight", (kv, c.dim)),
              (p + "self_attn.o_proj.weight", (c.dim, q)),
              (p + "post_attention_layernorm.weight", (c.dim,)),
              (p + "mlp.gate_proj.weight", (c.ffn, c.dim)),
              (p + "mlp.up_proj.weight", (c.ffn, c.dim)),
              (p + "mlp.down_proj.weight", (c.dim, c.ffn))]
    t.append(("model.norm.weight", (c.dim,)))
    if c.untied:
        t.append(("lm_head.weight", (c.vocab, c.dim)))
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("seed", 1), ("vocab", 256), ("dim", 128), ("layers", 2), ("heads", 4),
                          ("kv-heads", 2), ("head-dim", 32), ("ffn", 256)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--out", required=True)
    c = p.parse_args()
    header, blobs, offset = {"__metadata__": {"format": "pt", "source": f"infer seed {c.seed}"}}, [], 0
    for index, (name, shape) in enumerate(specs(c)):
        b = generate(c.seed, index, shape).astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned, as the reference writer does
    with open(c.out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


if __name__ == "__main__":
    main()
