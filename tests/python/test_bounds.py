"""Issue 45 from Python: every size, count and id a caller passes is checked, without
overflow, before anything is allocated, sent or read, and refused as InvalidArgument
(a ValueError) naming it, never a MemoryError, a wrapped value or a read out of bounds.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python/test_bounds.py
"""
import numpy as np
import pytest

import ringattn

U64_MAX = 2**64 - 1  # numpy's cast to int64 made it -1


@pytest.fixture(scope="module")
def ring1():
    with ringattn.Ring(rank=0, world_size=1, threads=1) as ring:
        yield ring


def qkv(rows=4, heads=2, d=64):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((rows, heads, d), dtype=np.float32)
    k = rng.standard_normal((rows, heads, d), dtype=np.float32)
    return q, k, k.copy()


def test_uint64_ids_and_positions_are_checked_before_the_cast(ring1):
    q, k, v = qkv()
    docs = np.array([0, 0, 0, U64_MAX], dtype=np.uint64)
    with pytest.raises(ringattn.InvalidArgument, match=r"documents\[3\] = 18446744073709551615 exceeds 2147483647"):
        ring1.forward(q, k, v, documents=docs)
    pos = np.array([0, 1, 2, U64_MAX], dtype=np.uint64)
    with pytest.raises(ringattn.InvalidArgument, match=r"positions\[3\] = 18446744073709551615 exceeds"):
        ring1.forward(q, k, v, positions=pos)
    with pytest.raises(ringattn.InvalidArgument, match=r"cu_seqlens\[1\] = 18446744073709551615 exceeds"):
        ringattn.shard_documents(np.array([0, U64_MAX], dtype=np.uint64), 2)
    # visible_pairs read cu_seqlens[-1 as an index] for document -1, however it came.
    shard = (np.array([0, 1]), np.array([0, U64_MAX], dtype=np.uint64))
    with pytest.raises(ringattn.InvalidArgument, match="exceeds"):
        ringattn.visible_pairs([0, 2], [shard])
    with pytest.raises(ringattn.InvalidArgument, match="document id -1 < 0"):
        ringattn.visible_pairs([0, 2], [(np.array([0, 1]), np.array([0, -1], dtype=np.int32))])
    cache = ringattn.KVCache(2, 64)
    with pytest.raises(ringattn.InvalidArgument, match="exceeds"):
        cache.append(0, np.array([0, 1, 2, U64_MAX], dtype=np.uint64), k, v)
    assert cache.rows == 0
    # uint64 values that fit still work
    o, _ = ring1.forward(q, k, v, positions=np.arange(4, dtype=np.uint64), documents=np.zeros(4, dtype=np.uint64))
    assert o.shape == q.shape


@pytest.mark.parametrize("shape", [(1, 2**36, 0), (2**36, 1, 0), (0, 1, 2**36)])
def test_shapes_beyond_the_limits_are_refused_before_the_outputs_are_allocated(ring1, shape):
    """q of (1, 2**36, 0) holds nothing, but lse of (1, 2**36) was allocated (256 GiB) from
    its shape before the library's limits were checked: MemoryError, not InvalidArgument."""
    q = np.zeros(shape, dtype=np.float32)  # no elements: only the shape is large
    k = np.zeros((shape[0], 1, shape[2]), dtype=np.float32)
    with pytest.raises(ringattn.InvalidArgument, match="exceed the ring's"):
        ring1.forward(q, k, k)
    with pytest.raises(ringattn.InvalidArgument, match="exceed the ring's"):
        ring1.backward(q, k, k, q, np.zeros((0, 0), dtype=np.float32), q)
    with pytest.raises(ringattn.InvalidArgument, match="exceed the ring's"):
        ring1.decode(q, k, k, cache=ringattn.KVCache(1, 64), sequences=[0], positions=[0])
    assert not ring1.broken
    q, k, v = qkv()
    ring1.forward(q, k, v)  # still usable


def test_counts_that_no_ring_could_take_are_refused_before_allocating():
    with pytest.raises(ringattn.InvalidArgument, match="must be in 1..65536"):
        ringattn.KVCache(2**32, 2**30)
    with pytest.raises(ringattn.InvalidArgument, match="rows a rank"):
        ringattn.shard_documents([0, 2**40], 2)
    with pytest.raises(ringattn.InvalidArgument, match="would hold 1099511627776 rows"):
        ringattn.shard_positions("contiguous", 2**40, 1, 0)
    with pytest.raises(ringattn.InvalidArgument, match="would hold"):
        ringattn.shard_positions("striped", 2**63 - 1, 2**20, 0)  # its count's sum overflowed
    assert len(ringattn.shard_positions("striped", 10, 3, 1)) == 3


def test_ring_options_timeouts_and_world_size_are_bounded():
    for bad in (float("inf"), float("nan"), 1e300, 0.0, -1.0):
        with pytest.raises(ringattn.InvalidArgument, match="RingOptions: timeout = "):
            ringattn.Ring(rank=0, world_size=1, timeout=bad)
        with pytest.raises(ringattn.InvalidArgument, match="RingOptions: connect_timeout = "):
            ringattn.Ring(rank=0, world_size=1, connect_timeout=bad)
    with pytest.raises(ringattn.InvalidArgument, match=r"world_size = 2147483647 must be in 1\.\.1048576"):
        ringattn.Ring(rank=0, world_size=2**31 - 1, master="127.0.0.1:1", token="t" * 16)
