#!/usr/bin/env python3
"""The backward ring against its forward and against PyTorch + gloo, in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/ring/backward.py [--seq 16384] [--nodes 2]
        [--heads 8] [--kv-heads 8] [--head-dim 128] [--dtypes fp32,bf16] [--reps 3] [--torch-reps 1]
        [--no-torch] [--check]

P rank processes on loopback, one thread each (OMP_NUM_THREADS=1), causal zigzag shards:

  ringattn  Ring.forward then Ring.backward (the module, ringattn.Ring): median over reps of
            the slowest rank's time for each; exposed wait = the backward's wait_seconds;
            peak RSS during the backward (VmHWM after resetting it, /proc/self/clear_refs)
            against the shard model: Q, K, V, O, dO, dQ, dK, dV shards plus two K/V blocks in
            flight with their fp32 accumulators.
  torch     the same attention as a torch.autograd.Function over a gloo ring with the same
            schedule (K/V sent ahead, each block's dK/dV accumulators one hop behind), block
            math in torch ops per head (S = QKᵀ, masked softmax with lse merging; backward
            recomputes P from lse), torch.set_num_threads(1): what a PyTorch user without
            ringattn would write, timed the same way (forward, then loss.backward()).

Prints one JSON object per dtype on stdout (progress on stderr); the machine and command are
in every row. Inputs: row r of every tensor drawn from numpy's default_rng([seed, r]), so every
rank builds only its own rows and both implementations see the same numbers.
"""
import argparse
import json
import os
import platform
import secrets
import shlex
import socket
import subprocess
import sys
import time

import numpy as np

HERE = os.path.abspath(__file__)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def rows_of(seed, positions, width):
    out = np.empty((len(positions), width), np.float32)
    for i, p in enumerate(positions):
        out[i] = np.random.default_rng([seed, int(p)]).standard_normal(width, dtype=np.float32)
    return out


def status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def shard_inputs(a, pos):
    hd, kd = a.heads * a.head_dim, a.kv_heads * a.head_dim
    q = rows_of(1, pos, hd).reshape(len(pos), a.heads, a.head_dim)
    k = rows_of(2, pos, kd).reshape(len(pos), a.kv_heads, a.head_dim)
    v = rows_of(3, pos, kd).reshape(len(pos), a.kv_heads, a.head_dim)
    w = rows_of(4, pos, hd).reshape(len(pos), a.heads, a.head_dim)  # dO
    return q, k, v, w


def worker_ringattn(a):
    import ringattn

    base_kib = status_kib("VmRSS")
    pos = ringattn.shard_positions("zigzag", a.seq, a.nodes, a.rank)
    q, k, v, w = shard_inputs(a, pos)
    res = []
    with ringattn.Ring(rank=a.rank, world_size=a.nodes, peers=a.peers.split(","), token=a.token, threads=1,
                       timeout=600, connect_timeout=60) as ring:
        for rep in range(a.reps + 1):
            t0 = time.perf_counter()
            o, lse = ring.forward(q, k, v, positions=pos, causal=True, dtype=a.dtype)
            fwd = time.perf_counter() - t0
            fwd_compute = ring.last_stats["compute_seconds"]
            reset_peak_rss()
            t0 = time.perf_counter()
            dq, dk, dv = ring.backward(q, k, v, o, lse, w, positions=pos, causal=True, dtype=a.dtype)
            bwd = time.perf_counter() - t0
            st = ring.last_backward_stats
            peak = status_kib("VmHWM")
            if a.save and rep == a.reps:
                np.savez(a.save, dq=dq, dk=dk, dv=dv)
            del dq, dk, dv
            if rep:  # the first is a warm-up
                res.append(dict(forward=fwd, backward=bwd, wait=st["wait_seconds"], compute=st["compute_seconds"],
                                forward_compute=fwd_compute,
                                bytes=st["bytes_sent"], flops=st["useful_flops"], peak_kib=peak))
            print(f"rank {a.rank} rep {rep}: forward {fwd:.2f} s, backward {bwd:.2f} s", file=sys.stderr, flush=True)
    b = len(pos)
    s = 2 if a.dtype == "bf16" else 4
    hd, kd = a.heads * a.head_dim, a.kv_heads * a.head_dim
    # The shard model: the caller's fp32 arrays, then two blocks in flight with accumulators.
    model = (4 * b * hd + 4 * b * kd) * 4 + 2 * b * a.heads * 4 + 2 * (2 * b * kd * s + 2 * b * kd * 4)
    print(json.dumps(dict(reps=res, model_bytes=model, base_kib=base_kib)), flush=True)


