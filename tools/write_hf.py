#!/usr/bin/env python3
"""Writes a seeded Hugging Face model directory (config.json and safetensors), with numpy alone.

The values are write_weights.py's generate(seed, index, shape), index counting the tensors
in the order they are written: write_weights.py's order (embedding; per layer the input
norm, q, k, v, o, the post-attention norm, gate, up, down; the final norm; lm_head unless
tied), with qwen2's q/k/v biases each right after its weight and qwen3's q_norm and k_norm
right after o_proj. So a llama fp32 directory holds the very numbers of `infer --seed S`.
Biases are generate() - 1 (in [-0.1, 0.1]); norms are as generate() gives them. The names,
the [out, in] layout and the config keys are Hugging Face's. bf16 is float32 rounded to
nearest even; fp16 is numpy's float16 (nearest even). --shards N > 1 splits the tensors,
in order, across model-0000i-of-0000N.safetensors with a model.safetensors.index.json.
  write_hf.py --out DIR --arch {llama,llama3,mistral,qwen2,qwen3} --dtype {fp32,bf16,fp16} \\
      [--tied] [--shards 1] [--seed 1] [--vocab 256] [--dim 128] [--layers 2] [--heads 4] \\
      [--kv-heads 2] [--head-dim 32] [--ffn 256]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from write_weights import generate  # noqa: E402

ARCHS = {  # arch: (architectures, model_type, rms_norm_eps, rope_theta, max_position_embeddings)
    "llama": ("LlamaForCausalLM", "llama", 1e-5, 10000.0, 2048),
    "llama3": ("LlamaForCausalLM", "llama", 1e-5, 500000.0, 131072),
    "mistral": ("MistralForCausalLM", "mistral", 1e-5, 1000000.0, 2048),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", 1e-6, 1000000.0, 2048),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", 1e-6, 1000000.0, 2048),
}
DTYPES = {"fp32": ("F32", "float32"), "bf16": ("BF16", "bfloat16"), "fp16": ("F16", "float16")}


def config(c):
    architecture, model_type, eps, theta, max_positions = ARCHS[c.arch]
    cfg = {"architectures": [architecture], "model_type": model_type, "hidden_size": c.dim,
           "intermediate_size": c.ffn, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
           "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim, "vocab_size": c.vocab,
           "rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": max_positions,
           "tie_word_embeddings": c.tied, "hidden_act": "silu", "torch_dtype": DTYPES[c.dtype][1],
           "bos_token_id": 1, "eos_token_id": 2}
    if c.arch != "qwen2":  # qwen2's q/k/v biases are not optional, so it has no such key
        cfg["attention_bias"] = False
    if model_type == "llama":
        cfg["mlp_bias"] = False
    if c.arch in ("mistral", "qwen2"):
        cfg["sliding_window"] = None
    if c.arch == "qwen2":
        cfg["use_sliding_window"] = False
    if c.arch == "llama3":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    return cfg


def specs(c):
    """(name, shape) of every tensor, in the order they are drawn and written."""
    t = [("model.embed_tokens.weight", (c.vocab, c.dim))]
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    for l in range(c.layers):
        p = f"model.layers.{l}."
        t.append((p + "input_layernorm.weight", (c.dim,)))
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            t.append((p + f"self_attn.{proj}.weight", (rows, c.dim)))
            if c.arch == "qwen2":
                t.append((p + f"self_attn.{proj}.bias", (rows,)))
        t.append((p + "self_attn.o_proj.weight", (c.dim, q)))
        if c.arch == "qwen3":
            t += [(p + "self_attn.q_norm.weight", (c.head_dim,)), (p + "self_attn.k_norm.weight", (c.head_dim,))]
        t += [(p + "post_attention_layernorm.weight", (c.dim,)),
              (p + "mlp.gate_proj.weight", (c.ffn, c.dim)),
              (p + "mlp.up_proj.weight", (c.ffn, c.dim)),
              (p + "mlp.down_proj.weight", (c.dim, c.ffn))]
    t.append(("model.norm.weight", (c.dim,)))
    if not c.tied:
        t.append(("lm_head.weight", (c.vocab, c.dim)))
    return t


def encode(w, dtype):
    """The little-endian bytes of float32 array w stored as F32, BF16 or F16."""
    if dtype == "F32":
        return w.astype("<f4").tobytes()
    if dtype == "F16":
        return w.astype("<f2").tobytes()
    u = w.astype("<f4").view("<u4").astype(np.uint64)  # round to nearest even on the bits
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors):  # tensors: [(name, dtype, shape, bytes)]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, _, b in tensors:
            f.write(b)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--arch", required=True, choices=sorted(ARCHS))
    p.add_argument("--dtype", required=True, choices=sorted(DTYPES))
    p.add_argument("--tied", action="store_true")
    p.add_argument("--shards", type=int, default=1)
    for name, default in (("seed", 1), ("vocab", 256), ("dim", 128), ("layers", 2), ("heads", 4),
                          ("kv-heads", 2), ("head-dim", 32), ("ffn", 256)):
        p.add_argument("--" + name, type=int, default=default)
    c = p.parse_args()
    t = specs(c)
    if not 1 <= c.shards <= len(t):
        p.error(f"--shards must be 1 to {len(t)} (the number of tensors)")
    if c.heads % c.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    dtype = DTYPES[c.dtype][0]
    tensors = []
    for index, (name, shape) in enumerate(t):
        w = generate(c.seed, index, shape)
        if name.endswith(".bias"):
            w = w - np.float32(1)  # 1 + 0.1a -> 0.1a (up to float32 rounding)
        tensors.append((name, dtype, shape, encode(w, dtype)))
    os.makedirs(c.out, exist_ok=True)
    with open(os.path.join(c.out, "config.json"), "w") as f:
        json.dump(config(c), f, indent=2)
        f.write("\n")
    if c.shards == 1:
        write_safetensors(os.path.join(c.out, "model.safetensors"), tensors)
        return
    files = [f"model-{i + 1:05d}-of-{c.shards:05d}.safetensors" for i in range(c.shards)]
    shard_of = [i * c.shards // len(tensors) for i in range(len(tensors))]  # contiguous, none empty
    for s, file in enumerate(files):
        write_safetensors(os.path.join(c.out, file), [x for x, k in zip(tensors, shard_of) if k == s])
    index = {"metadata": {"total_size": sum(len(x[3]) for x in tensors)},
             "weight_map": {x[0]: files[k] for x, k in zip(tensors, shard_of)}}
    with open(os.path.join(c.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
