"""Ring attention inside a Python job, with the ringattn module.

Every rank runs this same script. Rank, world size and how to find the others come from
the launcher's environment, as for the C++ program. Each rank calls forward() on its own
rows of one sequence for two layers and checks them against dense float64 attention.

    RINGATTN_MASTER=127.0.0.1:29500 RINGATTN_TOKEN=$(openssl rand -hex 16) mpirun -n 2 python3 embed_example.py
"""
import sys

import numpy as np

import ringattn

# tokens, heads, kv_heads, head_dim, causal, window
LAYERS = [(300, 4, 2, 64, True, None), (257, 8, 1, 32, True, 50)]


def dense_attention(q, k, v, causal, window):
    """softmax(q k^T / sqrt(d) + mask) v and its log-sum-exp, in float64."""
    n, heads, d = q.shape
    k, v = (np.repeat(x.astype(np.float64), heads // x.shape[1], axis=1) for x in (k, v))  # GQA
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = (j <= i if causal else np.ones((n, n), bool)) & (j > i - window if window else True)
    s = np.where(visible, np.einsum("ihd,jhd->hij", q.astype(np.float64), k) / np.sqrt(d), -np.inf)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=2, keepdims=True)
    return np.einsum("hij,jhd->ihd", p / l, v), (m + np.log(l))[:, :, 0].T


def main():
    try:
        ring = ringattn.Ring.from_env()  # connect once
    except ringattn.Error as e:
        print(f"cannot connect: {e}", file=sys.stderr)
        return 2
    ok = True
    with ring:
        for layer, (n, heads, kv_heads, d, causal, window) in enumerate(LAYERS):
            rng = np.random.default_rng(layer)  # the same sequence on every rank
            q = rng.standard_normal((n, heads, d), dtype=np.float32)
            k = rng.standard_normal((n, kv_heads, d), dtype=np.float32)
            v = rng.standard_normal((n, kv_heads, d), dtype=np.float32)
            pos = ringattn.shard_positions("zigzag", n, ring.world_size, ring.rank)  # this rank's rows
            try:
                o, lse = ring.forward(q[pos], k[pos], v[pos], positions=pos, causal=causal, window=window)
            except ringattn.NetworkError as e:  # a peer died, stalled or disagreed: ring.broken
                print(f"rank {ring.rank}: ring failed ({e.cause}): {e}", file=sys.stderr)
                return 2
            o_ref, lse_ref = dense_attention(q, k, v, causal, window)
            err = np.max([np.abs(o - o_ref[pos]).max(), np.abs(lse - lse_ref[pos]).max()])  # keeps a NaN
            print(f"rank {ring.rank}/{ring.world_size} layer {layer}: max error {err:.3g}")
            ok = ok and err <= 2e-5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
