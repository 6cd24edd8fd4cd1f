"""Packed variable-length batches from Python: ringattn.shard_documents, visible_pairs and
forward(documents=...) against dense float64 attention within each document (numpy), with
P = 2 ranks as threads of one process and a world of one.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
"""
import secrets
import threading

import numpy as np
import pytest

import ringattn
from ports import free_ports

CU = [0, 100, 137, 1037, 1038, 1040, 1203]  # long documents, tiny ones (1 and 2 tokens)


def dense_documents(q, k, v, ids, causal=False, window=None):
    """O and lse in float64 where query i sees key j only in the same document (and the mask)."""
    n, heads, d = q.shape
    k, v = (np.repeat(x.astype(np.float64), heads // x.shape[1], axis=1) for x in (k, v))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = ids[:, None] == ids[None, :]
    if causal or window:
        visible &= j <= i
    if window:
        visible &= j > i - window
    s = np.where(visible, np.einsum("ihd,jhd->hij", q.astype(np.float64), k) / np.sqrt(d), -np.inf)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=2, keepdims=True)
    return np.einsum("hij,jhd->ihd", p / l, v), (m + np.log(l))[:, :, 0].T


def inputs(n, heads=4, kv_heads=2, d=64, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, heads, d), dtype=np.float32),
            rng.standard_normal((n, kv_heads, d), dtype=np.float32),
            rng.standard_normal((n, kv_heads, d), dtype=np.float32))


def ids_of(cu):
    return np.repeat(np.arange(len(cu) - 1, dtype=np.int32), np.diff(cu))


def test_shard_documents_partitions_and_balances():
    shards = ringattn.shard_documents(CU, 3)
    assert len(shards) == 3
    allpos = np.concatenate([p for p, _ in shards])
    assert sorted(allpos.tolist()) == list(range(CU[-1]))
    for pos, docs in shards:
        assert pos.dtype == np.int64 and docs.dtype == np.int32
        assert np.all(np.diff(pos) > 0) and np.all(np.diff(docs) >= 0)
        assert np.array_equal(docs, ids_of(CU)[pos])
    work = ringattn.visible_pairs(CU, shards, causal=True)
    assert sum(work) == sum(n * (n + 1) // 2 for n in np.diff(CU))
    assert max(work) / (sum(work) / 3) <= 1.1
    with pytest.raises(ringattn.InvalidArgument, match="entry 2"):
        ringattn.shard_documents([0, 10, 5], 2)


def test_packed_batch_on_two_ranks_as_threads():
    ports, token = free_ports(2), secrets.token_hex(16)
    q, k, v = inputs(CU[-1])
    shards = ringattn.shard_documents(CU, 2)
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=2, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=10, connect_timeout=20) as ring:
                pos, docs = shards[r]
                with pytest.raises(ringattn.InvalidArgument, match="documents has shape"):
                    ring.forward(q[pos], k[pos], v[pos], positions=pos, documents=docs[1:], causal=True)
                results[r] = (pos, *ring.forward(q[pos], k[pos], v[pos], positions=pos, documents=docs, causal=True))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    o_ref, lse_ref = dense_documents(q, k, v, ids_of(CU), causal=True)
    for pos, o, lse in results.values():
        assert np.max(np.abs(o - o_ref[pos])) <= 2e-5 and np.max(np.abs(lse - lse_ref[pos])) <= 2e-5


def test_world_of_one_with_documents_and_a_window():
    q, k, v = inputs(CU[-1], seed=5)
    with ringattn.Ring(rank=0, world_size=1, threads=1) as ring:
        o, lse = ring.forward(q, k, v, documents=ids_of(CU), window=50)
    o_ref, lse_ref = dense_documents(q, k, v, ids_of(CU), window=50)
    assert np.max(np.abs(o - o_ref)) <= 2e-5 and np.max(np.abs(lse - lse_ref)) <= 2e-5


