#!/usr/bin/env python3
"""Medians of an A/B run (bench/ab/run.sh): per config, A's and B's median of the figure
that config times (the ring's `seconds`, decode's `latency_ms_median`), B/A of the medians,
and the median of the rounds' own B/A (each round ran A and B back to back: the pairing
keeps a drift of the machine's speed out of the ratio), as a Markdown table."""
import json
import statistics
import sys

FIGURE = {"ring": "seconds", "decode": "latency_ms_median"}


def main(path):
    runs = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        d = json.loads(line)
        if d.get("bench") not in FIGURE:
            continue
        key = d["ab_config"]
        runs.setdefault(key, {"A": [], "B": []})[d["ab_side"]].append(d[FIGURE[d["bench"]]])
    print("| config | A median | B median | B / A of the medians | median of the rounds' B / A | rounds |")
    print("|---|---|---|---|---|---|")
    for key, r in runs.items():
        if not r["A"] or not r["B"]:
            continue
        a, b = statistics.median(r["A"]), statistics.median(r["B"])
        paired = statistics.median(y / x for x, y in zip(r["A"], r["B"]))
        print(f"| {key} | {a:.4g} | {b:.4g} | {b / a:.3f} | {paired:.3f} | {min(len(r['A']), len(r['B']))} |")


if __name__ == "__main__":
    main(sys.argv[1])
