#!/usr/bin/env python3
"""An independent float64 PyTorch implementation of the Hugging Face architectures the infer
job loads (llama, llama 3's rope scaling, mistral, qwen2, qwen3, gemma3_text, phi3), to check
a run of it.

Reads the model directory itself: config.json and model.safetensors, or the shards named by
model.safetensors.index.json (F32, BF16 or F16, each widened exactly to float64). The model
is HF's modeling code written out: RMSNorm, q/k/v (qwen2: plus biases; qwen3: RMSNorm of each
head of q and k before RoPE), rotate-half RoPE in float64 (llama3: inv_freq rescaled as HF's
_compute_llama3_parameters), causal GQA attention, SiLU-gated MLP, tied or separate head.
gemma3_text (Gemma3ForCausalLM): the embedding times sqrt(hidden_size); every RMSNorm scales by
1 + w; q_norm/k_norm per head before RoPE; scores times query_pre_attn_scalar**-0.5; the
attention output and the MLP output each normed (post_attention_layernorm,
post_feedforward_layernorm) before their residual add, the MLP's input by
pre_feedforward_layernorm; tanh-approximated GELU; the layers of "layer_types" (else
sliding_window_pattern, default 6: layer i slides iff (i + 1) % P != 0) that slide see only
keys with q - k < sliding_window and rotate with rope_local_base_freq, the others with
rope_theta (and a linear rope_scaling: inv_freq / factor); final_logit_softcapping c gives
c * tanh(logits / c). phi3 (Phi3ForCausalLM): llama with the fused qkv_proj (q rows, k rows,
v rows) and gate_up_proj (gate rows, then up), head_dim = hidden_size / heads, and a
non-null sliding_window W masking, in every layer, keys with q - k >= W.
As reference.py: each prompt alone, greedy, the whole sequence recomputed for every token;
generated tokens compared exactly, every step's logits to --tol (max |logit diff|) and
--rtol (that over the largest |logit| of the float64 row), against the run's rank-R.jsonl files. --matmul-input bf16 mirrors the runtime holding bf16 weights: each
matmul's input rows rounded to bf16 (from their fp32 value) before the float64 product.
Exits 1 on a mismatch, 2 on a model or config it does not implement (among them Gemma's
attn_logit_softcapping and any rope_scaling but linear, Phi-3's rope_scaling (longrope, su)
and partial_rotary_factor, mistral's window when a sequence outgrows it).
  /usr/bin/python3 hf_reference.py RUN_DIR [RUN_DIR ...] --model DIR --prompts p.jsonl --tokens 4 \\
      [--tol 1e-4] [--rtol 1e-4] [--matmul-input fp32|bf16]
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_grad_enabled(False)


def refuse(message):  # exit 2: a model this file does not implement, or a broken directory
    print(f"hf_reference: {message}", file=sys.stderr)
    sys.exit(2)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body, out = data[8 + n:], {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        raw = body[t["data_offsets"][0]:t["data_offsets"][1]]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "BF16":  # the top half of a float32
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2")
        else:
            refuse(f"{path}: tensor {name}: dtype {t['dtype']} is not implemented")
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(t["shape"]))
    return out


def read_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(index) as f:
        weight_map = json.load(f)["weight_map"]
    w = {}
    for file in sorted(set(weight_map.values())):
        shard = read_safetensors(os.path.join(model_dir, file))
        if any(weight_map.get(name) != file for name in shard):
            refuse(f"{file} holds tensors that {index} places elsewhere")
        w.update(shard)
    if set(w) != set(weight_map):
        refuse(f"{index} names tensors that no shard holds")
    return w


TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3")
GEMMA_LAYERS = ("sliding_attention", "full_attention")


class Model:
    """The config's numbers, refusing what this file does not implement rather than guessing."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.type = cfg.get("model_type")
        if self.type not in TYPES:
            refuse(f"model_type {self.type!r} is not implemented")
        self.gemma = self.type == "gemma3_text"
        try:
            self.dim, self.ffn = cfg["hidden_size"], cfg["intermediate_size"]
            self.layers, self.vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
            self.heads = cfg["num_attention_heads"]
            self.kv_heads = cfg.get("num_key_value_heads") or self.heads
            self.head_dim = cfg.get("head_dim") or (256 if self.gemma else self.dim // self.heads)
            self.eps = cfg["rms_norm_eps"]
        except KeyError as e:
            refuse(f"config.json has no {e}")
        self.theta = cfg.get("rope_theta", 1000000.0 if self.gemma else 10000.0)
        self.tied = cfg.get("tie_word_embeddings", self.gemma)  # all but Gemma3TextConfig default to untied
        self.bias = self.type == "qwen2"  # q/k/v biases, always there in qwen2
        self.qk_norm = self.type in ("qwen3", "gemma3_text")
        act = ("hidden_activation", "gelu_pytorch_tanh") if self.gemma else ("hidden_act", "silu")
        for key, fine in (act, ("attention_bias", False), ("mlp_bias", False),
                          ("use_sliding_window", False), ("partial_rotary_factor", 1.0)):
            if cfg.get(key, fine) != fine:
                refuse(f"{key} = {cfg[key]!r} is not implemented")
        # mistral's window: exact only if no sequence is longer (checked per prompt)
        self.window = cfg.get("sliding_window") if self.type == "mistral" else None
        if self.heads % self.kv_heads or self.head_dim % 2:
            refuse(f"{self.heads} heads, {self.kv_heads} kv heads, head_dim {self.head_dim}: not implemented")
        self.scaling = cfg.get("rope_scaling")
        kind = (self.scaling or {}).get("rope_type", (self.scaling or {}).get("type", "default"))
        kinds = {"gemma3_text": ("default", "linear"), "phi3": ("default",)}.get(self.type, ("default", "llama3"))
        if kind not in kinds:
            refuse(f"rope_scaling of type {kind!r} is not implemented")
        self.inv_freq = self.rope_inv_freq(kind, self.theta)
        self.query_scalar, self.softcap = self.head_dim, None
        self.windows, self.inv_freqs = [None] * self.layers, [self.inv_freq] * self.layers  # per layer
        if self.type in ("gemma3_text", "phi3"):
            if "rope_parameters" in cfg:
                refuse("rope_parameters is not implemented (rope_theta and rope_scaling are)")
            (self.gemma3 if self.gemma else self.phi3)(cfg)

    def gemma3(self, cfg):
        """Gemma 3's sliding layers (their window and local RoPE), query scalar and softcapping."""
        if cfg.get("attn_logit_softcapping") is not None:
            refuse(f"attn_logit_softcapping = {cfg['attn_logit_softcapping']!r} is not implemented")
        if cfg.get("use_bidirectional_attention"):
            refuse("use_bidirectional_attention is not implemented")
        self.query_scalar = cfg.get("query_pre_attn_scalar", 256)
        self.softcap = cfg.get("final_logit_softcapping")
        types = cfg.get("layer_types")
        if types is None:
            pattern = cfg.get("sliding_window_pattern", 6)
            types = [GEMMA_LAYERS[(i + 1) % pattern == 0] for i in range(self.layers)]
        if len(types) != self.layers or not set(types) <= set(GEMMA_LAYERS):
            refuse(f"layer_types {types!r} are not {self.layers} of {GEMMA_LAYERS}")
        window = cfg.get("sliding_window", 4096)
        if window is None and "sliding_attention" in types:
            refuse("sliding layers without a sliding_window are not implemented")
        local = self.rope_inv_freq("default", cfg.get("rope_local_base_freq", 10000.0))
        slides = [kind == "sliding_attention" for kind in types]
        self.windows = [window if s else None for s in slides]
        self.inv_freqs = [local if s else self.inv_freq for s in slides]

    def phi3(self, cfg):
        """Phi-3's head dim (hidden_size / heads) and its window over every layer."""
        if self.heads * self.head_dim != self.dim:
            refuse(f"head_dim {self.head_dim} * {self.heads} heads is not hidden_size {self.dim}: not implemented")
        self.windows = [cfg.get("sliding_window")] * self.layers

    def rope_inv_freq(self, kind, theta):
        d = self.head_dim
        inv_freq = theta ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
        if kind == "linear":  # HF's _compute_linear_scaling_rope_parameters
            return inv_freq / self.scaling["factor"]
        if kind != "llama3":
            return inv_freq
        s = self.scaling  # HF's _compute_llama3_parameters, in float64
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old / wavelen - low) / (high - low)
        medium = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        return torch.where(wavelen < old / high, inv_freq,
                           torch.where(wavelen > old / low, inv_freq / factor, medium))

    def expected(self):
        """Every tensor's name and shape, as HF's classes hold them."""
        q, kv, t = self.heads * self.head_dim, self.kv_heads * self.head_dim, {}
        t["model.embed_tokens.weight"] = (self.vocab, self.dim)
        for l in range(self.layers):
            p = f"model.layers.{l}."
            if self.type == "phi3":
                t.update(self.phi3_layer(p, q, kv))
                continue
            for name, shape in (("input_layernorm", (self.dim,)), ("post_attention_layernorm", (self.dim,)),
                                ("self_attn.q_proj", (q, self.dim)), ("self_attn.k_proj", (kv, self.dim)),
                                ("self_attn.v_proj", (kv, self.dim)), ("self_attn.o_proj", (self.dim, q)),
                                ("mlp.gate_proj", (self.ffn, self.dim)), ("mlp.up_proj", (self.ffn, self.dim)),
                                ("mlp.down_proj", (self.dim, self.ffn))):
                t[p + name + ".weight"] = shape
                if self.bias and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                    t[p + name + ".bias"] = shape[:1]
            if self.qk_norm:
                t[p + "self_attn.q_norm.weight"] = t[p + "self_attn.k_norm.weight"] = (self.head_dim,)
            if self.gemma:
                t[p + "pre_feedforward_layernorm.weight"] = t[p + "post_feedforward_layernorm.weight"] = (self.dim,)
        t["model.norm.weight"] = (self.dim,)
        if not self.tied:
            t["lm_head.weight"] = (self.vocab, self.dim)
        return t

    def phi3_layer(self, p, q, kv):
        return {p + "input_layernorm.weight": (self.dim,), p + "post_attention_layernorm.weight": (self.dim,),
                p + "self_attn.qkv_proj.weight": (q + 2 * kv, self.dim), p + "self_attn.o_proj.weight": (self.dim, q),
                p + "mlp.gate_up_proj.weight": (2 * self.ffn, self.dim),
                p + "mlp.down_proj.weight": (self.dim, self.ffn)}


