#!/usr/bin/env python3
"""Writes the seeded model `ringattn generate --model seed:S` draws as a GGUF file for llama.cpp.

The weights are tools/write_weights.py's (the same numbers the C++ seed generator draws, bit
for bit), in Hugging Face Llama's layout; GGUF's llama architecture wants three changes, made
here and nowhere else:
  - q_proj and k_proj rows reordered per head from rotate-half RoPE pairs (i, i + D/2) to
    llama.cpp's interleaved pairs (2i, 2i + 1): GGUF row 2i = HF row i, row 2i + 1 = HF row
    i + D/2 (what llama.cpp's convert_hf_to_gguf.py does); without it the text differs;
  - every tensor's dimensions listed innermost first ([out, in] is ne = [in, out]);
  - a tied classifier is no tensor at all (llama.cpp then reads token_embd for it).
Matrices are F32, F16 or BF16 (rounded to nearest even), Q8_0 (llama.cpp's quantize_row_q8_0_ref:
per block of 32, d = max|x| / 127 stored as fp16, q = round(x / d) half away from zero), Q4_K,
Q6_K, or llama.cpp's Q4_K_M mix of Q4_K and Q6_K (q4_k_m_kind); the norms stay F32, as the converter
keeps them. The vocabulary is llama.cpp's minimal SentencePiece one: <unk>, <s>, </s>, byte
tokens, then fillers; ids pass through unchanged (the bench feeds ids, never text). With
--tokenizer DIR it is instead that directory's tokenizer.json, and --vocab is its size: a
byte-level BPE one as GGUF's "gpt2" kind (--pre llama-bpe or qwen2), the way llama.cpp's converter
writes it; a SentencePiece-style one (byte fallback: Llama 2, Mistral) as the "llama" kind, each
token scored by its merge's rank (-rank; 0 for tokens no merge makes: characters, bytes, specials).
  write_gguf.py --seed 1 --vocab 512 --dim 2048 --layers 4 --heads 32 --kv-heads 8 \\
      --head-dim 64 --ffn 8192 [--untied] [--dtype f16|bf16|q8_0|q4_k|q6_k|q4_k_m] [--dequantized DIR] --out model.gguf
GGUF v3: "GGUF", version, tensor count, metadata count, the metadata (key, type, value), the
tensor infos (name, dims, type, offset), padding to 32 bytes, then the data, each tensor
32-byte aligned.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from write_weights import generate, specs  # noqa: E402

ALIGN = 32
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9  # GGUF metadata value types
GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_K, GGML_Q6_K, GGML_BF16 = 0, 1, 8, 12, 14, 30  # tensor types
BLOCK = {GGML_Q8_0: (32, 34), GGML_Q4_K: (256, 144), GGML_Q6_K: (256, 210)}  # values, bytes


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}." + {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }[rest]


def interleave_pairs(w, heads):
    """HF rotate-half rows -> llama.cpp's interleaved rows, head by head."""
    d = w.shape[0] // heads
    return w.reshape(heads, 2, d // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def rotate_half_pairs(w, heads):
    """llama.cpp's interleaved rows -> HF rotate-half rows, head by head (interleave_pairs undone)."""
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def write_dequantized(directory, c, tensors):
    """The values the file holds, widened exactly to F32, as a Hugging Face Llama directory
    (q/k rows back in rotate-half order): a float64 reference reads them (tools/hf_reference.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    from write_hf import write_safetensors
    os.makedirs(directory, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c.dim,
           "intermediate_size": c.ffn, "num_hidden_layers": c.layers, "num_attention_heads": c.heads,
           "num_key_value_heads": c.kv_heads, "head_dim": c.head_dim, "vocab_size": c.vocab, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": c.context, "tie_word_embeddings": not c.untied,
           "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
           "attention_bias": False, "mlp_bias": False}
    write_safetensors(os.path.join(directory, "model.safetensors"),
                      [(n, "F32", v.shape, np.ascontiguousarray(v, dtype="<f4").tobytes()) for n, v in tensors])
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def q8_0_bytes(a, values=None):
    """Rows of a as GGUF Q8_0 blocks: per 32 values an fp16 scale and 32 int8. `values`, a list,
    gets the blocks' values as llama.cpp's dequantize_row_q8_0 computes them (d * q, fp32)."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 32)
    d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # C's roundf
    blocks = np.empty((x.shape[0], 34), dtype=np.uint8)
    blocks[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = q.view(np.uint8)
    if values is not None:
        values.append((d.astype("<f2").astype(np.float32)[:, None] * q.astype(np.float32)).reshape(a.shape))
    return blocks.tobytes()


def q4_k_bytes(a, values=None):
    """Rows of a as GGUF Q4_K super-blocks of 256 (llama.cpp's block_q4_K, 144 bytes): fp16 d and
    dmin, eight 6-bit (scale, min) pairs packed in 12 bytes, 128 bytes of 4-bit q; a value is
    (d * scale) * q - dmin * min. Each sub-block of 32 spans [min(x, 0), max(x)] in 15 steps
    (llama.cpp refines that span further; any valid blocks serve, as both readers read the same).
    `values`, a list, gets the values as dequantize_row_q4_K computes them, each step in fp32."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 8, 32)
    lo = np.minimum(x.min(axis=2), 0).astype(np.float32)
    scale = ((x.max(axis=2) - lo) / np.float32(15)).astype(np.float32)
    d = (scale.max(axis=1) / np.float32(63)).astype("<f2")
    dmin = ((-lo).max(axis=1) / np.float32(63)).astype("<f2")
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    sc = np.clip(np.rint(scale / np.where(df == 0, 1, df)[:, None]), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(-lo / np.where(dminf == 0, 1, dminf)[:, None]), 0, 63).astype(np.uint8)
    d1 = (df[:, None] * sc).astype(np.float32)
    m1 = (dminf[:, None] * m).astype(np.float32)
    q = np.clip(np.rint((x + m1[:, :, None]) / np.where(d1 == 0, 1, d1)[:, :, None]), 0, 15).astype(np.uint8)
    q[d1 == 0] = 0
    if values is not None:
        values.append(((d1[:, :, None] * q.astype(np.float32)).astype(np.float32) - m1[:, :, None]).reshape(a.shape))
    scales = np.zeros((x.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    q = q.reshape(-1, 4, 2, 32)  # chunk of 64: the low nibbles' 32 values, then the high ones'
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)
    return blocks.astype(np.uint8).tobytes()


def q6_k_bytes(a, values=None):
    """Rows of a as GGUF Q6_K super-blocks of 256 (llama.cpp's block_q6_K, 210 bytes): 128 bytes of
    q's low 4 bits, 64 of its high 2 bits, int8 scales of the 16 sub-blocks of 16, fp16 d; a value
    is (d * scale) * (q - 32). Each sub-block's largest magnitude maps to 31 steps. `values`, a
    list, gets the values as dequantize_row_q6_K computes them."""
    x = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, 16, 16)
    scale = (np.abs(x).max(axis=2) / np.float32(31)).astype(np.float32)
    d = (scale.max(axis=1) / np.float32(127)).astype("<f2")
    df = d.astype(np.float32)
    sc = np.clip(np.rint(scale / np.where(df == 0, 1, df)[:, None]), -128, 127).astype(np.int8)
    ds = (df[:, None] * sc).astype(np.float32)
    q = (np.clip(np.rint(x / np.where(ds == 0, 1, ds)[:, :, None]), -32, 31) + 32).astype(np.uint8)
    q[ds == 0] = 32
    if values is not None:
        values.append((ds[:, :, None] * (q.astype(np.float32) - np.float32(32))).astype(np.float32).reshape(a.shape))
    L = q.reshape(-1, 2, 4, 32)  # halves of 128, quarters of 32
    ql = np.concatenate([(L[:, :, 0] & 0xF) | (L[:, :, 2] << 4), (L[:, :, 1] & 0xF) | (L[:, :, 3] << 4)], axis=2).reshape(-1, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)).reshape(-1, 64)
    blocks = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(-1, 2)], axis=1)
    return blocks.astype(np.uint8).tobytes()


# llama.cpp's Q4_K_M mix (llama_tensor_get_type): Q6_K for the classifier (the embedding where it
# is tied: no output tensor), and for attn_v and ffn_down in the first and last eighth of the
# layers and every third layer between (use_more_bits); Q4_K else.
def q4_k_m_kind(hf, layers, untied):
    if hf == "lm_head.weight" or (hf == "model.embed_tokens.weight" and not untied):
        return GGML_Q6_K
    if hf.endswith("v_proj.weight") or hf.endswith("down_proj.weight"):
        i = int(hf.split(".")[2])
        if i < layers // 8 or i >= 7 * layers // 8 or (i - layers // 8) % 3 == 2:
            return GGML_Q6_K
    return GGML_Q4_K


def text(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def meta(key, kind, value):
    out = text(key) + struct.pack("<I", kind)
    if kind == STR:
        return out + text(value)
    if kind == ARR:
        item, values = value
        out += struct.pack("<IQ", item, len(values))
        if item == STR:
            return out + b"".join(text(v) for v in values)
        return out + np.asarray(values, dtype="<f4" if item == F32 else "<i4").tobytes()
    return out + struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[kind], value)


def vocabulary(n):
    # llama.cpp needs the byte token <0x0A>, and node-llama-cpp tokenizes "some test text here"
    # when it loads a model: every byte of that must have a token (else it aborts).
    if n >= 3 + 256:
        pieces, kinds = [f"<0x{i:02X}>" for i in range(256)], [6] * 256
    else:
        extra = ["\u2581"] + sorted(set("some test text here") - {" "})
        pieces, kinds = ["<0x0A>"] + extra, [6] + [1] * len(extra)
    tokens = ["<unk>", "<s>", "</s>"] + pieces
    types = [2, 3, 3] + kinds  # unknown, control, control, byte..., normal...
    if len(tokens) > n:
        sys.exit(f"write_gguf: a vocabulary of {n} is too small for llama.cpp's minimal one ({len(tokens)})")
    tokens += [f"t{i}" for i in range(len(tokens), n)]
    types += [1] * (n - len(types))
    return tokens, types


def hf_vocabulary(directory, pre):
    """A Hugging Face byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json in
    `directory`) as GGUF's "gpt2" vocabulary, as llama.cpp's convert_hf_to_gguf.py writes it:
    tokens by id, merges as "left right", added tokens CONTROL (3) when special and
    USER_DEFINED (4) when not, the rest NORMAL (1); `pre` names the pre-tokenizer."""
    with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    config = {}
    if os.path.exists(os.path.join(directory, "tokenizer_config.json")):
        with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    by_id = {i: t for t, i in tj["model"]["vocab"].items()}
    kinds = {}
    for a in tj.get("added_tokens", []):
        by_id[a["id"]] = a["content"]
        kinds[a["id"]] = 3 if a["special"] else 4
    n = max(by_id) + 1
    if len(by_id) != n:
        sys.exit(f"write_gguf: {directory}/tokenizer.json leaves ids without a token")
    tokens = [by_id[i] for i in range(n)]
    types = [kinds.get(i, 1) for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    ids = {t: i for i, t in enumerate(tokens)}
    spm = bool(tj["model"].get("byte_fallback"))
    if spm:
        rank = {}
        for r, m in enumerate(merges):
            rank.setdefault(m.replace(" ", ""), r)
        scores = [-float(rank[t]) if t in rank and i not in kinds else 0.0 for i, t in enumerate(tokens)]
        for b in range(256):
            types[ids[f"<0x{b:02X}>"]] = 6
        unk = tj["model"].get("unk_token")
        if unk in ids:
            types[ids[unk]] = 2

    def token_of(key):
        v = config.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return ids.get(v) if isinstance(v, str) else None

    if spm:
        kv = [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
              ("tokenizer.ggml.scores", ARR, (F32, scores)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
              ("tokenizer.ggml.add_space_prefix", BOOL, True)]
        if unk in ids:
            kv.append(("tokenizer.ggml.unknown_token_id", U32, ids[unk]))
    else:
        kv = [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, pre),
              ("tokenizer.ggml.tokens", ARR, (STR, tokens)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
              ("tokenizer.ggml.merges", ARR, (STR, merges))]
    kv += [("tokenizer.ggml.add_bos_token", BOOL, bool(config.get("add_bos_token", False))),
           ("tokenizer.ggml.add_eos_token", BOOL, bool(config.get("add_eos_token", False)))]
    for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        if token_of(key) is not None and not any(k == f"tokenizer.ggml.{name}_token_id" for k, _, _ in kv):
            kv.append((f"tokenizer.ggml.{name}_token_id", U32, token_of(key)))
    # The chat template as llama.cpp's converter (gguf-py's SpecialVocab) takes it:
    # chat_template.jinja if there, else tokenizer_config.json's "chat_template", a string or
    # a list of {name, template} whose "default" is tokenizer.chat_template and the others
    # tokenizer.chat_template.NAME.
    template = config.get("chat_template")
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if isinstance(template, list):
        for t in template:
            if not (isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)):
                sys.exit(f"write_gguf: {directory}/tokenizer_config.json: a chat_template entry is not {{name, template}}")
            key = "tokenizer.chat_template" + ("" if t["name"] == "default" else "." + t["name"])
            kv.append((key, STR, t["template"]))
    elif isinstance(template, str):
        kv.append(("tokenizer.chat_template", STR, template))
    elif template is not None:
        sys.exit(f"write_gguf: {directory}/tokenizer_config.json: chat_template is neither a string nor a list")
    return n, kv


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("seed", 1), ("vocab", 512), ("dim", 2048), ("layers", 4), ("heads", 32),
                          ("kv-heads", 8), ("head-dim", 64), ("ffn", 8192), ("context", 8192)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16", "q8_0", "q4_k", "q6_k", "q4_k_m"], default="f32")
    p.add_argument("--tokenizer", help="a directory with a tokenizer.json (and tokenizer_config.json): its vocabulary, "
                   "as GGUF's gpt2 kind (byte-level BPE) or llama kind (SentencePiece), replaces the minimal one, "
                   "and --vocab is its size")
    p.add_argument("--pre", default="llama-bpe", help="tokenizer.ggml.pre with --tokenizer (llama-bpe, qwen2)")
    p.add_argument("--dequantized", metavar="DIR", help="also write the values the file holds (F32, HF layout) "
                   "as a Hugging Face directory, for a float64 reference")
    p.add_argument("--out", required=True)
    c = p.parse_args()
    held = []  # (HF name, the values the file holds) with --dequantized
    if c.tokenizer:
        c.vocab, vocab_kv = hf_vocabulary(c.tokenizer, c.pre)
    else:
        tokens, types = vocabulary(c.vocab)
        vocab_kv = [("tokenizer.ggml.model", STR, "llama"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
                    ("tokenizer.ggml.scores", ARR, (F32, [0.0] * c.vocab)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
                    ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.bos_token_id", U32, 1),
                    ("tokenizer.ggml.eos_token_id", U32, 2), ("tokenizer.ggml.add_bos_token", BOOL, False),
                    ("tokenizer.ggml.add_eos_token", BOOL, False)]
    kv = [("general.architecture", STR, "llama"), ("general.name", STR, f"ringattn seed {c.seed}"),
          ("general.file_type", U32, {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_k": 14, "q6_k": 18, "q4_k_m": 15}[c.dtype]), ("general.alignment", U32, ALIGN),
          ("llama.vocab_size", U32, c.vocab), ("llama.context_length", U32, c.context),
          ("llama.embedding_length", U32, c.dim), ("llama.block_count", U32, c.layers),
          ("llama.feed_forward_length", U32, c.ffn), ("llama.attention.head_count", U32, c.heads),
          ("llama.attention.head_count_kv", U32, c.kv_heads), ("llama.attention.key_length", U32, c.head_dim),
          ("llama.attention.value_length", U32, c.head_dim), ("llama.rope.dimension_count", U32, c.head_dim),
          ("llama.rope.freq_base", F32, 10000.0), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)] + vocab_kv
    tensors, offset = [], 0  # (index in specs, name, shape, type, offset, bytes)
    for index, (hf, shape) in enumerate(specs(c)):
        kind = (GGML_F32 if len(shape) == 1 or c.dtype == "f32" else GGML_BF16 if c.dtype == "bf16" else GGML_F16 if c.dtype == "f16" else
                GGML_Q8_0 if c.dtype == "q8_0" else GGML_Q4_K if c.dtype == "q4_k" else GGML_Q6_K if c.dtype == "q6_k" else
                q4_k_m_kind(hf, c.layers, c.untied))
        n = int(np.prod(shape))
        if kind in BLOCK and shape[1] % BLOCK[kind][0]:
            sys.exit(f"write_gguf: {hf} has rows of {shape[1]}, not whole blocks of {BLOCK[kind][0]}")
        size = n * 4 if kind == GGML_F32 else n * 2 if kind in (GGML_BF16, GGML_F16) else n // BLOCK[kind][0] * BLOCK[kind][1]
        tensors.append((index, hf, shape, kind, offset, size))
        offset += -(-size // ALIGN) * ALIGN
    partial = c.out + ".partial"  # a failed run leaves no file that looks whole
    with open(partial, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
        for k in kv:
            f.write(meta(*k))
        for _, hf, shape, kind, off, _ in tensors:
            dims = tuple(reversed(shape))
            f.write(text(gguf_name(hf)) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims) + struct.pack("<IQ", kind, off))
        f.write(b"\0" * (-f.tell() % ALIGN))
        start = f.tell()
        for index, hf, shape, kind, off, size in tensors:
            w = generate(c.seed, index, shape)
            if hf.endswith("q_proj.weight"):
                w = interleave_pairs(w, c.heads)
            elif hf.endswith("k_proj.weight"):
                w = interleave_pairs(w, c.kv_heads)
            values = []
            b = {GGML_F32: lambda: w.astype("<f4").tobytes(), GGML_BF16: lambda: bf16_bits(w).tobytes(), GGML_F16: lambda: w.astype("<f2").tobytes(),
                 GGML_Q8_0: lambda: q8_0_bytes(w, values), GGML_Q4_K: lambda: q4_k_bytes(w, values),
                 GGML_Q6_K: lambda: q6_k_bytes(w, values)}[kind]()
            assert len(b) == size and f.tell() - start == off
            if c.dequantized:
                v = values[0] if values else (w.astype(np.float32) if kind == GGML_F32 else
                                              w.astype("<f2").astype(np.float32) if kind == GGML_F16 else
                                              (bf16_bits(w).astype(np.uint32) << 16).view(np.float32).reshape(w.shape))
                if hf.endswith("q_proj.weight"):
                    v = rotate_half_pairs(v, c.heads)
                elif hf.endswith("k_proj.weight"):
                    v = rotate_half_pairs(v, c.kv_heads)
                held.append((hf, v))
            f.write(b + b"\0" * (-len(b) % ALIGN))
    if c.dequantized:
        write_dequantized(c.dequantized, c, held)
    os.replace(partial, c.out)


if __name__ == "__main__":
    main()
