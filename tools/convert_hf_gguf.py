#!/usr/bin/env python3
"""Converts a Hugging Face model directory (llama, mistral, qwen2, qwen3, gemma3_text, phi3;
F32, BF16 or F16 safetensors, one file or sharded by model.safetensors.index.json) into a
GGUF file the way llama.cpp's convert_hf_to_gguf.py does, so that the same weights can be run
from both:
  - architecture "llama" for llama and mistral, "qwen2", "qwen3", "gemma3" (Gemma3Model),
    "phi3" (Phi3MiniModel); llama.cpp's keys and tensor names (attn_q.bias for qwen2's
    biases, attn_q_norm / attn_k_norm for qwen3's and gemma3's; gemma3's
    post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm as
    post_attention_norm, ffn_norm, post_ffw_norm; phi3's fused qkv_proj as attn_qkv and
    fused gate_up_proj [2 ffn, dim] as ffn_up, kept whole);
  - llama's q/k rows reordered per head from rotate-half pairs (i, i + D/2) to the interleaved
    pairs (2i, 2i + 1) of llama.cpp's LLAMA_ROPE_TYPE_NORM (LlamaModel.permute); qwen2, qwen3,
    gemma3 and phi3 rotate halves in llama.cpp too (NEOX) and keep their rows;
  - gemma3's norm weights (every *norm.weight) + 1, as Gemma3Model.norm_shift: added in
    float32 to the F32-widened weight (HF's 1 + w.float(); the converter itself adds in the
    tensor's dtype for F16 input, one fp16 rounding we do not copy); its sliding layers
    ("layer_types", else sliding_window_pattern, default 6) as the bool array
    gemma3.attention.sliding_window_pattern that llama.cpp's load_swa_pattern reads (the
    converter writes none: llama.cpp then assumes 6), rope_local_base_freq as
    rope.freq_base_swa; refused: attn_logit_softcapping, an activation but gelu_pytorch_tanh,
    a query_pre_attn_scalar llama.cpp does not use (it scales by key_length**-0.5, by
    (dim / heads)**-0.5 for its 62-layer 27B);
  - phi3's sliding_window as attention.sliding_window (0 when null; llama.cpp ignores it);
    refused: rope_scaling (longrope, su), partial_rotary_factor != 1, heads * head_dim != dim;
  - a llama3 rope_scaling as the rope_freqs.weight tensor of per-frequency divisors, computed
    as the converter computes it; gemma3's linear one as rope.scaling.type and .factor; no
    other rope_scaling is converted;
  - matrices kept in their dtype, byte for byte; 1-D tensors (norms, biases) widened to F32,
    as the converter keeps them; a tied classifier is no tensor;
  - llama.cpp's minimal SentencePiece vocabulary of the model's size (bench/llamacpp/write_gguf.py):
    run the result on token ids, or with the model's own tokenizer (`--tokenizer`). phi3's
    spells its last filler token <|endoftext|> (a normal token): llama.cpp's vocabulary
    loader looks that token up in a model whose general.name holds "phi3" or "phi-3" (as
    Phi-3's vocabulary has it) and fails to load one without it.
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
ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3_text": "gemma3",
        "phi3": "phi3"}
LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
               "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
               "self_attn.k_norm.weight": "attn_k_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
               "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
ARCH_NAMES = {"gemma3": {**LAYER_NAMES, "post_attention_layernorm.weight": "post_attention_norm.weight",
                         "pre_feedforward_layernorm.weight": "ffn_norm.weight",
                         "post_feedforward_layernorm.weight": "post_ffw_norm.weight"},
              "phi3": {**LAYER_NAMES, "self_attn.qkv_proj.weight": "attn_qkv.weight",
                       "mlp.gate_up_proj.weight": "ffn_up.weight"}}
GEMMA_LAYERS = ("sliding_attention", "full_attention")


def fail(message):
    sys.exit(f"convert_hf_gguf: {message}")


def bool_array(key, values):
    """A GGUF array of bools (one byte each), which write_gguf.meta does not write."""
    return text(key) + struct.pack("<IIQ", ARR, BOOL, len(values)) + bytes(int(bool(v)) for v in values)


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


def layer_tensors(arch, dim, ffn, q, kv, head_dim):
    """(name inside model.layers.N., shape) of one layer's tensors, in the order they are written."""
    if arch == "phi3":
        return [("input_layernorm.weight", (dim,)), ("self_attn.qkv_proj.weight", (q + 2 * kv, dim)),
                ("self_attn.o_proj.weight", (dim, q)), ("post_attention_layernorm.weight", (dim,)),
                ("mlp.gate_up_proj.weight", (2 * ffn, dim)), ("mlp.down_proj.weight", (dim, ffn))]
    t = [("input_layernorm.weight", (dim,))]
    for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        t.append((f"self_attn.{proj}.weight", (rows, dim)))
        if arch == "qwen2":
            t.append((f"self_attn.{proj}.bias", (rows,)))
    t.append(("self_attn.o_proj.weight", (dim, q)))
    if arch in ("qwen3", "gemma3"):
        t += [("self_attn.q_norm.weight", (head_dim,)), ("self_attn.k_norm.weight", (head_dim,))]
    t.append(("post_attention_layernorm.weight", (dim,)))
    if arch == "gemma3":
        t.append(("pre_feedforward_layernorm.weight", (dim,)))
    t += [("mlp.gate_proj.weight", (ffn, dim)), ("mlp.up_proj.weight", (ffn, dim)),
          ("mlp.down_proj.weight", (dim, ffn))]
    if arch == "gemma3":
        t.append(("post_feedforward_layernorm.weight", (dim,)))
    return t


