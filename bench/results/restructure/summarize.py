"""The A/B table of ab.sh's JSON lines: per benchmark and configuration, the median of each
build's rounds and new/old (a time, below 1 is faster; a GFLOP/s rate, above 1 is faster).
    python3 bench/results/restructure/summarize.py DIR"""
import json, statistics, sys, pathlib

d = pathlib.Path(sys.argv[1])
# per benchmark: the fields naming a configuration, and the time to compare
SPEC = {
    "ring": (("mask", "dtype", "kv_heads"), "seconds"),
    "api": (("measure",), None),
    "decode": (("context", "dtype", "steps"), "latency_ms_median"),
}
rows = []
for f in sorted(d.glob("*.jsonl")):
    bench = f.stem
    keys, metric = SPEC[bench]
    groups = {}
    for line in f.read_text().splitlines():
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        fields = [metric] if metric else [k for k in ("call_ms_median", "overhead_ms_median", "later_calls_gflops_median") if k in j]
        for m in fields:
            if m not in j:
                continue
            cfg = tuple(str(j.get(k, "")) for k in keys) + (m,)
            groups.setdefault(cfg, {}).setdefault(j["build"], []).append(j[m])
    for cfg, b in sorted(groups.items()):
        if "old" in b and "new" in b:
            o, n = statistics.median(b["old"]), statistics.median(b["new"])
            rows.append((bench, " ".join(cfg), o, n, n / o if o else float("nan"), len(b["old"])))
print("| bench | configuration, metric | old median | new median | new/old | rounds |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.4g} | {r[3]:.4g} | {r[4]:.3f} | {r[5]} |")
