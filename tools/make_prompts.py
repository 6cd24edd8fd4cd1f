#!/usr/bin/env python3
"""Writes a batch of prompts for the infer job: one {"id": ..., "tokens": [...]} per line.

Token ids are drawn from Python's random.Random(seed) (Mersenne Twister, the same on
every platform), so a batch is reproducible from its arguments.
  make_prompts.py --lengths 5,200,37 --vocab 256 --seed 1 --out prompts.jsonl
"""
import argparse
import json
import random


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", required=True, help="comma-separated prompt lengths")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w") as f:
        for i, n in enumerate(int(x) for x in a.lengths.split(",")):
            tokens = [rng.randrange(a.vocab) for _ in range(n)]
            f.write(json.dumps({"id": f"prompt-{i}", "tokens": tokens}) + "\n")


if __name__ == "__main__":
    main()