def gemma3_sliding(c, layers):
    """Per layer, whether it slides: "layer_types", else (i + 1) % sliding_window_pattern != 0."""
    types = c.get("layer_types")
    if types is None:
        pattern = c.get("sliding_window_pattern", 6)
        types = [GEMMA_LAYERS[(i + 1) % pattern == 0] for i in range(layers)]
    if len(types) != layers or not set(types) <= set(GEMMA_LAYERS):
        fail(f"layer_types {types} are not {layers} of {GEMMA_LAYERS}")
    return [kind == "sliding_attention" for kind in types]


def check_gemma3(c, dim, heads, layers, head_dim):
    """Refuses a gemma3 llama.cpp would not run as Hugging Face does."""
    if c.get("attn_logit_softcapping") is not None:
        fail(f"attn_logit_softcapping {c['attn_logit_softcapping']} is not converted (llama.cpp's gemma3 has none)")
    if c.get("use_bidirectional_attention"):
        fail("use_bidirectional_attention is not converted (llama.cpp's gemma3 is causal)")
    if c.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        fail(f"hidden_activation {c['hidden_activation']!r} is not converted (llama.cpp's gemma3 uses tanh GELU)")
    scalar = c.get("query_pre_attn_scalar", 256)
    if scalar != (dim // heads if layers == 62 else head_dim):
        fail(f"query_pre_attn_scalar {scalar} is not converted: llama.cpp's gemma3 scales queries by "
             f"{'(dim / heads)' if layers == 62 else 'key_length'}**-0.5")
    if c.get("sliding_window") is None:
        fail("a gemma3 without sliding_window is not converted")
    scaling = c.get("rope_scaling")
    if scaling and (scaling.get("rope_type", scaling.get("type")) != "linear" or scaling.get("factor") is None):
        fail(f"rope_scaling {scaling} is not a linear one: not converted")


def check_phi3(c, dim, heads, head_dim):
    """Refuses a phi3 llama.cpp would not run as Hugging Face does."""
    scaling = c.get("rope_scaling")
    if scaling:
        fail(f"phi3's rope_scaling of type {scaling.get('rope_type', scaling.get('type'))!r} is not converted")
    if c.get("partial_rotary_factor", 1.0) != 1.0:
        fail(f"partial_rotary_factor {c['partial_rotary_factor']} is not converted")
    if heads * head_dim != dim:
        fail(f"head_dim {head_dim} * {heads} heads is not hidden_size {dim}: not llama.cpp's phi3")
    if c.get("hidden_act", "silu") != "silu":
        fail(f"hidden_act {c['hidden_act']!r} is not converted (llama.cpp's phi3 uses SwiGLU)")


def hparams(arch, c, vocab, dim, layers, ffn, heads, kv_heads, head_dim):
    """The architecture's keys, as the converter's class writes them: phi3 has no key/value_length
    and gemma3 no rope.dimension_count (llama.cpp takes the head dim for both)."""
    def k(key, kind, value):
        return f"{arch}.{key}", kind, value

    context = {"gemma3": 131072, "phi3": 4096}.get(arch, 2048)
    head = [k("vocab_size", U32, vocab), k("context_length", U32, c.get("max_position_embeddings", context))]
    counts = [k("embedding_length", U32, dim), k("block_count", U32, layers), k("feed_forward_length", U32, ffn),
              k("attention.head_count", U32, heads), k("attention.head_count_kv", U32, kv_heads)]
    lengths = [k("attention.key_length", U32, head_dim), k("attention.value_length", U32, head_dim)]
    rot = [k("rope.dimension_count", U32, head_dim)]
    base = [k("rope.freq_base", F32, float(c.get("rope_theta", 1000000.0 if arch == "gemma3" else 10000.0)))]
    eps = [k("attention.layer_norm_rms_epsilon", F32, float(c.get("rms_norm_eps", 1e-6)))]
    if arch == "phi3":
        return (head + [k("rope.scaling.original_context_length", U32, c.get("original_max_position_embeddings", 4096))]
                + counts + eps + rot + base + [k("attention.sliding_window", U32, c.get("sliding_window") or 0)])
    if arch != "gemma3":
        return head + counts + lengths + rot + base + eps
    out = head + counts + lengths + base + eps + [
        k("attention.sliding_window", U32, c["sliding_window"]),
        k("attention.sliding_window_pattern", ARR, (BOOL, gemma3_sliding(c, layers))),
        k("rope.freq_base_swa", F32, float(c.get("rope_local_base_freq", 10000.0)))]
    if c.get("rope_scaling"):
        out += [k("rope.scaling.type", STR, "linear"),
                k("rope.scaling.factor", F32, float(c["rope_scaling"]["factor"]))]
    if c.get("final_logit_softcapping"):
        out.append(k("final_logit_softcapping", F32, float(c["final_logit_softcapping"])))
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
        fail(f"{a.directory}/config.json: model_type {c.get('model_type')!r} is not llama, mistral, qwen2, qwen3, "
             "gemma3_text or phi3")
    dim, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, vocab, ffn = c.get("num_key_value_heads", heads), c["vocab_size"], c["intermediate_size"]
    head_dim = c.get("head_dim") or (256 if arch == "gemma3" else dim // heads)
    tied = c.get("tie_word_embeddings", arch not in ("llama", "phi3"))
    scaling = c.get("rope_scaling")
    if arch in ("gemma3", "phi3") and "rope_parameters" in c:
        fail("rope_parameters is not converted (rope_theta and rope_scaling are)")
    if arch == "gemma3":
        check_gemma3(c, dim, heads, layers, head_dim)
    elif arch == "phi3":
        check_phi3(c, dim, heads, head_dim)
    elif scaling and scaling.get("rope_type", scaling.get("type")) != "llama3":
        fail(f"rope_scaling {scaling} is not llama3's: not converted")
    kv_meta_arch = hparams(arch, c, vocab, dim, layers, ffn, heads, kv_heads, head_dim)
    weights = read_weights(a.directory)
    q, kv = heads * head_dim, kv_heads * head_dim
    want = [("model.embed_tokens.weight", (vocab, dim))]
    for l in range(layers):
        want += [(f"model.layers.{l}." + name, shape) for name, shape in layer_tensors(arch, dim, ffn, q, kv, head_dim)]
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
    if scaling and arch != "gemma3":  # llama3's (gemma3's linear one is two keys)
        tensors.append(("rope_freqs.weight", 0, (head_dim // 2,), llama3_factors(c, head_dim).tobytes()))
    for name, _ in want:
        dtype, shape, raw = weights[name]
        if name.endswith(("q_proj.weight", "k_proj.weight")) and arch == "llama":
            raw = interleave(raw, dtype, shape, heads if "q_proj" in name else kv_heads)
        if len(shape) == 1:
            raw, dtype = widen(raw, dtype), "F32"
        if arch == "gemma3" and name.endswith("norm.weight"):  # Gemma3RMSNorm's 1 + w
            raw = (np.frombuffer(raw, dtype="<f4") + np.float32(1)).astype("<f4").tobytes()
        g = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}.get(name)
        if g is None:
            layer, rest = name[len("model.layers."):].split(".", 1)
            g = f"blk.{layer}.{ARCH_NAMES.get(arch, LAYER_NAMES)[rest]}"
        tensors.append((g, GGML[dtype][0], shape, raw))

    tokens, types = vocabulary(vocab)
    if arch == "phi3":
        if tokens[-1] != f"t{vocab - 1}":
            fail(f"a phi3 vocabulary of {vocab} has no filler token left for <|endoftext|>")
        tokens[-1] = "<|endoftext|>"
    kinds = {weights[n][0] for n, s in want if len(s) == 2}
    file_type = 0 if kinds == {"F32"} else 1 if kinds == {"F16"} else 32 if kinds == {"BF16"} else 0
    kv_meta = [("general.architecture", STR, arch), ("general.name", STR, os.path.basename(os.path.abspath(a.directory))),
               ("general.file_type", U32, file_type), ("general.alignment", U32, ALIGN)] + kv_meta_arch + [
               ("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
               ("tokenizer.ggml.scores", ARR, (F32, [0.0] * vocab)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
               ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.bos_token_id", U32, 1),
               ("tokenizer.ggml.eos_token_id", U32, 2), ("tokenizer.ggml.add_bos_token", BOOL, False),
               ("tokenizer.ggml.add_eos_token", BOOL, False)]
    partial = a.out + ".partial"  # a failed run leaves no file that looks whole
    with open(partial, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv_meta)))
        for k in kv_meta:
            f.write(bool_array(k[0], k[2][1]) if k[1] == ARR and k[2][0] == BOOL else meta(*k))
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
