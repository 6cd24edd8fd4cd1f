#!/usr/bin/env python3
"""Converts a Hugging Face model directory (llama, mistral, qwen2, qwen3; F32, BF16 or F16
safetensors, one file or sharded by model.safetensors.index.json) into a GGUF file the way
llama.cpp's convert_hf_to_gguf.py does, so that the same weights can be run from both:
  - architecture "llama" for llama and mistral, "qwen2", "qwen3"; llama.cpp's keys and tensor
    names (attn_q.bias for qwen2's biases, attn_q_norm / attn_k_norm for qwen3's);
  - llama's q/k rows reordered per head from rotate-half pairs (i, i + D/2) to the interleaved
    pairs (2i, 2i + 1) of llama.cpp's LLAMA_ROPE_TYPE_NORM (LlamaModel.permute); qwen2 and
    qwen3 rotate halves in llama.cpp too (NEOX) and keep their rows;
  - a llama3 rope_scaling as the rope_freqs.weight tensor of per-frequency divisors, computed
    as the converter computes it; no other rope_scaling is converted;
  - matrices kept in their dtype, byte for byte; 1-D tensors (norms, biases) widened to F32,
    as the converter keeps them; a tied classifier is no tensor;
  - llama.cpp's minimal SentencePiece vocabulary of the model's size (bench/llamacpp/write_gguf.py):
    run the result on token ids, or with the model's own tokenizer (`--tokenizer`).
  convert_hf_gguf.py DIR --out FILE.gguf
Every tensor's presence, dtype and shape is checked against config.json before a byte is
written; a failed run leaves no file.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench", "llamacpp"))
from write_gguf import ALIGN, ARR, BOOL, F32, I32, STR, U32, meta, text, vocabulary  # noqa: E402

GGML = {"F32": (0, 4), "F16": (1, 2), "BF16": (30, 2)}  # safetensors dtype -> (ggml type, bytes)
ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
               "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
               "self_attn.k_norm.weight": "attn_k_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
               "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def fail(message):
    sys.exit(f"convert_hf_gguf: {message}")


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of one file, every offset checked."""
    raw = open(path, "rb").read()
    if len(raw) < 8:
        fail(f"{path}: {len(raw)} bytes, no safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        fail(f"{path}: a header of {n} bytes in a file of {len(raw)}")
    header = json.loads(raw[8:8 + n])
    data, out = raw[8 + n:], {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (a, b) = t["dtype"], t["shape"], t["data_offsets"]
        if dtype not in GGML:
            fail(f"{path}: {name} is {dtype}, not F32, BF16 or F16")
        if not 0 <= a <= b <= len(data) or b - a != math.prod(shape) * GGML[dtype][1]:
            fail(f"{path}: {name} [{a}, {b}) does not hold {shape} of {dtype} inside the data")
        out[name] = (dtype, tuple(shape), data[a:b])
    return out


def read_weights(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(directory, "model.safetensors"))
    weight_map = json.load(open(index))["weight_map"]
    out = {}
    for shard in sorted(set(weight_map.values())):
        if os.path.basename(shard) != shard:
            fail(f"{index} names a shard outside the directory: {shard}")
        for name, t in read_safetensors(os.path.join(directory, shard)).items():
            if weight_map.get(name) != shard:
                fail(f"{shard} holds {name}, which {index} places elsewhere")
            out[name] = t
    if set(out) != set(weight_map):
        fail(f"{index} names tensors that no shard holds")
    return out


def llama3_factors(c, head_dim):
    """rope_freqs.weight as llama.cpp's converter makes it for rope_type llama3."""
    s = c["rope_scaling"]
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old = s.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi / (1.0 / c.get("rope_theta", 10000.0) ** (i / head_dim))
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype="<f4")


def interleave(raw, dtype, shape, heads):
    """Rotate-half rows -> interleaved rows, head by head, on the stored bytes."""
    w = np.frombuffer(raw, dtype={"F32": "<u4", "F16": "<u2", "BF16": "<u2"}[dtype]).reshape(shape)
    d = shape[0] // heads
    return w.reshape(heads, 2, d // 2, shape[1]).swapaxes(1, 2).reshape(shape).tobytes()


def widen(raw, dtype):
    """1-D bytes as F32, exactly."""
    if dtype == "F32":
        return raw
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype("<f4").tobytes()
    return (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).tobytes()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    c = json.load(open(os.path.join(a.directory, "config.json")))
    arch = ARCH.get(c.get("model_type"))
    if arch is None:
        fail(f"{a.directory}/config.json: model_type {c.get('model_type')!r} is not llama, mistral, qwen2 or qwen3")
    dim, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, vocab, ffn = c.get("num_key_value_heads", heads), c["vocab_size"], c["intermediate_size"]
    head_dim = c.get("head_dim") or dim // heads
    tied = c.get("tie_word_embeddings", arch != "llama")
    scaling = c.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) != "llama3":
        fail(f"rope_scaling {scaling} is not llama3's: not converted")
    weights = read_weights(a.directory)
    q, kv = heads * head_dim, kv_heads * head_dim
    want = [("model.embed_tokens.weight", (vocab, dim))]
    for l in range(layers):
        pre = f"model.layers.{l}."
        want.append((pre + "input_layernorm.weight", (dim,)))
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            want.append((pre + f"self_attn.{proj}.weight", (rows, dim)))
            if arch == "qwen2":
                want.append((pre + f"self_attn.{proj}.bias", (rows,)))
        want.append((pre + "self_attn.o_proj.weight", (dim, q)))
        if arch == "qwen3":
            want += [(pre + "self_attn.q_norm.weight", (head_dim,)), (pre + "self_attn.k_norm.weight", (head_dim,))]
        want += [(pre + "post_attention_layernorm.weight", (dim,)), (pre + "mlp.gate_proj.weight", (ffn, dim)),
                 (pre + "mlp.up_proj.weight", (ffn, dim)), (pre + "mlp.down_proj.weight", (dim, ffn))]
    want.append(("model.norm.weight", (dim,)))
    if not tied:
        want.append(("lm_head.weight", (vocab, dim)))
    for name, shape in want:
        if name not in weights:
            fail(f"{a.directory}: no tensor {name}")
        if weights[name][1] != shape:
            fail(f"{a.directory}: {name} is {list(weights[name][1])}, config.json makes it {list(shape)}")
    extra = set(weights) - {n for n, _ in want}
    if extra:
        fail(f"{a.directory}: tensors config.json does not use: {sorted(extra)[:3]}")

    tensors = []  # (gguf name, ggml type, shape, bytes)
    if scaling:
        tensors.append(("rope_freqs.weight", 0, (head_dim // 2,), llama3_factors(c, head_dim).tobytes()))
    for name, _ in want:
        dtype, shape, raw = weights[name]
        if name.endswith(("q_proj.weight", "k_proj.weight")) and arch == "llama":
            raw = interleave(raw, dtype, shape, heads if "q_proj" in name else kv_heads)
        if len(shape) == 1:
            raw, dtype = widen(raw, dtype), "F32"
        g = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}.get(name)
        if g is None:
            layer, rest = name[len("model.layers."):].split(".", 1)
            g = f"blk.{layer}.{LAYER_NAMES[rest]}"
        tensors.append((g, GGML[dtype][0], shape, raw))

    tokens, types = vocabulary(vocab)
    kinds = {weights[n][0] for n, s in want if len(s) == 2}
    file_type = 0 if kinds == {"F32"} else 1 if kinds == {"F16"} else 32 if kinds == {"BF16"} else 0
    kv_meta = [("general.architecture", STR, arch), ("general.name", STR, os.path.basename(os.path.abspath(a.directory))),
               ("general.file_type", U32, file_type), ("general.alignment", U32, ALIGN),
               (f"{arch}.vocab_size", U32, vocab), (f"{arch}.context_length", U32, c.get("max_position_embeddings", 2048)),
               (f"{arch}.embedding_length", U32, dim), (f"{arch}.block_count", U32, layers),
               (f"{arch}.feed_forward_length", U32, ffn), (f"{arch}.attention.head_count", U32, heads),
               (f"{arch}.attention.head_count_kv", U32, kv_heads), (f"{arch}.attention.key_length", U32, head_dim),
               (f"{arch}.attention.value_length", U32, head_dim), (f"{arch}.rope.dimension_count", U32, head_dim),
               (f"{arch}.rope.freq_base", F32, float(c.get("rope_theta", 10000.0))),
               (f"{arch}.attention.layer_norm_rms_epsilon", F32, float(c.get("rms_norm_eps", 1e-6))),
               ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
               ("tokenizer.ggml.scores", ARR, (F32, [0.0] * vocab)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
               ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.bos_token_id", U32, 1),
               ("tokenizer.ggml.eos_token_id", U32, 2), ("tokenizer.ggml.add_bos_token", BOOL, False),
               ("tokenizer.ggml.add_eos_token", BOOL, False)]
    partial = a.out + ".partial"  # a failed run leaves no file that looks whole
    with open(partial, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv_meta)))
        for k in kv_meta:
            f.write(meta(*k))
        offset = 0
        for g, kind, shape, raw in tensors:
            dims = tuple(reversed(shape))
            f.write(text(g) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims) + struct.pack("<IQ", kind, offset))
            offset += -(-len(raw) // ALIGN) * ALIGN
        f.write(b"\0" * (-f.tell() % ALIGN))
        for _, _, _, raw in tensors:
            f.write(raw + b"\0" * (-len(raw) % ALIGN))
    os.replace(partial, a.out)


if __name__ == "__main__":
    main()
