"""ringattn.torch: the ring's attention as a PyTorch autograd function (CPU).

    from ringattn.torch import RingAttention, ring_attention
    o = ring_attention(q, k, v, ring, positions=pos, causal=True)   # q [rows, heads, d]
    loss(o).backward()                                               # dq, dk, dv via Ring.backward

q, k, v are CPU tensors [rows, heads, head_dim] / [rows, kv_heads, head_dim] of this rank's
rows (float32 or bfloat16; bfloat16 runs the ring in bf16: bf16 K/V on the wire and bf16
matmuls where the CPU has them, fp32 state and fp32 gradients). Every rank of the ring calls
forward and backward together, as with Ring.forward / Ring.backward. Forward saves q, k, v,
o and lse; backward sends the blocks around the ring once more with their gradient
accumulators and returns exact dense-attention gradients. Contiguous float32 tensors are
passed to the ring without a copy (torch and numpy share their memory).

Imported on demand (`import ringattn` alone never imports torch); needs Debian's
python3-torch or any torch for this python.
"""
import numpy as np
import torch

import ringattn

__all__ = ["RingAttention", "ring_attention"]


def _f32(t, name):
    if not isinstance(t, torch.Tensor):
        raise ringattn.InvalidArgument(f"ringattn.torch: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise ringattn.InvalidArgument(f"ringattn.torch: {name} is on {t.device}; the ring runs on CPU tensors")
    if t.dtype not in (torch.float32, torch.bfloat16):
        raise ringattn.InvalidArgument(
            f"ringattn.torch: {name} has dtype {t.dtype}; expected torch.float32 or torch.bfloat16")
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    return t.contiguous()  # no copy when it already is


class RingAttention(torch.autograd.Function):
    """softmax(q kᵀ · scale + mask) v over the whole ring's sequence, for this rank's rows.

    RingAttention.apply(q, k, v, ring, positions, documents, causal, window, scale) -> o
    (o has q's dtype). positions: this rank's rows' global positions (int64 array; None at
    world size 1); documents: a packed batch's document id per row, or None.
    """

    @staticmethod
    def forward(ctx, q, k, v, ring, positions=None, documents=None, causal=False, window=None, scale=None):
        if not (q.dtype == k.dtype == v.dtype):
            raise ringattn.InvalidArgument(
                f"ringattn.torch: q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        wire = "bf16" if q.dtype == torch.bfloat16 else "fp32"
        qf, kf, vf = _f32(q, "q"), _f32(k, "k"), _f32(v, "v")
        opts = dict(positions=positions, documents=documents, causal=causal, window=window, dtype=wire, scale=scale)
        o, lse = ring.forward(qf.numpy(), kf.numpy(), vf.numpy(), **opts)
        o_t, lse_t = torch.from_numpy(o), torch.from_numpy(lse)
        ctx.save_for_backward(qf, kf, vf, o_t, lse_t)
        ctx.ring, ctx.opts, ctx.dtype = ring, opts, q.dtype
        return o_t if q.dtype == torch.float32 else o_t.to(q.dtype)

    @staticmethod
    def backward(ctx, d_o):
        qf, kf, vf, o, lse = ctx.saved_tensors
        d = _f32(d_o, "d_o")
        dq, dk, dv = ctx.ring.backward(qf.numpy(), kf.numpy(), vf.numpy(), o.numpy(), lse.numpy(), d.numpy(),
                                       **ctx.opts)
        grads = [torch.from_numpy(g) for g in (dq, dk, dv)]
        if ctx.dtype != torch.float32:
            grads = [g.to(ctx.dtype) for g in grads]
        return (*grads, None, None, None, None, None, None)


def ring_attention(q, k, v, ring, positions=None, documents=None, causal=False, window=None, scale=None):
    """RingAttention.apply with keyword arguments."""
    if positions is not None:
        positions = np.ascontiguousarray(positions, dtype=np.int64)
    return RingAttention.apply(q, k, v, ring, positions, documents, causal, window, scale)