def bf16(x):
    """x rounded to float32, then to bf16 (nearest even, denormals to zero), as float64."""
    u = x.to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    u = torch.where((u & 0x7F800000) == 0, u & 0x80000000, u)
    return torch.where(u >= 1 << 31, u - (1 << 32), u).to(torch.int32).view(torch.float32).to(torch.float64)


def rms_norm(x, g, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g


def rope(x, cos, sin):  # x [T, heads, D]; pairs (i, i + D/2)
    a, b = x.chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def rotation(inv_freq, t):  # cos, sin [T, 1, D/2] of positions 0..t-1
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return angle.cos()[:, None, :], angle.sin()[:, None, :]


def attention_mask(t, window):  # causal; with a window, only keys with q - k < window
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    if window is None:
        return causal
    pos = torch.arange(t)
    return causal & (pos[:, None] - pos[None, :] < window)


def forward(w, m, tokens, matmul_input=lambda x: x):
    """Logits of the last token of `tokens`; each matmul's input rows pass matmul_input first."""
    def linear(x, name, bias=False):
        y = matmul_input(x) @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y  # the bias after the product, unrounded

    def norm(x, name):  # Gemma's RMSNorm scales by 1 + w
        return rms_norm(x, 1 + w[name] if m.gemma else w[name], m.eps)

    def qkv(n, p):
        if m.type != "phi3":
            return [linear(n, p + f"self_attn.{x}_proj", m.bias) for x in "qkv"]
        y, q, kv = linear(n, p + "self_attn.qkv_proj"), m.heads * m.head_dim, m.kv_heads * m.head_dim
        return y[:, :q], y[:, q:q + kv], y[:, q + kv:]  # fused: q rows, then k, then v

    def attention(n, p, l):
        q, k, v = qkv(n, p)
        q = q.reshape(t, m.heads, m.head_dim)
        k, v = k.reshape(t, m.kv_heads, m.head_dim), v.reshape(t, m.kv_heads, m.head_dim)
        if m.qk_norm:  # qwen3, gemma3: per head, before RoPE
            q, k = norm(q, p + "self_attn.q_norm.weight"), norm(k, p + "self_attn.k_norm.weight")
        cos, sin = rotations[l]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # kv head j: j*group..
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(m.query_scalar)
        s = s.masked_fill(~masks[l], -math.inf).softmax(dim=-1)
        o = torch.einsum("hqk,khd->qhd", s, v).reshape(t, m.heads * m.head_dim)
        return linear(o, p + "self_attn.o_proj")

    def mlp(n, p):
        if m.type == "phi3":
            g, u = linear(n, p + "mlp.gate_up_proj").chunk(2, dim=-1)  # fused: gate rows, then up
        else:
            g, u = linear(n, p + "mlp.gate_proj"), linear(n, p + "mlp.up_proj")
        return linear((gelu_tanh(g) if m.gemma else torch.nn.functional.silu(g)) * u, p + "mlp.down_proj")

    t, group = len(tokens), m.heads // m.kv_heads
    h = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    if m.gemma:
        h = h * m.dim ** 0.5
    rotations = [rotation(f, t) for f in m.inv_freqs]  # per layer
    masks = [attention_mask(t, window) for window in m.windows]
    for l in range(m.layers):
        p = f"model.layers.{l}."
        if m.gemma:  # each branch's output normed before its residual add
            a = attention(norm(h, p + "input_layernorm.weight"), p, l)
            h = h + norm(a, p + "post_attention_layernorm.weight")
            f = mlp(norm(h, p + "pre_feedforward_layernorm.weight"), p)
            h = h + norm(f, p + "post_feedforward_layernorm.weight")
        else:
            h = h + attention(norm(h, p + "input_layernorm.weight"), p, l)
            h = h + mlp(norm(h, p + "post_attention_layernorm.weight"), p)
    head = w["model.embed_tokens.weight"] if m.tied else w["lm_head.weight"]
    logits = matmul_input(norm(h[-1], "model.norm.weight")) @ head.T
    return logits if m.softcap is None else m.softcap * torch.tanh(logits / m.softcap)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", nargs="+", help="the run directories (rank-R.jsonl files), each held to the reference")
    p.add_argument("--model", required=True, help="a Hugging Face model directory")
    p.add_argument("--prompts", required=True)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--tol", type=float, default=1e-4, help="bound on max |logit diff|")
    p.add_argument("--rtol", type=float, help="bound on max |logit diff| / max |logit| of the float64 row")
    p.add_argument("--matmul-input", choices=("fp32", "bf16"), default="fp32")
    c = p.parse_args()
    m = Model(c.model)
    w = read_weights(c.model)
    want = m.expected()
    if {n: tuple(x.shape) for n, x in w.items()} != want:
        odd = sorted(n for n in set(w) | set(want) if n not in w or n not in want or tuple(w[n].shape) != want[n])
        refuse(f"{c.model}: the tensors are not those of a {m.type} of this config: {', '.join(odd[:5])}")
    matmul_input = bf16 if c.matmul_input == "bf16" else (lambda x: x)
    runs = []
    for directory in c.run:
        run = {}
        for path in glob.glob(os.path.join(directory, "rank-*.jsonl")):
            with open(path) as f:
                for line in f:
                    r = json.loads(line)
                    run[json.dumps(r["id"])] = r
        runs.append(run)
    worst, worst_rel, bad = 0.0, 0.0, []
    with open(c.prompts) as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    for prompt in prompts:
        key = json.dumps(prompt["id"])
        if m.window is not None and len(prompt["tokens"]) + c.tokens > m.window:
            refuse(f"prompt {key} and {c.tokens} tokens outgrow sliding_window {m.window}: not implemented")
        seq = list(prompt["tokens"])
        for step in range(c.tokens):  # float64's own greedy history; each run's logits against it
            logits = forward(w, m, seq, matmul_input)
            peak = max(float(logits.abs().max()), 1e-30)
            for run in runs:
                got = run.get(key)
                if got is not None and step < len(got["logits"]):
                    diff = float((logits - torch.tensor(got["logits"][step], dtype=torch.float64)).abs().max())
                    worst = max(worst, diff)
                    worst_rel = max(worst_rel, diff / peak)
            seq.append(int(logits.argmax()))
        for directory, run in zip(c.run, runs):
            got = run.get(key)
            if got is None:
                bad.append(f"{directory}: prompt {key} is missing from the run")
            elif len(got["logits"]) != c.tokens:
                bad.append(f"{directory}: prompt {key}: the run has {len(got['logits'])} rows of logits, not {c.tokens}")
            elif seq[len(prompt["tokens"]):] != got["tokens"]:
                bad.append(f"{directory}: prompt {key}: tokens {seq[len(prompt['tokens']):]} (float64) against {got['tokens']}")
    ok = not bad and worst <= c.tol and (c.rtol is None or worst_rel <= c.rtol)
    bounds = f"tolerance {c.tol:g}" + ("" if c.rtol is None else f", relative {c.rtol:g}")
    print(f"hf_reference: {m.type} ({c.model}), {len(runs)} run(s), {len(prompts)} prompts, {c.tokens} tokens each, "
          f"max |logit diff| against float64 {worst:.3g} ({worst_rel:.3g} of the row's largest |logit|), {bounds}: "
          f"{'match' if ok else 'MISMATCH'}")
    for line in bad[:10]:
        print("hf_reference:", line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
