#!/usr/bin/python3
"""The float64 log probabilities of a llama2.c model's reply, to check the endpoint's logprobs.

Reads the checkpoint as tools/convert_llama2c.py does (q/k rows turned to rotate-half) and
runs tools/reference.py's float64 model (each step the whole sequence recomputed, no ring,
no cache). For each generated token: the log softmax of the logits it was chosen from at the
chosen id, and the `top` most likely (id, log probability), largest first. Prints JSON.
  logprob_reference.py MODEL.bin --prompt '[1, 403, ...]' --generated '[432, ...]' [--top 5]
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--prompt", required=True)
    p.add_argument("--generated", required=True)
    p.add_argument("--top", type=int, default=5)
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
