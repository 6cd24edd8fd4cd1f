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
gemma3 (Gemma3ForCausalLM, model_type gemma3_text) draws, per layer, the input norm, q, k, v,
o, q_norm, k_norm, the post-attention norm, the pre-feedforward norm, gate, up, down, the
post-feedforward norm. Gemma's RMSNorm scales by 1 + w, so its norm tensors are stored as
generate() - 1: exact in float32 (Sterbenz: generate's 1-D values lie in [0.9, 1.1]), so
1 + w gives generate's value back bit for bit (fp16/bf16 round the stored w). Its layers
slide as --sliding-pattern P says (layer i iff (i + 1) % P != 0, written as "layer_types"),
over --window keys; --query-scalar is query_pre_attn_scalar (default: --head-dim).
phi3 (Phi3ForCausalLM) draws, per layer, the input norm, the fused qkv_proj [(heads + 2
kv-heads) * head-dim, dim] (q rows, then k, then v), o, the post-attention norm, the fused
gate_up_proj [2 ffn, dim] (gate rows, then up), down; each fused tensor is one generate() of
its whole shape. Its head dim is dim / heads (no head_dim key); --window is every layer's.
  write_hf.py --out DIR --arch {gemma3,llama,llama3,mistral,phi3,qwen2,qwen3} --dtype {fp32,bf16,fp16} \\
      [--tied] [--shards 1] [--seed 1] [--vocab 256] [--dim 128] [--layers 2] [--heads 4] \\
      [--kv-heads 2] [--head-dim 32] [--ffn 256] [--window W (gemma3: 4, phi3: 2047)] \\
      [--sliding-pattern 2 (gemma3)] [--query-scalar HEAD_DIM (gemma3)]
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
    "gemma3": ("Gemma3ForCausalLM", "gemma3_text", 1e-6, 1000000.0, 32768),
    "phi3": ("Phi3ForCausalLM", "phi3", 1e-5, 10000.0, 4096),
}
WINDOW = {"gemma3": 4, "phi3": 2047}  # --window's default
DTYPES = {"fp32": ("F32", "float32"), "bf16": ("BF16", "bfloat16"), "fp16": ("F16", "float16")}


def config(c):
    if c.arch == "gemma3":
        return gemma3_config(c)
    if c.arch == "phi3":
        return phi3_config(c)
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


def layer_types(c):
    """gemma3's "layer_types": layer i slides iff (i + 1) % --sliding-pattern != 0."""
    return ["sliding_attention" if (i + 1) % c.sliding_pattern else "full_attention" for i in range(c.layers)]


def gemma3_config(c):
    architecture, model_type, eps, theta, max_positions = ARCHS[c.arch]
    return {"architectures": [architecture], "model_type": model_type, "hidden_size": c.dim,
            "intermediate_size": c.ffn, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
            "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim, "vocab_size": c.vocab,
            "rms_norm_eps": eps, "rope_theta": theta, "rope_local_base_freq": 10000.0,
            "sliding_window": c.window, "layer_types": layer_types(c), "query_pre_attn_scalar": c.query_scalar,
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": max_positions,
            "tie_word_embeddings": c.tied, "final_logit_softcapping": None, "attn_logit_softcapping": None,
            "rope_scaling": None, "attention_bias": False, "torch_dtype": DTYPES[c.dtype][1],
            "bos_token_id": 1, "eos_token_id": 2}


def phi3_config(c):
    architecture, model_type, eps, theta, max_positions = ARCHS[c.arch]
    return {"architectures": [architecture], "model_type": model_type, "hidden_size": c.dim,
            "intermediate_size": c.ffn, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
            "num_key_value_heads": c.kv_heads, "vocab_size": c.vocab, "rms_norm_eps": eps, "rope_theta": theta,
            "max_position_embeddings": max_positions, "original_max_position_embeddings": max_positions,
            "sliding_window": c.window, "rope_scaling": None, "partial_rotary_factor": 1.0,
            "tie_word_embeddings": c.tied, "hidden_act": "silu", "attention_bias": False,
            "torch_dtype": DTYPES[c.dtype][1], "bos_token_id": 1, "eos_token_id": 2}


