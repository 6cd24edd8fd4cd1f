"""ringattn.torch.RingAttention against torch's own autograd through dense attention
(softmax(q kᵀ · scale + mask) v in float64), ranks as threads of this process: gradients at
P = 1, 2, 3, causal and not, a window, GQA, packed documents, bf16; a small attention model
trained for a few steps at P = 2 and 3 gives P = 1's loss curve; torch.autograd.gradcheck on
a tiny shape; ring.backward's argument checks.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_torch.py
"""
import math
import secrets
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ringattn  # noqa: E402
from ringattn.torch import RingAttention, ring_attention  # noqa: E402
from ports import free_ports  # noqa: E402

TIMEOUT = 120
torch.set_num_threads(1)


def on_ranks(world, fn):
    """fn(rank, ring) on one thread per rank, each with its own Ring on loopback."""
    ports, token = free_ports(world), secrets.token_hex(16)
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=world, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=20, connect_timeout=30) as ring:
                results[r] = fn(r, ring)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"rank {r}: {e!r}")

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    return results


def dense(q, k, v, causal=False, window=None, documents=None, scale=None):
    """softmax(q kᵀ · scale + mask) v per head with torch ops (autograd through it); GQA by repeat."""
    n, heads, d = q.shape
    g = heads // k.shape[1]
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, kk) * (scale or 1.0 / math.sqrt(d))
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    visible = torch.ones(n, n, dtype=torch.bool)
    if causal or window:
        visible &= j <= i
    if window:
        visible &= j > i - window
    if documents is not None:
        ids = torch.as_tensor(documents)
        visible &= ids[:, None] == ids[None, :]
    p = torch.softmax(s.masked_fill(~visible, -math.inf), dim=-1)
    return torch.einsum("hij,jhd->ihd", p, vv)


def problem(n, heads, kv_heads, d, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, h, d, generator=gen) for h in (heads, kv_heads, kv_heads))
    w = torch.randn(n, heads, d, generator=gen)  # loss = Σ w ∘ o: dO = w
    return q, k, v, w


def reference_grads(q, k, v, w, **mask):
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    (dense(q64, k64, v64, **mask) * w.double()).sum().backward()
    return q64.grad, k64.grad, v64.grad


def ring_grads(world, q, k, v, w, layout="zigzag", dtype=torch.float32, documents=None, cu=None, **mask):
    """Each rank's RingAttention on its rows, loss Σ w ∘ o; the gradients gathered by global row."""
    n = q.shape[0]

    def shard(r):
        if cu is not None:
            s = ringattn.shard_documents(cu, world)[r]
            return s[0], s[1]
        return ringattn.shard_positions(layout, n, world, r), None

    def fn(r, ring):
        pos, docs = shard(r)
        idx = torch.as_tensor(pos)
        qr, kr, vr = (x[idx].to(dtype).clone().requires_grad_() for x in (q, k, v))
        o = ring_attention(qr, kr, vr, ring, positions=pos, documents=docs, **mask)
        assert o.dtype == dtype
        (o.float() * w[idx]).sum().backward()
        assert ring.last_backward_stats["steps"] == world
        return idx, qr.grad.float(), kr.grad.float(), vr.grad.float()

    out = [torch.zeros_like(x) for x in (q, k, v)]
    for idx, *grads in on_ranks(world, fn).values():
        for o, g in zip(out, grads):
            o[idx] = g
    return out


