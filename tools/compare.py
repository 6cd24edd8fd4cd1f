#!/usr/bin/env python3
"""Compares two runs of the infer job: every prompt's generated tokens exactly, its logits
to a tolerance. Each run is a directory of rank-R.jsonl files (any number of ranks); the
lines are merged by prompt id. Prints one line with the largest logit difference; exits 1
if a prompt is missing, a token differs or a logit differs by more than --tol (with
--relative: more than --tol times the largest |logit| of the reference's row).
  compare.py REFERENCE_DIR OTHER_DIR [--tol 1e-4] [--relative]
"""
import argparse
import glob
import json
import os
import sys


def load(directory):
    runs = {}
    files = sorted(glob.glob(os.path.join(directory, "rank-*.jsonl")))
    if not files:
        sys.exit(f"compare: no rank-*.jsonl in {directory}")
    for path in files:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                key = json.dumps(r["id"])
                if key in runs:
                    sys.exit(f"compare: prompt {key} is in two files of {directory}")
                runs[key] = r
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reference")
    p.add_argument("other")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--relative", action="store_true", help="each row's difference over its largest |logit|")
    a = p.parse_args()
    ref, other = load(a.reference), load(a.other)
    problems = []
    if ref.keys() != other.keys():
        problems.append(f"prompts differ: only in reference {sorted(ref.keys() - other.keys())}, "
                        f"only in other {sorted(other.keys() - ref.keys())}")
    worst, where, tokens_differ = 0.0, "everywhere", 0
    for key in sorted(ref.keys() & other.keys()):
        r, o = ref[key], other[key]
        if r["tokens"] != o["tokens"]:
            tokens_differ += 1
            problems.append(f"prompt {key}: tokens {r['tokens']} against {o['tokens']}")
        for step, (lr, lo) in enumerate(zip(r["logits"], o["logits"])):
            if len(lr) != len(lo):
                problems.append(f"prompt {key} step {step}: {len(lr)} logits against {len(lo)}")
                continue
            d = max(abs(x - y) for x, y in zip(lr, lo))
            if a.relative:
                d /= max(max(abs(x) for x in lr), 1e-30)
            if d > worst or d != d:
                worst, where = d, f"prompt {key} step {step}"
        if len(r["logits"]) != len(o["logits"]):
            problems.append(f"prompt {key}: {len(r['logits'])} logit rows against {len(o['logits'])}")
    ok = not problems and worst <= a.tol
    what = "max |logit diff| / max |logit| of its row" if a.relative else "max |logit diff|"
    print(f"compare: {len(ref)} prompts, tokens differ in {tokens_differ}, {what} {worst:.3g}"
          f" ({where}), tolerance {a.tol:g}: {'match' if ok else 'MISMATCH'}")
    for line in problems[:10]:
        print("compare:", line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