def gemma3_layer(c, p):
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    return [(p + "input_layernorm.weight", (c.dim,)), (p + "self_attn.q_proj.weight", (q, c.dim)),
            (p + "self_attn.k_proj.weight", (kv, c.dim)), (p + "self_attn.v_proj.weight", (kv, c.dim)),
            (p + "self_attn.o_proj.weight", (c.dim, q)), (p + "self_attn.q_norm.weight", (c.head_dim,)),
            (p + "self_attn.k_norm.weight", (c.head_dim,)), (p + "post_attention_layernorm.weight", (c.dim,)),
            (p + "pre_feedforward_layernorm.weight", (c.dim,)), (p + "mlp.gate_proj.weight", (c.ffn, c.dim)),
            (p + "mlp.up_proj.weight", (c.ffn, c.dim)), (p + "mlp.down_proj.weight", (c.dim, c.ffn)),
            (p + "post_feedforward_layernorm.weight", (c.dim,))]


def phi3_layer(c, p):
    qkv = (c.heads + 2 * c.kv_heads) * c.head_dim
    return [(p + "input_layernorm.weight", (c.dim,)), (p + "self_attn.qkv_proj.weight", (qkv, c.dim)),
            (p + "self_attn.o_proj.weight", (c.dim, c.heads * c.head_dim)),
            (p + "post_attention_layernorm.weight", (c.dim,)), (p + "mlp.gate_up_proj.weight", (2 * c.ffn, c.dim)),
            (p + "mlp.down_proj.weight", (c.dim, c.ffn))]


def specs(c):
    """(name, shape) of every tensor, in the order they are drawn and written."""
    t = [("model.embed_tokens.weight", (c.vocab, c.dim))]
    if c.arch in ("gemma3", "phi3"):
        layer = gemma3_layer if c.arch == "gemma3" else phi3_layer
        for l in range(c.layers):
            t += layer(c, f"model.layers.{l}.")
        t.append(("model.norm.weight", (c.dim,)))
        return t + ([] if c.tied else [("lm_head.weight", (c.vocab, c.dim))])
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


def arch_options(p, c):
    """The defaults of --window, --sliding-pattern, --query-scalar; refuses them where unused."""
    for option, value, archs in (("--window", c.window, WINDOW), ("--sliding-pattern", c.sliding_pattern, ("gemma3",)),
                                 ("--query-scalar", c.query_scalar, ("gemma3",))):
        if value is not None and c.arch not in archs:
            p.error(f"{option} is not an option of --arch {c.arch}")
    if c.arch in WINDOW:
        c.window = WINDOW[c.arch] if c.window is None else c.window
        if c.window < 1:
            p.error("--window must be at least 1")
    if c.arch == "gemma3":
        c.sliding_pattern = 2 if c.sliding_pattern is None else c.sliding_pattern
        if c.sliding_pattern < 1:
            p.error("--sliding-pattern must be at least 1")
        c.query_scalar = c.head_dim if c.query_scalar is None else c.query_scalar
        if c.query_scalar < 1:
            p.error("--query-scalar must be at least 1")
    if c.arch == "phi3" and c.heads * c.head_dim != c.dim:
        p.error("phi3's head dim is --dim / --heads: --head-dim * --heads must be --dim")


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
    p.add_argument("--window", type=int, help="sliding_window (gemma3, phi3; default: gemma3 4, phi3 2047)")
    p.add_argument("--sliding-pattern", type=int, help="gemma3: layer i slides iff (i + 1) %% P != 0 (default 2)")
    p.add_argument("--query-scalar", type=int, help="gemma3's query_pre_attn_scalar (default: --head-dim)")
    c = p.parse_args()
    arch_options(p, c)
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
        elif c.arch == "gemma3" and name.endswith("norm.weight"):
            w = w - np.float32(1)  # exact: Gemma scales by 1 + w
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
