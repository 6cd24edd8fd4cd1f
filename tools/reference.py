#!/usr/bin/env python3
"""An independent float64 numpy implementation of the infer job's model, to check a run.

Each prompt alone, no packing, no ring, no cache: greedy generation by recomputing the
whole sequence for every new token, with RoPE at positions 0, 1, ... of the prompt and
dense causal attention. Compares every prompt's generated tokens (exactly) and logits
(to --tol) with a run's rank-R.jsonl files. The weights are the seed's (drawn as
write_weights.py draws them) or a safetensors file's. --weights-dtype bf16 checks a run of
infer --weights-dtype bf16 by the contract of ringattn::Linear: every matrix (the embedding
too) rounded to bf16, and each matmul's input rows rounded to bf16 (from their fp32 value)
before the float64 product. --weights-dtype fp16: every matrix rounded to IEEE half
(numpy's float16: nearest even), the inputs as they are.
  reference.py RUN_DIR --prompts p.jsonl --tokens 4 [model flags as for infer] [--tol 1e-3]
"""
import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from write_weights import generate, specs  # noqa: E402


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {name: np.frombuffer(body[t["data_offsets"][0]:t["data_offsets"][1]], dtype="<f4").reshape(t["shape"])
            for name, t in header.items() if name != "__metadata__"}


def rms_norm(x, g, eps=1e-5):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, positions, theta=10000.0):  # x [T, heads, D], rotate-half
    d = x.shape[-1]
    half = d // 2
    angle = positions[:, None] * theta ** (-2.0 * np.arange(half) / d)
    c, s = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)


def bf16(x):
    """x rounded to float32, then to bf16 (nearest even, denormals to zero), as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    u = np.where((u & 0x7F800000) == 0, u & 0x80000000, u).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


def forward(w, c, tokens, matmul_input=lambda x: x):
    """Logits of the last token of `tokens`; each matmul's input rows pass matmul_input first."""
    def mm(x, weight):
        return matmul_input(x) @ weight.T

    t = len(tokens)
    h = w["model.embed_tokens.weight"][tokens]
    pos = np.arange(t, dtype=np.float64)
    mask = np.tril(np.ones((t, t), dtype=bool))
    group = c.heads // c.kv_heads
    for l in range(c.layers):
        p = f"model.layers.{l}."
        n = rms_norm(h, w[p + "input_layernorm.weight"])
        q = rope((mm(n, w[p + "self_attn.q_proj.weight"])).reshape(t, c.heads, c.head_dim), pos)
        k = rope((mm(n, w[p + "self_attn.k_proj.weight"])).reshape(t, c.kv_heads, c.head_dim), pos)
        v = (mm(n, w[p + "self_attn.v_proj.weight"])).reshape(t, c.kv_heads, c.head_dim)
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(c.head_dim)
        s = np.where(mask[None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(t, c.heads * c.head_dim)
        h = h + mm(o, w[p + "self_attn.o_proj.weight"])
        n = rms_norm(h, w[p + "post_attention_layernorm.weight"])
        g = mm(n, w[p + "mlp.gate_proj.weight"])
        u = mm(n, w[p + "mlp.up_proj.weight"])
        h = h + mm(g / (1 + np.exp(-g)) * u, w[p + "mlp.down_proj.weight"])
    head = w["model.embed_tokens.weight"] if not c.untied else w["lm_head.weight"]
    return mm(rms_norm(h[-1], w["model.norm.weight"]), head)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--prompts", required=True)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--weights")
    for name, default in (("seed", 1), ("vocab", 256), ("dim", 128), ("layers", 2), ("heads", 4),
                          ("kv-heads", 2), ("head-dim", 32), ("ffn", 256)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--weights-dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    c = p.parse_args()
    if c.weights:
        w = {k: v.astype(np.float64) for k, v in load_safetensors(c.weights).items()}
    else:
        w = {name: generate(c.seed, i, shape).astype(np.float64) for i, (name, shape) in enumerate(specs(c))}
    matmul_input = bf16 if c.weights_dtype == "bf16" else (lambda x: x)
    if c.weights_dtype == "bf16":
        w = {k: bf16(v) if v.ndim == 2 else v for k, v in w.items()}
    if c.weights_dtype == "fp16":  # from float32, as the loader rounds them
        w = {k: v.astype(np.float32).astype(np.float16).astype(np.float64) if v.ndim == 2 else v
             for k, v in w.items()}
    run = {}
    for path in glob.glob(os.path.join(c.run, "rank-*.jsonl")):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                run[json.dumps(r["id"])] = r
    worst, bad = 0.0, []
    with open(c.prompts) as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    for prompt in prompts:
        key = json.dumps(prompt["id"])
        if key not in run:
            bad.append(f"prompt {key} is missing from the run")
            continue
        seq, got = list(prompt["tokens"]), run[key]
        for step in range(c.tokens):
            logits = forward(w, c, np.array(seq), matmul_input)
            if step < len(got["logits"]):
                worst = max(worst, float(np.max(np.abs(logits - np.array(got["logits"][step])))))
            seq.append(int(np.argmax(logits)))
        if seq[len(prompt["tokens"]):] != got["tokens"]:
            bad.append(f"prompt {key}: tokens {seq[len(prompt['tokens']):]} (float64) against {got['tokens']}")
    ok = not bad and worst <= c.tol
    print(f"reference: {len(prompts)} prompts, {c.tokens} tokens each, max |logit diff| against float64 "
          f"{worst:.3g}, tolerance {c.tol:g}: {'match' if ok else 'MISMATCH'}")
    for line in bad[:10]:
        print("reference:", line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