def rel_error(got, want):
    return float((got.double() - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("mask", [dict(causal=True), dict(), dict(window=23)], ids=["causal", "none", "window"])
def test_gradients_equal_torch_autograd_through_dense_attention(world, mask):
    q, k, v, w = problem(97, 4, 2, 32, seed=world)  # GQA 2:1, uneven shards
    ref = reference_grads(q, k, v, w, **mask)
    got = ring_grads(world, q, k, v, w, **mask)
    errors = [rel_error(g, r) for g, r in zip(got, ref)]
    assert max(errors) < 1e-5, errors


@pytest.mark.parametrize("world", [1, 2, 3])
def test_gradients_with_packed_documents(world):
    cu = [0, 17, 18, 60, 101]
    documents = np.repeat(np.arange(len(cu) - 1), np.diff(cu))
    q, k, v, w = problem(101, 2, 1, 64, seed=10 + world)  # MQA
    ref = reference_grads(q, k, v, w, causal=True, documents=documents)
    got = ring_grads(world, q, k, v, w, cu=cu, causal=True)
    errors = [rel_error(g, r) for g, r in zip(got, ref)]
    assert max(errors) < 1e-5, errors


def test_bfloat16_tensors_run_the_ring_in_bf16():
    q, k, v, w = problem(80, 2, 2, 32, seed=3)
    rounded = [x.to(torch.bfloat16).float() for x in (q, k, v)]
    ref = reference_grads(*rounded, w.to(torch.bfloat16).float(), causal=True)
    got = ring_grads(2, q, k, v, w, dtype=torch.bfloat16, causal=True)
    errors = [rel_error(g, r) for g, r in zip(got, ref)]
    assert max(errors) < 2e-2, errors  # P and dS in bf16, and the gradients rounded to bf16


class TinyAttentionModel:
    """x [rows, E] -> attention(x Wq, x Wk, x Wv) Wo: the parameters every rank holds a copy of."""

    def __init__(self, seed, embed=32, heads=2, kv_heads=1, head_dim=32):
        gen = torch.Generator().manual_seed(seed)
        self.shape = (heads, kv_heads, head_dim)
        self.params = [(torch.randn(embed, h * head_dim, generator=gen) / math.sqrt(embed)).requires_grad_()
                       for h in (heads, kv_heads, kv_heads)]
        self.params.append((torch.randn(heads * head_dim, embed, generator=gen) / math.sqrt(heads * head_dim))
                           .requires_grad_())

    def __call__(self, x, attend):
        heads, kv_heads, d = self.shape
        wq, wk, wv, wo = self.params
        q, k, v = ((x @ m).reshape(x.shape[0], h, d) for m, h in ((wq, heads), (wk, kv_heads), (wv, kv_heads)))
        return attend(q, k, v).reshape(x.shape[0], heads * d) @ wo


def train(world, steps=5, lr=0.5):
    """SGD on Σ (model(x) − y)² / size over the whole sequence; ranks sum their gradients."""
    gen = torch.Generator().manual_seed(99)
    n, embed = 120, 32
    x, y = torch.randn(n, embed, generator=gen), torch.randn(n, embed, generator=gen)
    barrier = threading.Barrier(world)
    grads, losses = {}, {}

    def fn(r, ring):
        model = TinyAttentionModel(seed=7)
        pos = ringattn.shard_positions("zigzag", n, world, r)
        idx = torch.as_tensor(pos)
        curve = []
        for step in range(steps):
            out = model(x[idx], lambda q, k, v: ring_attention(q, k, v, ring, positions=pos, causal=True))
            loss = ((out - y[idx]) ** 2).sum() / (n * embed)
            for p in model.params:
                p.grad = None
            loss.backward()
            grads[r], losses[(step, r)] = [p.grad.clone() for p in model.params], loss.item()
            barrier.wait()  # every rank's gradients are in
            with torch.no_grad():
                for i, p in enumerate(model.params):
                    p -= lr * sum(grads[s][i] for s in range(world))
            curve.append(sum(losses[(step, s)] for s in range(world)))
            barrier.wait()  # nobody overwrites grads before all have stepped
        return curve

    return on_ranks(world, fn)[0]


def test_training_gives_the_same_loss_curve_at_p_1_2_3():
    curves = {world: train(world) for world in (1, 2, 3)}
    # torch alone, dense attention: the curve the ring must reproduce.
    gen = torch.Generator().manual_seed(99)
    x, y = torch.randn(120, 32, generator=gen), torch.randn(120, 32, generator=gen)
    model, dense_curve = TinyAttentionModel(seed=7), []
    for _ in range(5):
        loss = ((model(x, lambda q, k, v: dense(q, k, v, causal=True)) - y) ** 2).sum() / (120 * 32)
        for p in model.params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in model.params:
                p -= 0.5 * p.grad
        dense_curve.append(loss.item())
    assert all(b < a for a, b in zip(dense_curve, dense_curve[1:])), dense_curve  # it learns
    assert dense_curve[-1] < dense_curve[0] * 0.95, dense_curve
    for world in (2, 3):
        np.testing.assert_allclose(curves[world], curves[1], rtol=1e-5, err_msg=f"P = {world}")
    np.testing.assert_allclose(curves[1], dense_curve, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")  # float32 inputs: said and meant below
def test_gradcheck_on_a_tiny_shape():
    """torch.autograd.gradcheck at P = 1. The ring computes in fp32 (there is no float64 path),
    so finite differences use eps 1e-2 and the tolerances follow; the float64 oracle has its own
    finite-difference check in C++ (tests/kernels/test_oracle_backward.cpp)."""
    q, k, v, _ = problem(12, 2, 1, 32, seed=5)
    inputs = tuple((x * 0.5).requires_grad_() for x in (q, k, v))

    def fn(r, ring):
        return torch.autograd.gradcheck(lambda a, b, c: ring_attention(a, b, c, ring, causal=True), inputs,
                                        eps=1e-2, atol=5e-3, rtol=5e-2)

    assert on_ranks(1, fn)[0]


def test_backward_checks_its_arguments():
    def fn(r, ring):
        q, k, v, w = (x.numpy() for x in problem(16, 2, 2, 32, seed=1))
        o, lse = ring.forward(q, k, v, causal=True)
        with pytest.raises(ringattn.InvalidArgument, match="backward: lse has dtype float64"):
            ring.backward(q, k, v, o, lse.astype(np.float64), w, causal=True)
        with pytest.raises(ringattn.InvalidArgument, match="backward: d_o has shape"):
            ring.backward(q, k, v, o, lse, w[:8], causal=True)
        bad = w.copy()
        bad[3, 1, 5] = np.nan
        with pytest.raises(ringattn.InvalidArgument, match="d_o holds nan at row 3"):
            ring.backward(q, k, v, o, lse, bad, causal=True)
        dq, dk, dv = ring.backward(q, k, v, o, lse, w, causal=True)  # still usable
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
        with pytest.raises(ringattn.InvalidArgument, match="ringattn.torch: q has dtype torch.float64"):
            ring_attention(torch.zeros(4, 2, 32, dtype=torch.float64), torch.zeros(4, 2, 32, dtype=torch.float64),
                           torch.zeros(4, 2, 32, dtype=torch.float64), ring)
        assert RingAttention is not None
        return True

    assert on_ranks(1, fn)[0]
