#!/usr/bin/env python3
"""Converts a llama2.c checkpoint (version 0, "legacy", float32: stories260K.bin) into the
other formats ringattn reads, the same numbers in each, F32:
  - a Hugging Face Llama directory (config.json, model.safetensors), q/k rows turned from
    llama2.c's interleaved RoPE pairs (2i, 2i + 1) to HF's rotate-half pairs (i, i + D/2),
    as Hugging Face's own converter permutes Meta's checkpoints;
  - a GGUF file (llama architecture), whose q/k rows are llama.cpp's interleaved pairs, so
    llama2.c's rows unchanged, with llama.cpp's minimal SentencePiece vocabulary of the
    checkpoint's size (pass the model's own tokenizer to `ringattn generate --tokenizer`).
Both carry llama2.c's end of generation: run.c stops at BOS (1), with which these models
begin the next story, as well as at EOS (2), so the HF directory's generation_config.json
lists [1, 2] as eos_token_id and the GGUF file names 1 its tokenizer.ggml.eot_token_id.
The same weights in three files must give the same greedy text (tests/model/test_formats_agree.sh).
  convert_llama2c.py stories260K.bin [--hf DIR] [--gguf FILE]
The header (7 int32: dim, hidden, layers, heads, kv heads, vocab (negative: an untied
classifier follows), context) is checked against the file's size before anything is read.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench", "llamacpp"))
from write_gguf import (ALIGN, ARR, BOOL, F32, GGML_F32, I32, STR, U32, gguf_name, meta, text,  # noqa: E402
                        vocabulary)
from write_hf import write_safetensors  # noqa: E402


def read_llama2c(path):
    """The checkpoint's shape and its tensors by Hugging Face name, [out, in], q/k as stored."""
    raw = open(path, "rb").read()
    if len(raw) < 28:
        sys.exit(f"convert_llama2c: {path}: {len(raw)} bytes, shorter than the 28-byte header")
    dim, hidden, layers, heads, kv_heads, vocab, context = struct.unpack("<7i", raw[:28])
    untied = vocab < 0
    vocab = abs(vocab)
    if min(dim, hidden, layers, heads, kv_heads, vocab, context) < 1 or dim % heads or heads % kv_heads or \
            (dim // heads) % 2 or max(dim, hidden, vocab, context) > 1 << 20 or layers > 1024:
        sys.exit(f"convert_llama2c: {path}: header {dim, hidden, layers, heads, kv_heads, vocab, context} "
                 "is not a llama2.c model (needs positive sizes, heads dividing dim, an even head size)")
    hd = dim // heads
    kv = kv_heads * hd
    order = [("embed", (vocab, dim)), ("att_norm", (layers, dim)), ("q", (layers, dim, dim)), ("k", (layers, kv, dim)),
             ("v", (layers, kv, dim)), ("o", (layers, dim, dim)), ("ffn_norm", (layers, dim)),
             ("gate", (layers, hidden, dim)), ("down", (layers, dim, hidden)), ("up", (layers, hidden, dim)),
             ("norm", (dim,)), ("freq", (context, hd)), ("cls", (vocab, dim) if untied else (0,))]
    need = 28 + 4 * sum(int(np.prod(s)) for _, s in order)
    if len(raw) != need:
        sys.exit(f"convert_llama2c: {path}: {len(raw)} bytes, but its header needs {need}")
    t, off = {}, 28
    for name, shape in order:
        n = int(np.prod(shape))
        t[name] = np.frombuffer(raw, dtype="<f4", count=n, offset=off).reshape(shape)
        off += 4 * n
    hf = {"model.embed_tokens.weight": t["embed"]}
    for l in range(layers):
        p = f"model.layers.{l}."
        hf.update({p + "input_layernorm.weight": t["att_norm"][l], p + "self_attn.q_proj.weight": t["q"][l],
                   p + "self_attn.k_proj.weight": t["k"][l], p + "self_attn.v_proj.weight": t["v"][l],
                   p + "self_attn.o_proj.weight": t["o"][l], p + "post_attention_layernorm.weight": t["ffn_norm"][l],
                   p + "mlp.gate_proj.weight": t["gate"][l], p + "mlp.up_proj.weight": t["up"][l],
                   p + "mlp.down_proj.weight": t["down"][l]})
    hf["model.norm.weight"] = t["norm"]
    if untied:
        hf["lm_head.weight"] = t["cls"]
    shape = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, context=context,
                 untied=untied)
    return shape, hf


