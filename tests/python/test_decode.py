"""Decode on stationary KV shards from Python: a packed prefill kept in a ringattn.KVCache per
rank, then decode steps through Ring.decode, against dense float64 attention within each
document (numpy), with P = 3 ranks as threads of one process and a world of one.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
"""
import secrets
import threading

import numpy as np
import pytest

import ringattn
from ports import free_ports
from test_documents import dense_documents, ids_of, inputs

PROMPTS = [40, 1, 90, 7]  # prompt lengths; each document then grows by STEPS decode tokens
STEPS = 3


def layout():
    cu_pre = np.concatenate([[0], np.cumsum(PROMPTS)])
    cu_full = np.concatenate([[0], np.cumsum(np.array(PROMPTS) + STEPS)])
    return cu_pre, cu_full


def run_rank(ring, q, k, v, dtype):
    """Prefill this rank's shard, then STEPS decode steps of the documents it owns (d mod P).
    Returns the rows it computed (prefill and decode) with their o and lse."""
    cu_pre, cu_full = layout()
    P, R = ring.world_size, ring.rank
    pos, docs = ringattn.shard_documents(cu_pre, P)[R]
    pos = pos - cu_pre[docs] + cu_full[docs]  # prompt space -> rows of the packed tensors
    cache = ringattn.KVCache(k.shape[1], k.shape[2], dtype=dtype)
    rows, outs, lses = [pos], [], []
    o, lse = ring.forward(q[pos], k[pos], v[pos], positions=pos, documents=docs, causal=True, dtype=dtype)
    outs.append(o)
    lses.append(lse)
    cache.append_packed(pos, docs, k[pos], v[pos])
    mine = np.arange(R, len(PROMPTS), P, dtype=np.int32)
    for s in range(STEPS):
        dpos = (cu_full[mine] + np.array(PROMPTS)[mine] + s).astype(np.int64)
        o, lse = ring.decode(q[dpos], k[dpos], v[dpos], cache=cache, sequences=mine, positions=dpos)
        assert ring.last_decode_stats["tokens"] == len(PROMPTS)
        rows.append(dpos)
        outs.append(o)
        lses.append(lse)
    return np.concatenate(rows), np.concatenate(outs), np.concatenate(lses)


def check(results, q, k, v, tol):
    _, cu_full = layout()
    o_ref, lse_ref = dense_documents(q, k, v, ids_of(cu_full), causal=True)
    seen = np.concatenate([r for r, _, _ in results])
    assert sorted(seen.tolist()) == list(range(cu_full[-1]))  # every token computed once
    for rows, o, lse in results:
        assert np.max(np.abs(o - o_ref[rows])) <= tol
        assert np.max(np.abs(lse - lse_ref[rows])) <= 2e-5


def test_decode_on_three_ranks_as_threads():
    _, cu_full = layout()
    q, k, v = inputs(cu_full[-1], seed=7)
    ports, token = free_ports(3), secrets.token_hex(16)
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=3, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=10, connect_timeout=20) as ring:
                results[r] = run_rank(ring, q, k, v, "fp32")
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    check(list(results.values()), q, k, v, 2e-5)


def test_decode_world_of_one_bf16_cache_and_bad_calls():
    _, cu_full = layout()
    q, k, v = inputs(cu_full[-1], seed=9)
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    # bf16 inputs, so that the float64 reference sees what the bf16 cache holds
    q, k, v = ((x.view(np.uint32) & 0xFFFF0000).view(np.float32) for x in (q, k, v))
    with ringattn.Ring(rank=0, world_size=1, threads=1) as ring:
        result = run_rank(ring, q, k, v, "bf16")
        cache = ringattn.KVCache(2, 64, dtype="bf16")
        assert cache.dtype == "bf16" and cache.rows == 0
        with pytest.raises(ringattn.InvalidArgument, match="the cache holds"):
            ring.decode(q[:1], k[:1, :1], v[:1, :1], cache=cache, sequences=[0], positions=[0])
        with pytest.raises(ringattn.InvalidArgument, match="decode: positions has shape"):
            ring.decode(q[:1], k[:1], v[:1], cache=cache, sequences=[0], positions=[0, 1])
        with pytest.raises(ringattn.InvalidArgument, match=r"sequences\[0\] = 4294967301"):
            ring.decode(q[:1], k[:1], v[:1], cache=cache, sequences=[2**32 + 5], positions=[0])
        assert not ring.broken
    check([result], q, k, v, 1e-2)
    assert ringattn.decode_store_rank(3, 10, 4) == 1