def worker_torch(a):
    import torch
    import torch.distributed as dist
    import ringattn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.nodes)
    P, r = a.nodes, a.rank
    succ, pred = (r + 1) % P, (r - 1) % P
    shard_pos = [torch.as_tensor(ringattn.shard_positions("zigzag", a.seq, P, i)) for i in range(P)]
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    scale = 1.0 / a.head_dim ** 0.5
    G = a.heads // a.kv_heads

    def exchange(send, recv):
        return [dist.isend(send, succ), dist.irecv(recv, pred)]

    class TorchRing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            b = q.shape[0]
            qpos = shard_pos[r]
            o = torch.zeros(b, a.heads, a.head_dim)
            lse = torch.full((a.heads, b), -float("inf"))
            kv = torch.stack([k, v]).contiguous()
            for s in range(P):
                origin = (r - s) % P
                if s + 1 < P:
                    nxt = torch.empty_like(kv)
                    reqs = exchange(kv, nxt)
                visible = shard_pos[origin][None, :] <= qpos[:, None]
                if visible.any():
                    for h in range(a.heads):
                        qh, kh, vh = q[:, h], kv[0][:, h // G], kv[1][:, h // G]
                        sc = (qh @ kh.T).float() * scale
                        sc.masked_fill_(~visible, -float("inf"))
                        blk = torch.logsumexp(sc, dim=1)
                        p = torch.exp(sc - blk[:, None]).nan_to_num_(0.0)
                        ob = (p.to(dt) @ vh).float()
                        new = torch.logaddexp(lse[h], blk)
                        a_old = torch.exp(lse[h] - new).nan_to_num_(0.0)
                        a_blk = torch.exp(blk - new).nan_to_num_(0.0)
                        o[:, h] = o[:, h] * a_old[:, None] + ob * a_blk[:, None]
                        lse[h] = new
                if s + 1 < P:
                    for req in reqs:
                        req.wait()
                    kv = nxt
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, d_o):
            q, k, v, o, lse = ctx.saved_tensors
            qpos = shard_pos[r]
            delta = (d_o * o).sum(-1)  # [b, H]
            dq = torch.zeros(q.shape)
            kv = torch.stack([k, v]).contiguous()
            do_dt = d_o.to(dt)
            grads_req = None
            for s in range(P):
                origin = (r - s) % P
                if s + 1 < P:
                    nxt = torch.empty_like(kv)
                    reqs = exchange(kv, nxt)
                nk = kv.shape[1]
                acc = torch.zeros(2, nk, a.kv_heads, a.head_dim)
                visible = shard_pos[origin][None, :] <= qpos[:, None]
                if visible.any():
                    for h in range(a.heads):
                        g = h // G
                        qh, kh, vh = q[:, h], kv[0][:, g], kv[1][:, g]
                        sc = (qh @ kh.T).float() * scale
                        p = torch.exp(sc - lse[h][:, None]).masked_fill_(~visible, 0.0)
                        acc[1][:, g] += (p.to(dt).T @ do_dt[:, h]).float()
                        dp = (do_dt[:, h] @ vh.T).float()
                        ds = (p * (dp - delta[:, h][:, None]) * scale).to(dt)
                        dq[:, h] += (ds @ kh).float()
                        acc[0][:, g] += (ds.T @ qh).float()
                if s > 0:
                    for req in grads_req:
                        req.wait()
                    acc += incoming
                incoming = torch.empty_like(acc)
                grads_req = exchange(acc, incoming)
                if s + 1 < P:
                    for req in reqs:
                        req.wait()
                    kv = nxt
            for req in grads_req:
                req.wait()
            return dq.to(dt), incoming[0].to(dt), incoming[1].to(dt)

    pos = shard_pos[r].numpy()
    q, k, v, w = (torch.from_numpy(x) for x in shard_inputs(a, pos))
    q, k, v = (x.to(dt).requires_grad_() for x in (q, k, v))
    res = []
    for rep in range(a.reps):  # no warm-up: each rep takes minutes, and starting cold costs little
        dist.barrier()
        t0 = time.perf_counter()
        o = TorchRing.apply(q, k, v)
        fwd = time.perf_counter() - t0
        loss = (o * w).sum()
        t0 = time.perf_counter()
        loss.backward()
        bwd = time.perf_counter() - t0
        if a.save and rep == a.reps - 1:
            np.savez(a.save, **{n: x.grad.float().numpy() for n, x in (("dq", q), ("dk", k), ("dv", v))})
        for x in (q, k, v):
            x.grad = None
        res.append(dict(forward=fwd, backward=bwd))
        print(f"torch rank {r} rep {rep}: forward {fwd:.2f} s, backward {bwd:.2f} s", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    print(json.dumps(dict(reps=res)), flush=True)


def run_ranks(a, role, dtype, save_dir=None, reps=None):
    ports = free_ports(a.nodes + 1)
    peers = ",".join(f"127.0.0.1:{p}" for p in ports[:-1])
    token = secrets.token_hex(16)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for r in range(a.nodes):
        cmd = [sys.executable, HERE, "--worker", role, "--rank", str(r), "--nodes", str(a.nodes), "--peers", peers,
               "--port", str(ports[-1]), "--token", token, "--dtype", dtype, "--seq", str(a.seq), "--heads",
               str(a.heads), "--kv-heads", str(a.kv_heads), "--head-dim", str(a.head_dim), "--reps", str(a.reps if reps is None else reps)]
        if save_dir:
            cmd += ["--save", os.path.join(save_dir, f"{role}{r}.npz")]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=3600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, p in enumerate(procs):
        if p.returncode != 0:
            raise SystemExit(f"backward.py: {role} rank {r} failed (exit {p.returncode})")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def median(xs):
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 2]


