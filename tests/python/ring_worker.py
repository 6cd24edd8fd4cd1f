"""One rank of a ring for test_ring.py: runs the cases it is given on its own shard.

    ring_worker.py --rank R --world P (--peers h:p,... | --master h:p) --token T --out DIR
                   [--mode exact|mismatch|die] [--sink]

exact:    every case of CASES in order on one ring; writes DIR/rank<R>.npz holding
          o_<case>, lse_<case> and pos_<case> (the rows' global positions) of the cases
          that ran, and DIR/errors<R>.json: {case: error} of those that failed.
mismatch: rank 0 calls with head_dim 64, the others with 32; writes DIR/rank<R>.json with
          the error each rank got.
die:      after one good call rank 1 leaves; the others call again and report the error.
die-backward: one good forward and backward; then a forward, after which rank 1 sets
          inject_fault("exit", 1) and dies at step 1 of the backward every rank calls next;
          the others write DIR/rank<R>.json with the error they got.
--sink:   the library's log lines go to a Python sink; they are written to DIR/log<R>.json.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

import ringattn

# name: (layout, tokens, heads, kv_heads, head_dim, causal, window, dtype)
CASES = {
    "zigzag-causal-fp32": ("zigzag", 300, 4, 2, 64, True, None, "fp32"),
    "zigzag-window-fp32": ("zigzag", 257, 4, 1, 32, False, 37, "fp32"),
    "zigzag-causal-bf16": ("zigzag", 300, 4, 2, 64, True, None, "bf16"),
    "striped-window-bf16": ("striped", 211, 2, 2, 128, False, 50, "bf16"),
    "contiguous-none-fp32": ("contiguous", 190, 8, 8, 48, False, None, "fp32"),
}


def inputs(name):
    """The whole sequence's q, k, v for a case: the same on every rank."""
    _, n, h, kh, d, _, _, _ = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    q = rng.standard_normal((n, h, d), dtype=np.float32)
    k = rng.standard_normal((n, kh, d), dtype=np.float32)
    v = rng.standard_normal((n, kh, d), dtype=np.float32)
    return q, k, v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--peers")
    ap.add_argument("--master")
    ap.add_argument("--token", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", default="exact", choices=["exact", "mismatch", "die", "die-backward"])
    ap.add_argument("--sink", action="store_true")
    a = ap.parse_args()

    lines = []
    if a.sink:
        ringattn.set_log_sink(lambda level, logger, message: lines.append([level, logger, message]))
    with ringattn.Ring(rank=a.rank, world_size=a.world, peers=a.peers.split(",") if a.peers else None,
                       master=a.master, token=a.token, threads=1, timeout=10, connect_timeout=60) as ring:
        if a.mode == "exact":
            # A case that fails is recorded and the next one runs: one failing case must fail
            # its own test, not every test that shares this ring. After a failure that broke
            # the ring the later cases cannot run, and say so.
            out, errors, broken_by = {}, {}, None
            for name, (layout, n, _, _, _, causal, window, dtype) in CASES.items():
                if broken_by:
                    errors[name] = f"not run: the ring was broken by case {broken_by}"
                    continue
                q, k, v = inputs(name)
                pos = ringattn.shard_positions(layout, n, ring.world_size, ring.rank)
                try:
                    o, lse = ring.forward(q[pos], k[pos], v[pos], positions=pos, causal=causal, window=window,
                                          dtype=dtype)
                except ringattn.Error as e:
                    errors[name] = f"{type(e).__name__}: {e}"
                    broken_by = name if ring.broken else None
                    continue
                out["o_" + name], out["lse_" + name], out["pos_" + name] = o, lse, pos
            np.savez(os.path.join(a.out, f"rank{a.rank}.npz"), **out)
            with open(os.path.join(a.out, f"errors{a.rank}.json"), "w") as f:
                json.dump(errors, f)
        elif a.mode == "die-backward":
            rng = np.random.default_rng(a.rank)
            pos = ringattn.shard_positions("zigzag", 64 * a.world, a.world, a.rank)
            q, k, v, w = (rng.standard_normal((64, 2, 32), dtype=np.float32) for _ in range(4))
            o, lse = ring.forward(q, k, v, positions=pos, causal=True)
            ring.backward(q, k, v, o, lse, w, positions=pos, causal=True)  # one good pair: the ring is up
            o, lse = ring.forward(q, k, v, positions=pos, causal=True)
            # Every rank's forward has returned before rank 1 arms the fault: dying any earlier
            # could reset a connection under another rank's last forward frame.
            open(os.path.join(a.out, f"rank{a.rank}.forwarded"), "w").close()
            if a.rank == 1:
                for _ in range(1200):
                    if all(os.path.exists(os.path.join(a.out, f"rank{r}.forwarded")) for r in range(a.world)):
                        break
                    time.sleep(0.05)
                ring.inject_fault("exit", 1)
            report = {"error": None}
            try:
                ring.backward(q, k, v, o, lse, w, positions=pos, causal=True)
            except ringattn.Error as e:
                report = {"error": str(e), "type": type(e).__name__, "cause": getattr(e, "cause", None),
                          "origin_rank": getattr(e, "origin_rank", None), "broken": ring.broken}
            with open(os.path.join(a.out, f"rank{a.rank}.json"), "w") as f:
                json.dump(report, f)
        else:
            rng = np.random.default_rng(a.rank)
            pos = ringattn.shard_positions("contiguous", 16 * a.world, a.world, a.rank)
            q = rng.standard_normal((16, 2, 64), dtype=np.float32)
            if a.mode == "die":
                ring.forward(q, q, q, positions=pos)  # one good call: the ring is up everywhere
                marker = os.path.join(a.out, "rank0.called")
                if a.rank == 0:
                    open(marker, "w").close()
                if a.rank == 1:
                    # Leave only once rank 0's good call has returned: leaving earlier can reset
                    # the connection under rank 0's last frame and fail that call instead.
                    for _ in range(600):
                        if os.path.exists(marker):
                            break
                        time.sleep(0.05)
                    os._exit(0)  # no goodbye: the others see the connection end
            elif a.rank != 0:
                q = np.ascontiguousarray(q[:, :, :32])
            report = {"error": None}
            try:
                ring.forward(q, q, q, positions=pos)
            except ringattn.Error as e:
                report = {"error": str(e), "type": type(e).__name__, "cause": getattr(e, "cause", None),
                          "origin_rank": getattr(e, "origin_rank", None), "broken": ring.broken}
            with open(os.path.join(a.out, f"rank{a.rank}.json"), "w") as f:
                json.dump(report, f)
    if a.sink:
        ringattn.set_log_sink(None)
        with open(os.path.join(a.out, f"log{a.rank}.json"), "w") as f:
            json.dump(lines, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