@pytest.mark.parametrize("schedule,world,group", [("ulysses", 2, 1), ("hybrid", 4, 2)])
def test_schedules_give_the_same_attention_and_gradients(schedule, world, group):
    """schedule='ulysses' and 'hybrid' on a packed batch: the ring's o, lse and gradients."""
    ports, token = free_ports(world), secrets.token_hex(16)
    q, k, v = inputs(CU[-1], seed=7)
    d_o = np.random.default_rng(8).standard_normal(q.shape, dtype=np.float32)
    shards = ringattn.shard_documents(CU, world)
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=world, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=20, connect_timeout=30, all_pairs=True, group_size=group) as ring:
                pos, docs = shards[r]
                args = (q[pos], k[pos], v[pos])
                o, lse = ring.forward(*args, positions=pos, documents=docs, causal=True, schedule=schedule)
                grads = ring.backward(*args, o, lse, d_o[pos], positions=pos, documents=docs, causal=True,
                                      schedule=schedule)
                ring_o, ring_lse = ring.forward(*args, positions=pos, documents=docs, causal=True)
                ring_grads = ring.backward(*args, ring_o, ring_lse, d_o[pos], positions=pos, documents=docs, causal=True)
                results[r] = (o, lse, grads, ring_o, ring_lse, ring_grads)
                with pytest.raises(ringattn.InvalidArgument, match="schedule 'mesh'"):
                    ring.forward(*args, positions=pos, documents=docs, schedule="mesh")
                # The call description's scope: Ulysses and the hybrid span the whole ring.
                with pytest.raises(ringattn.InvalidArgument, match="spans the whole ring"):
                    ring.forward(*args, positions=pos, documents=docs, schedule=schedule, scope="group")
                with pytest.raises(ringattn.InvalidArgument, match="scope 'sideways'"):
                    ring.backward(*args, o, lse, d_o[pos], positions=pos, documents=docs, scope="sideways")
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    o_ref, lse_ref = dense_documents(q, k, v, ids_of(CU), causal=True)
    for r, (o, lse, grads, ring_o, ring_lse, ring_grads) in results.items():
        pos = shards[r][0]
        assert np.max(np.abs(o - o_ref[pos])) <= 2e-5 and np.max(np.abs(lse - lse_ref[pos])) <= 2e-5
        for g, rg in zip(grads, ring_grads):
            assert np.max(np.abs(g - rg)) <= 1e-5 * max(1.0, np.max(np.abs(rg)))


def test_scoped_collectives_on_a_mesh():
    """all_reduce / all_gather over the ring, a group and across, on a 2 x 2 mesh (threads)."""
    ports, token = free_ports(4), secrets.token_hex(16)
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=4, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=20, connect_timeout=30, group_size=2) as ring:
                out = {}
                for scope in ("ring", "group", "across"):
                    x = np.full(1000, r + 1, dtype=np.float32)
                    ring.all_reduce(x, scope=scope)
                    n, me = ring.scope_size(scope), ring.scope_rank(scope)
                    g = np.zeros(3 * n, dtype=np.float32)
                    g[3 * me:3 * me + 3] = 10 * r + np.arange(3)
                    ring.all_gather(g, [3] * n, scope=scope)
                    out[scope] = (x[0], g, me, n)
                # Counts whose sum wraps modulo 2**64 onto len(data): refused, nothing read or written.
                for wrapping in ([20, 2**64 - 16, 0, 0], [2**62 - 16, 2**62, 2**62, 2**62 + 20]):
                    with pytest.raises(ringattn.InvalidArgument, match="add up to more than"):
                        ring.all_gather(np.zeros(4, dtype=np.float32), wrapping, scope="ring")
                with pytest.raises(TypeError):
                    ring.all_gather(np.zeros(4, dtype=np.float32), [5, -1, 0, 0], scope="ring")
                with pytest.raises(ringattn.InvalidArgument, match="scope 'mesh'"):
                    ring.all_reduce(np.zeros(3, dtype=np.float32), scope="mesh")
                with pytest.raises(ringattn.InvalidArgument, match="float32"):
                    ring.all_reduce(np.zeros(3), scope="group")
                results[r] = out
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    members = {"ring": lambda r: [0, 1, 2, 3], "group": lambda r: [r // 2 * 2, r // 2 * 2 + 1],
               "across": lambda r: [r % 2, r % 2 + 2]}
    for r, out in results.items():
        for scope, (total, g, me, n) in out.items():
            ranks = members[scope](r)
            assert n == len(ranks) and ranks[me] == r
            assert total == sum(q + 1 for q in ranks)
            assert np.array_equal(g, np.concatenate([10 * q + np.arange(3, dtype=np.float32) for q in ranks]))
