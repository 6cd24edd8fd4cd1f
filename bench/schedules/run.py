#!/usr/bin/env python3
"""Ring vs Ulysses vs hybrid, measured and predicted (issue 29's crossover).

Starts P rank processes on loopback (the Python module, `ringattn.Ring` in each), and for
every group size G dividing P (G = 1: the ring; G = P: Ulysses; between: the hybrid, Ulysses
inside groups of G, the ring across) and every context N times forward() — the slowest
rank's wall time of a call, median over --reps after a warm-up. Beside each it prints what
`ringattn plan` predicts for the same shape from the same run's F (a rank's useful FLOP/s in
the ring's kernel, measured here) and B (`ringattn bench transport`'s loopback GB/s,
measured here), and writes every row as JSON lines, a Markdown table and an SVG plot of
measured vs predicted seconds.

    PYTHONPATH=build/python /usr/bin/python3 bench/schedules/run.py --nodes 4 \\
        --seqs 4096,8192,16384 --out bench/results/schedules/loopback-p4

On a machine with fewer cores than P the ranks share them: F is then a rank's share, and
the report says so. The prediction is the planner's, without a mask.

On shaped links between every pair of ranks (deploy/netns/testbed.sh --topology switch: one
namespace a rank, each rank's uplink and downlink shaped), the testbed fills in the ranks'
addresses, the launch prefix and the links' payload rate, which is then B:

    deploy/netns/testbed.sh --nodes 4 --topology switch --link 1gbit -- /usr/bin/env \
        PYTHONPATH=build/python /usr/bin/python3 bench/schedules/run.py --nodes 4 \
        --hosts {hosts} --launch "{launch}" --bandwidth {payload} --link "{link}" --out ...
"""
import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WORKER = r"""
import json, sys, time
import numpy as np
import ringattn
a = json.loads(sys.argv[1])
r, P, G = a["rank"], a["nodes"], a["group"]
schedule = "ring" if G == 1 else "ulysses" if G == P else "hybrid"
with ringattn.Ring(rank=r, world_size=P, peers=a["peers"], token=a["token"], threads=1, timeout=600,
                   connect_timeout=120, all_pairs=True, group_size=G, max_rows=a["max_rows"],
                   max_heads=a["heads"], max_kv_heads=a["kv_heads"], max_head_dim=a["head_dim"]) as ring:
    rng = np.random.default_rng(r)
    for n in a["seqs"]:
        pos = ringattn.shard_positions("zigzag", n, P, r)
        q = rng.standard_normal((len(pos), a["heads"], a["head_dim"]), dtype=np.float32)
        k = rng.standard_normal((len(pos), a["kv_heads"], a["head_dim"]), dtype=np.float32)
        v = rng.standard_normal((len(pos), a["kv_heads"], a["head_dim"]), dtype=np.float32)
        for rep in range(a["reps"] + 1):
            ring.all_reduce(np.zeros(1, dtype=np.float32))  # start together
            t0 = time.perf_counter()
            ring.forward(q, k, v, positions=pos, dtype=a["dtype"], schedule=schedule)
            wall = time.perf_counter() - t0
            if rep:
                print(json.dumps({"rank": r, "group": G, "seq": n, "rep": rep, "wall": wall, **ring.last_stats}),
                      flush=True)
"""


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_group(args, group):
    token = secrets.token_hex(16)
    peers = args.hosts.split(",") if args.hosts else [f"127.0.0.1:{p}" for p in free_ports(args.nodes)]
    if len(peers) != args.nodes:
        raise SystemExit(f"schedules: --hosts lists {len(peers)} addresses for --nodes {args.nodes}")
    common = {"nodes": args.nodes, "group": group, "peers": peers, "token": token,
              "seqs": args.seqs, "reps": args.reps, "heads": args.heads, "kv_heads": args.kv_heads,
              "head_dim": args.head_dim, "dtype": args.dtype, "max_rows": max(args.seqs)}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launch = lambda r: args.launch.replace("{rank}", str(r)).split() if args.launch else []
    procs = [subprocess.Popen(launch(r) + [sys.executable, "-c", WORKER, json.dumps(dict(common, rank=r))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(args.nodes)]
    rows, failed = [], []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=args.timeout)
            if p.returncode != 0:
                failed.append(f"rank {r} (exit {p.returncode}):\n{err[-2000:]}")
            rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if failed:  # every failed rank's story: the first to fail is not always the first listed
            raise SystemExit(f"schedules: groups of {group} failed on {len(failed)} rank(s):\n" + "\n".join(failed))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return rows


def measure_bandwidth(ringattn_bin):
    out = subprocess.run([ringattn_bin, "bench", "transport", "--block-bytes", "8M", "--reps", "3", "--no-iperf",
                          "--no-raw"], capture_output=True, text=True, timeout=300, check=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if not d.get("tls") and "gb_per_s" in d:
                return d["gb_per_s"] * 1e9
    raise SystemExit("schedules: no bandwidth in `bench transport`'s output:\n" + out)


def predict(ringattn_bin, args, n, flops, bandwidth):
    out = subprocess.run([ringattn_bin, "plan", "--json", "--seq", str(n), "--nodes", str(args.nodes), "--heads",
                          str(args.heads), "--kv-heads", str(args.kv_heads), "--head-dim", str(args.head_dim),
                          "--dtype", args.dtype, "--layers", "1", "--flops", f"{flops:.6g}", "--bandwidth",
                          f"{bandwidth:.6g}"], capture_output=True, text=True, timeout=60, check=True).stdout
    sched = json.loads(out)["schedules"]
    res = {}
    for key, c in sched.items():
        if isinstance(c, dict) and c.get("possible"):
            res[c["group"]] = c["seconds"]
    return res


def svg(rows, path, title):
    w, h, m = 720, 420, 60
    xs = sorted({r["seq"] for r in rows})
    ymax = max(max(r["measured"], r["predicted"] or 0) for r in rows) * 1.1
    def X(n):
        return m + (w - 2 * m) * (xs.index(n) / max(1, len(xs) - 1))
    def Y(t):
        return h - m - (h - 2 * m) * t / ymax
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<text x="{w/2}" y="20" text-anchor="middle">{title}</text>',
             f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
             f'<text x="{w/2}" y="{h-20}" text-anchor="middle">context N (tokens)</text>',
             f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">seconds per forward</text>']
    for n in xs:
        parts.append(f'<text x="{X(n)}" y="{h-m+15}" text-anchor="middle">{n}</text>')
    for i in range(5):
        t = ymax * i / 4
        parts.append(f'<text x="{m-5}" y="{Y(t)+4}" text-anchor="end">{t:.2g}</text>')
    for i, g in enumerate(sorted({r["group"] for r in rows})):
        c = colors[i % len(colors)]
        pts = sorted((r["seq"], r["measured"], r["predicted"]) for r in rows if r["group"] == g)
        parts.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                     % (c, " ".join(f"{X(n)},{Y(t)}" for n, t, _ in pts)))
        pp = [(n, p) for n, _, p in pts if p]
        if pp:
            parts.append('<polyline fill="none" stroke="%s" stroke-dasharray="5,4" points="%s"/>'
                         % (c, " ".join(f"{X(n)},{Y(p)}" for n, p in pp)))
        parts.append(f'<text x="{w-m+5}" y="{m + 16*i}" fill="{c}">G={g} {"ring" if g == 1 else ""}</text>')
    parts.append(f'<text x="{m+5}" y="{m-10}">solid: measured; dashed: ringattn plan</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--seqs", default="4096,8192,16384")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=3000)
    ap.add_argument("--ringattn", default=os.path.join(ROOT, "build", "ringattn"))
    ap.add_argument("--hosts", help="every rank's HOST:PORT, comma-separated (default: free loopback ports)")
    ap.add_argument("--launch", help="a prefix each rank's process starts under, {rank} its rank (the netns testbed's)")
    ap.add_argument("--bandwidth", type=float, help="B in bytes/s for the predictions (default: bench transport on loopback)")
    ap.add_argument("--groups", help="only these group sizes, comma-separated (default: every one dividing --nodes)")
    ap.add_argument("--link", default="loopback", help="what the ranks' links are, for the report")
    ap.add_argument("--out", required=True, help="path prefix of the .jsonl, .md and .svg written")
    args = ap.parse_args()
    args.seqs = [int(x) for x in args.seqs.split(",")]
    groups = [g for g in range(1, args.nodes + 1) if args.nodes % g == 0 and args.heads % g == 0]
    if args.groups:
        groups = [g for g in groups if g in {int(x) for x in args.groups.split(",")}]
    if args.bandwidth:
        bandwidth, b_note = args.bandwidth, f"the shaped links' payload rate ({args.link})"
    else:
        print(f"schedules: measuring the loopback bandwidth", file=sys.stderr)
        bandwidth, b_note = measure_bandwidth(args.ringattn), "bench transport, measured"
    measured = {}
    flops = None
    for g in groups:
        print(f"schedules: groups of {g} ({time.strftime('%H:%M:%S')})", file=sys.stderr)
        rows = run_group(args, g)
        for n in args.seqs:
            walls = {}
            for r in rows:
                if r["seq"] == n:
                    walls.setdefault(r["rep"], []).append(r["wall"])
            measured[(g, n)] = statistics.median(max(v) for v in walls.values())
        if g == 1:  # F: a rank's useful FLOP/s in the ring's kernel, at the largest context
            big = [r for r in rows if r["seq"] == max(args.seqs) and r["compute_seconds"] > 0]
            flops = statistics.median(r["useful_flops"] / r["compute_seconds"] for r in big)
    cores = os.cpu_count()
    out_rows = []
    for n in args.seqs:
        pred = predict(args.ringattn, args, n, flops, bandwidth)
        for g in groups:
            out_rows.append({"nodes": args.nodes, "cores": cores, "group": g, "seq": n, "heads": args.heads,
                             "kv_heads": args.kv_heads, "head_dim": args.head_dim, "dtype": args.dtype,
                             "measured": measured[(g, n)], "predicted": pred.get(g), "flops": flops,
                             "bandwidth": bandwidth, "link": args.link})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".jsonl", "w") as f:
        for r in out_rows:
            f.write(json.dumps(r) + "\n")
    lines = [f"P = {args.nodes} rank processes on {cores} cores ({args.link}), heads {args.heads}/{args.kv_heads}, "
             f"head_dim {args.head_dim}, {args.dtype}, no mask; F = {flops/1e9:.1f} GFLOP/s a rank (measured), "
             f"B = {bandwidth/1e9:.3f} GB/s ({b_note})", "",
             "| N | schedule | measured s | predicted s | measured / predicted | fastest measured | fastest predicted |",
             "|---|---|---|---|---|---|---|"]
    for n in args.seqs:
        rs = [r for r in out_rows if r["seq"] == n]
        best_m = min(rs, key=lambda r: r["measured"])["group"]
        best_p = min((r for r in rs if r["predicted"]), key=lambda r: r["predicted"])["group"]
        for r in rs:
            name = "ring" if r["group"] == 1 else "Ulysses" if r["group"] == args.nodes else f"hybrid, groups of {r['group']}"
            ratio = r["measured"] / r["predicted"] if r["predicted"] else float("nan")
            lines.append(f"| {n} | {name} | {r['measured']:.3f} | {r['predicted']:.3f} | {ratio:.2f} | "
                         f"{'yes' if r['group'] == best_m else ''} | {'yes' if r['group'] == best_p else ''} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    svg(out_rows, args.out + ".svg", f"ring vs Ulysses vs hybrid, P = {args.nodes} on {cores} cores, {args.link}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