def slowest(ranks, key):
    """Per rep the slowest rank's time, then the median over reps."""
    return median([max(rk["reps"][i][key] for rk in ranks) for i in range(len(ranks[0]["reps"]))])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-reps", type=int, default=1, help="timed repetitions of the torch baseline (no warm-up)")
    ap.add_argument("--check", action="store_true",
                    help="also compare the two implementations' gradients (max relative difference in the row)")
    ap.add_argument("--save", help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=["ringattn", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--peers", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--token", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker == "ringattn":
        return worker_ringattn(a)
    if a.worker == "torch":
        return worker_torch(a)
    command = "PYTHONPATH=build/python /usr/bin/python3 bench/ring/backward.py " + " ".join(
        shlex.quote(x) for x in sys.argv[1:])
    import tempfile

    scratch = tempfile.TemporaryDirectory(prefix="ringattn-bench-backward-") if a.check else None
    save = scratch.name if scratch else None
    for dtype in a.dtypes.split(","):
        print(f"backward.py: ringattn {dtype}, P = {a.nodes}, N = {a.seq}", file=sys.stderr, flush=True)
        ra = run_ranks(a, "ringattn", dtype, save)
        fwd, bwd = slowest(ra, "forward"), slowest(ra, "backward")
        row = dict(bench="ring_backward", machine=cpu_name(), cores=os.cpu_count(), dtype=dtype, nodes=a.nodes,
                   seq=a.seq, heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, layout="zigzag",
                   mask="causal", threads_per_node=1, reps=a.reps, forward_seconds=fwd, backward_seconds=bwd,
                   backward_over_forward=bwd / fwd,
                   exposed_wait_fraction=max(median([x["wait"] / x["backward"] for x in rk["reps"]]) for rk in ra),
                   # The kernels alone (each call's compute_seconds): what the FLOP ratio of 2.5 predicts;
                   # the rest of backward_over_forward is the ring's share (waits, the TCP stack's CPU time
                   # on the same cores, the O(b d) passes).
                   kernel_backward_over_forward=max(median([x["compute"] / x["forward_compute"] for x in rk["reps"]])
                                                    for rk in ra),
                   backward_gflops=sum(rk["reps"][0]["flops"] for rk in ra) / bwd / 1e9,
                   bytes_sent_per_node=[rk["reps"][0]["bytes"] for rk in ra],
                   peak_rss_mib_per_node=[max(x["peak_kib"] for x in rk["reps"]) / 1024 for rk in ra],
                   interpreter_rss_mib_per_node=[rk["base_kib"] / 1024 for rk in ra],
                   rss_model_mib_per_node=[rk["model_bytes"] / 2**20 for rk in ra])
        row["rss_over_model"] = max(p * 2**20 / (m * 2**20) for p, m in zip(row["peak_rss_mib_per_node"],
                                                                          row["rss_model_mib_per_node"]))
        row["rss_over_model_without_interpreter"] = max(
            (p - i) / m for p, i, m in zip(row["peak_rss_mib_per_node"], row["interpreter_rss_mib_per_node"],
                                           row["rss_model_mib_per_node"]))
        if not a.no_torch:
            print(f"backward.py: torch + gloo {dtype}", file=sys.stderr, flush=True)
            tr = run_ranks(a, "torch", dtype, save, reps=a.torch_reps)
            tf, tb = slowest(tr, "forward"), slowest(tr, "backward")
            row.update(torch_forward_seconds=tf, torch_backward_seconds=tb, backward_speedup_vs_torch=tb / bwd,
                       training_step_speedup_vs_torch=(tf + tb) / (fwd + bwd))
            if save:  # the baseline computes the same gradients
                # A NaN must not vanish into max() (max(0.0, nan) is 0.0): non-finite
                # gradients are reported as such, and the difference then as null.
                diff, finite = 0.0, {"ringattn": True, "torch": True}
                for r in range(a.nodes):
                    x, y = np.load(os.path.join(save, f"ringattn{r}.npz")), np.load(os.path.join(save, f"torch{r}.npz"))
                    for n in ("dq", "dk", "dv"):
                        finite["ringattn"] &= bool(np.isfinite(x[n]).all())
                        finite["torch"] &= bool(np.isfinite(y[n]).all())
                        if finite["ringattn"] and finite["torch"]:
                            diff = max(diff, float(np.abs(x[n] - y[n]).max() / np.abs(x[n]).max()))
                row["gradients_finite"] = finite
                row["torch_gradients_max_relative_difference"] = diff if all(finite.values()) else None
        row["command"] = command
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
