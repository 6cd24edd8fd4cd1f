#!/usr/bin/python3
"""The float64 log probabilities of a llama2.c model's reply, to check the endpoint's logprobs.

Reads the checkpoint as tools/convert_llama2c.py does (q/k rows turned to rotate-half) and
runs tools/reference.py's float64 model (each step the whole sequence recomputed, no ring,
no cache). For each generated token: the log softmax of the logits it was chosen from at the
chosen id, and the `top` most likely (id, log probability), largest first. Prints JSON.
  logprob_reference.py MODEL.bin --prompt '[1, 403, ...]' --generated '[432, ...]' [--top 5]
With --greedy N instead of --generated: chooses N tokens greedily from the logits shaped as
OpenAI's logit_bias and penalties shape them (--bias '{"id": b}', --presence P,
--frequency F; counts over the generated tokens) and prints {"ids": [...], "text": ...}, the
text from the llama2.c tokenizer file --tokenizer (its pieces; the first after BOS without
its leading space, as run.c prints).
"""
import argparse
import json
import os
import sys
from types import SimpleNamespace

import numpy as np

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)
from convert_llama2c import read_llama2c, rotate_half  # noqa: E402
from reference import forward  # noqa: E402


def pieces(path):
    """A llama2.c tokenizer file's pieces: int32 max length, then per token f32 score, int32 length, bytes."""
    raw = open(path, "rb").read()
    off, out = 4, []
    while off < len(raw):
        n = int.from_bytes(raw[off + 4:off + 8], "little")
        out.append(raw[off + 8:off + 8 + n])
        off += 8 + n
    return out


def shaped_greedy(w, c, seq, a):
    bias = {int(k): float(v) for k, v in json.loads(a.bias).items()}
    counts, ids = {}, []
    for _ in range(a.greedy):
        logits = forward(w, c, np.array(seq)).copy()
        for i, b in bias.items():
            logits[i] += b
        for i, n in counts.items():
            logits[i] -= n * a.frequency + a.presence
        t = int(np.argmax(logits))
        ids.append(t)
        counts[t] = counts.get(t, 0) + 1
        seq.append(t)
    text = b""
    if a.tokenizer:
        p = pieces(a.tokenizer)
        for i, t in enumerate(ids):
            piece = p[t]
            if i == 0 and len(seq) - len(ids) == 1 and piece.startswith(b" "):
                piece = piece[1:]
            text += piece
    return {"ids": ids, "text": text.decode("utf-8", "replace")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--prompt", required=True)
    p.add_argument("--generated")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--greedy", type=int)
    p.add_argument("--bias", default="{}")
    p.add_argument("--presence", type=float, default=0)
    p.add_argument("--frequency", type=float, default=0)
    p.add_argument("--tokenizer")
    a = p.parse_args()
    s, t = read_llama2c(a.model)
    w = {}
    for name, x in t.items():
        if name.endswith("q_proj.weight"):
            x = rotate_half(x, s["heads"])
        elif name.endswith("k_proj.weight"):
            x = rotate_half(x, s["kv_heads"])
        w[name] = np.asarray(x, dtype=np.float64)
    c = SimpleNamespace(layers=s["layers"], heads=s["heads"], kv_heads=s["kv_heads"], head_dim=s["dim"] // s["heads"],
                        untied=s["untied"])
    seq = list(json.loads(a.prompt))
    if a.greedy is not None:
        json.dump(shaped_greedy(w, c, seq, a), sys.stdout)
        return
    out = []
    for token in json.loads(a.generated):
        logits = forward(w, c, np.array(seq))
        m = logits.max()
        lse = m + np.log(np.exp(logits - m).sum())
        lp = logits - lse
        order = sorted(range(len(lp)), key=lambda i: (-lp[i], i))[:a.top]
        out.append({"token": token, "logprob": float(lp[token]), "top": [[i, float(lp[i])] for i in order]})
        seq.append(token)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