def rotate_half(w, heads):
    """llama2.c's interleaved rows (2i, 2i + 1) -> HF's rotate-half rows (i, i + D/2), head by head."""
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def write_hf(directory, s, tensors):
    os.makedirs(directory, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["dim"],
           "intermediate_size": s["hidden"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv_heads"], "vocab_size": s["vocab"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "max_position_embeddings": s["context"], "tie_word_embeddings": not s["untied"], "hidden_act": "silu",
           "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "mlp_bias": False}
    out = []
    for name, w in tensors.items():
        if name.endswith("q_proj.weight"):
            w = rotate_half(w, s["heads"])
        elif name.endswith("k_proj.weight"):
            w = rotate_half(w, s["kv_heads"])
        out.append((name, "F32", w.shape, np.ascontiguousarray(w, dtype="<f4").tobytes()))
    write_safetensors(os.path.join(directory, "model.safetensors.partial"), out)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": [1, 2]}, f, indent=1)
    os.replace(os.path.join(directory, "model.safetensors.partial"), os.path.join(directory, "model.safetensors"))


def write_gguf(path, s, tensors):
    tokens, types = vocabulary(s["vocab"])
    kv = [("general.architecture", STR, "llama"), ("general.name", STR, "converted from llama2.c"),
          ("general.file_type", U32, 0), ("general.alignment", U32, ALIGN),
          ("llama.vocab_size", U32, s["vocab"]), ("llama.context_length", U32, s["context"]),
          ("llama.embedding_length", U32, s["dim"]), ("llama.block_count", U32, s["layers"]),
          ("llama.feed_forward_length", U32, s["hidden"]), ("llama.attention.head_count", U32, s["heads"]),
          ("llama.attention.head_count_kv", U32, s["kv_heads"]),
          ("llama.rope.dimension_count", U32, s["dim"] // s["heads"]), ("llama.rope.freq_base", F32, 10000.0),
          ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
          ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
          ("tokenizer.ggml.scores", ARR, (F32, [0.0] * s["vocab"])), ("tokenizer.ggml.token_type", ARR, (I32, types)),
          ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.bos_token_id", U32, 1),
          ("tokenizer.ggml.eos_token_id", U32, 2), ("tokenizer.ggml.eot_token_id", U32, 1),
          ("tokenizer.ggml.add_bos_token", BOOL, True),
          ("tokenizer.ggml.add_eos_token", BOOL, False)]
    blobs, offset, infos = [], 0, []
    for name, w in tensors.items():
        b = np.ascontiguousarray(w, dtype="<f4").tobytes()
        dims = tuple(reversed(w.shape))
        infos.append(text(gguf_name(name)) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims) +
                     struct.pack("<IQ", GGML_F32, offset))
        blobs.append(b + b"\0" * (-len(b) % ALIGN))
        offset += len(blobs[-1])
    partial = path + ".partial"  # a failed run leaves no file that looks whole
    with open(partial, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kv)))
        for k in kv:
            f.write(meta(*k))
        for i in infos:
            f.write(i)
        f.write(b"\0" * (-f.tell() % ALIGN))
        for b in blobs:
            f.write(b)
    os.replace(partial, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--hf", help="write a Hugging Face model directory here")
    p.add_argument("--gguf", help="write a GGUF file here")
    c = p.parse_args()
    if not c.hf and not c.gguf:
        p.error("nothing to write: give --hf DIR and/or --gguf FILE")
    shape, tensors = read_llama2c(c.checkpoint)
    if c.hf:
        write_hf(c.hf, shape, tensors)
    if c.gguf:
        write_gguf(c.gguf, shape, tensors)


if __name__ == "__main__":
    main()
