"""The Python module `ringattn` against dense float64 attention in numpy: P = 2 and 3 ranks
as separate processes (explicit peers and a rendezvous), two ranks as threads of one
process (the GIL is released while they connect and compute), the README's example at
P = 2, a rank calling with another shape, a rank that dies, and the argument checks.

Run with Debian's python3 (the module is built for it):
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q tests/python
"""
import functools
import json
import os
import re
import secrets
import subprocess
import sys
import threading

import numpy as np
import pytest

import ringattn
from ports import free_ports
import ring_worker

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 120  # seconds for any multi-process run; the ring's own deadlines are far shorter


def bf16(x):
    """x rounded to bf16 (to nearest, ties to even) and back, as the kernel's inputs are."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def dense(q, k, v, causal=False, window=None):
    """O and lse of softmax(q k^T / sqrt(d) + mask) v per head, in float64 (GQA: kv head h // group)."""
    n, heads, d = q.shape
    k, v = (np.repeat(x.astype(np.float64), heads // x.shape[1], axis=1) for x in (k, v))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    visible = np.ones((n, n), bool)
    if causal or window:
        visible &= j <= i
    if window:
        visible &= j > i - window
    s = np.where(visible, np.einsum("ihd,jhd->hij", q.astype(np.float64), k) / np.sqrt(d), -np.inf)
    m = s.max(axis=2, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=2, keepdims=True)
    return np.einsum("hij,jhd->ihd", p / l, v), (m + np.log(l))[:, :, 0].T


@functools.lru_cache(maxsize=None)
def reference(case):
    _, _, _, _, _, causal, window, dtype = ring_worker.CASES[case]
    q, k, v = ring_worker.inputs(case)
    if dtype == "bf16":
        q, k, v = bf16(q), bf16(k), bf16(v)
    return dense(q, k, v, causal, window)


def tolerance(case):
    return 1e-2 if ring_worker.CASES[case][-1] == "bf16" else 2e-5


def max_error(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want)))  # NaN if any is NaN: fails every <=


def run_ranks(world, out, mode="exact", how="peers", sink=False):
    """Runs ring_worker.py as `world` processes; every one is stopped however this ends."""
    token = secrets.token_hex(16)
    if how == "peers":
        where = ["--peers", ",".join(f"127.0.0.1:{p}" for p in free_ports(world))]
    else:
        where = ["--master", f"127.0.0.1:{free_ports(1)[0]}"]
    procs = []
    try:
        for r in range(world):
            cmd = [sys.executable, os.path.join(HERE, "ring_worker.py"), "--rank", str(r), "--world", str(world),
                   "--token", token, "--out", str(out), "--mode", mode, *where] + (["--sink"] if sink else [])
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, o, e) for p, (o, e) in zip(procs, results)]


# --- exactness across processes -----------------------------------------------------------

@pytest.fixture(scope="module", params=[2, 3], ids=["P2-peers", "P3-rendezvous"])
def exact_run(request, tmp_path_factory):
    """Every case of ring_worker.CASES on one ring of P processes, run once per P."""
    world = request.param
    out = tmp_path_factory.mktemp(f"p{world}")
    # No assertion here: a rank that failed fails the tests that read its results, each
    # naming its own case, and the others still pass or fail on their own.
    results = run_ranks(world, out, how="peers" if world == 2 else "master", sink=True)
    return world, out, results


def rank_results(exact_run, r, case):
    """Rank r's o, lse and positions of `case`, or the test fails with why it has none."""
    world, out, results = exact_run
    rc, _, err = results[r]
    errors_file = out / f"errors{r}.json"
    if os.path.exists(errors_file):
        with open(errors_file) as f:
            errors = json.load(f)
        assert case not in errors, f"rank {r} of {world}, case {case}: {errors[case]}"
    assert rc == 0 and os.path.exists(out / f"rank{r}.npz"), f"rank {r} of {world} exited with {rc}:\n{err}"
    with np.load(out / f"rank{r}.npz") as z:
        return z["o_" + case], z["lse_" + case], z["pos_" + case]


@pytest.mark.parametrize("case", list(ring_worker.CASES))
def test_shards_join_to_dense_attention(exact_run, case):
    world, out, _ = exact_run
    n, heads = ring_worker.CASES[case][1], ring_worker.CASES[case][2]
    o_ref, lse_ref = reference(case)
    o = np.full(o_ref.shape, np.nan, np.float32)
    lse = np.full(lse_ref.shape, np.nan, np.float32)
    seen = np.zeros(n, int)
    for r in range(world):
        o_r, lse_r, pos = rank_results(exact_run, r, case)
        assert pos.dtype == np.int64 and np.all(np.diff(pos) > 0)
        seen[pos] += 1
        o[pos], lse[pos] = o_r, lse_r
        assert lse_r.shape == (len(pos), heads)
    assert np.all(seen == 1), "the shards must cover every token once"
    assert max_error(o, o_ref) <= tolerance(case)
    assert max_error(lse, lse_ref) <= tolerance(case)


def test_log_lines_go_to_the_python_sink(exact_run):
    world, out, results = exact_run
    for r, (rc, _, err) in enumerate(results):
        assert rc == 0, f"rank {r} of {world} exited with {rc}:\n{err}"
        with open(out / f"log{r}.json") as f:
            lines = json.load(f)
        assert ["info", "ring", f"ring of {world} connected"] in lines
        assert "connected" not in err  # not on stderr as well


# --- the README's example, other shapes, failures ----------------------------------------

def test_readme_example_at_p2():
    env = dict(os.environ, RINGATTN_MASTER=f"127.0.0.1:{free_ports(1)[0]}", RINGATTN_TOKEN=secrets.token_hex(16),
               RINGATTN_WORLD_SIZE="2", RINGATTN_THREADS="1")
    procs = []
    try:
        for r in range(2):
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "embed_example.py")],
                                          env=dict(env, RINGATTN_RANK=str(r)), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, (out, err)) in enumerate(zip(procs, results)):
        assert p.returncode == 0, f"rank {r}:\n{out}\n{err}"
        errors = [float(x) for x in re.findall(r"max error (\S+)", out)]
        assert len(errors) == 2 and max(errors) <= 2e-5


def test_a_rank_with_another_head_dim_fails_every_rank_naming_both(tmp_path):
    results = run_ranks(2, tmp_path, mode="mismatch")
    for r, (rc, _, err) in enumerate(results):
        assert rc == 0, f"rank {r}:\n{err}"
        with open(tmp_path / f"rank{r}.json") as f:
            report = json.load(f)
        assert report["type"] == "NetworkError" and report["cause"] == "mismatch", report
        assert re.search(r"head_dim 64\b.*\b32\b|head_dim 32\b.*\b64\b", report["error"]), report["error"]
        assert report["broken"] is True


def test_a_dead_peer_breaks_the_ring(tmp_path):
    results = run_ranks(2, tmp_path, mode="die")
    assert results[0][0] == 0, results[0][2]
    with open(tmp_path / "rank0.json") as f:
        report = json.load(f)
    assert report["type"] == "NetworkError" and report["cause"] == "peer_closed", report
    assert report["origin_rank"] == 1 and report["broken"] is True, report


def test_a_rank_dying_mid_backward_breaks_the_ring_on_every_rank_naming_it(tmp_path):
    results = run_ranks(3, tmp_path, mode="die-backward")
    assert results[1][0] == 17, results[1][2]  # Ring.inject_fault's exit, at backward step 1
    assert "fault injected: exiting abruptly at step 1" in results[1][2]
    for r in (0, 2):
        assert results[r][0] == 0, results[r][2]
        with open(tmp_path / f"rank{r}.json") as f:
            report = json.load(f)
        assert report["type"] == "NetworkError" and report["broken"] is True, report
        assert "rank 1" in report["error"] and report["origin_rank"] == 1, report


def test_inject_fault_checks_its_arguments(ring1):
    with pytest.raises(ValueError, match="fault must be exit, hang, slow or corrupt"):
        ring1.inject_fault("explode", 0)
    with pytest.raises(ValueError, match="step = 5 must be in 0..0"):
        ring1.inject_fault("exit", 5)


def test_two_ranks_as_threads_of_one_process():
    """Both connect and compute at once: only possible if each releases the GIL."""
    ports, token, case = free_ports(2), secrets.token_hex(16), "zigzag-causal-fp32"
    q, k, v = ring_worker.inputs(case)
    n = q.shape[0]
    results, errors = {}, []

    def rank(r):
        try:
            with ringattn.Ring(rank=r, world_size=2, peers=[f"127.0.0.1:{p}" for p in ports], token=token,
                               threads=1, timeout=10, connect_timeout=20) as ring:
                pos = ringattn.shard_positions("zigzag", n, 2, r)
                with pytest.raises(ringattn.InvalidArgument, match="positions are required"):
                    ring.forward(q[pos], k[pos], v[pos], causal=True)  # refused before sending
                results[r] = (pos, *ring.forward(q[pos], k[pos], v[pos], positions=pos, causal=True))
                assert not ring.broken
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    assert not errors, errors
    o_ref, lse_ref = reference(case)
    for pos, o, lse in results.values():
        assert max_error(o, o_ref[pos]) <= 2e-5 and max_error(lse, lse_ref[pos]) <= 2e-5


# --- one process: a world of one, arguments, options -----------------------------------------

@pytest.fixture(scope="module")
def ring1():
    with ringattn.Ring(rank=0, world_size=1, threads=1) as ring:
        yield ring


def test_world_of_one_is_dense_attention(ring1):
    q, k, v = ring_worker.inputs("zigzag-window-fp32")
    o, lse = ring1.forward(q, k, v, window=37)  # positions default to 0..rows-1
    o_ref, lse_ref = dense(q, k, v, window=37)
    assert o.dtype == np.float32 and o.shape == q.shape and lse.shape == q.shape[:2]
    assert max_error(o, o_ref) <= 2e-5 and max_error(lse, lse_ref) <= 2e-5
    o2, _ = ring1.forward(q, k, v, positions=np.arange(len(q)), window=37)
    assert np.array_equal(o, o2)
    assert ring1.last_stats["steps"] == 1 and ring1.last_stats["useful_flops"] > 0


def test_rows_that_see_no_key(ring1):
    q, k, v = ring_worker.inputs("zigzag-causal-fp32")
    # positions 10.. of rows whose keys sit at the same positions: with window 1 each row sees itself only
    o, lse = ring1.forward(q[:4], k[:4], v[:4], positions=[10, 11, 12, 13], window=1)
    assert max_error(o, v[:4].repeat(2, axis=1)) <= 1e-6
    assert ring1.rank == 0 and ring1.world_size == 1


BAD_CALLS = [
    (lambda q, k, v: (q.astype(np.float64), k, v, {}), r"q has dtype float64; expected float32"),
    (lambda q, k, v: (q, k.astype(np.float16), v, {}), r"k has dtype float16; expected float32"),
    (lambda q, k, v: (q[0], k, v, {}), r"q has shape \(4, 64\); expected \[tokens, heads, head_dim\]"),
    (lambda q, k, v: (q[:, :, ::2], k, v, {}), r"q is not C-contiguous"),
    (lambda q, k, v: (q.tolist(), k, v, {}), r"q must be a numpy array .* not list"),
    (lambda q, k, v: (q, k[:5], v, {}), r"k has shape \(5, 2, 64\) but q has \(10, 4, 64\)"),
    (lambda q, k, v: (q, k, v[:, :1].copy(), {}), r"v has shape \(10, 1, 64\) but k has \(10, 2, 64\)"),
    (lambda q, k, v: (q[:, :3].copy(), k, v, {}), r"kv_heads = 2 does not divide heads = 3"),
    (lambda q, k, v: (q[..., :50].copy(), k[..., :50].copy(), v[..., :50].copy(), {}), r"head_dim = 50"),
    (lambda q, k, v: (q, k, v, {"positions": np.arange(3)}), r"positions has shape \(3,\); expected \(10,\)"),
    (lambda q, k, v: (q, k, v, {"positions": np.arange(10.0)}), r"positions has dtype float64"),
    (lambda q, k, v: (q, k, v, {"positions": np.arange(10)[::-1]}), r"strictly increase"),
    (lambda q, k, v: (q, k, v, {"dtype": "fp16"}), r"fp16"),
    (lambda q, k, v: (q, k, v, {"window": 0}), r"window = 0 must be >= 1"),
    (lambda q, k, v: (q, k, v, {"scale": -1.0}), r"scale"),
]


@pytest.mark.parametrize("make,message", BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_calls_raise_value_error_naming_the_problem(ring1, make, message):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((10, 4, 64), dtype=np.float32)
    k = rng.standard_normal((10, 2, 64), dtype=np.float32)
    q2, k2, v2, kw = make(q, k, k.copy())
    with pytest.raises(ValueError, match=message) as e:
        ring1.forward(q2, k2, v2, **kw)
    assert isinstance(e.value, ringattn.InvalidArgument) and isinstance(e.value, ringattn.Error)
    ring1.forward(q, k, k)  # the ring is still usable


def test_options_are_checked():
    with pytest.raises(ringattn.InvalidArgument, match="no shared secret"):
        ringattn.Ring(rank=0, world_size=2, master="127.0.0.1:1")
    with pytest.raises(ringattn.InvalidArgument, match="no peers and no master"):
        ringattn.Ring(rank=0, world_size=2, token="t" * 16)
    with pytest.raises(ringattn.InvalidArgument, match="rank = 2"):
        ringattn.Ring(rank=2, world_size=2, peers=["127.0.0.1:1", "127.0.0.1:2"], token="t" * 16)
    with pytest.raises(ringattn.Error, match="16"):
        ringattn.Ring(rank=0, world_size=2, peers=["127.0.0.1:1", "127.0.0.1:2"], token="short")
    with pytest.raises(ringattn.InvalidArgument, match="threads"):
        ringattn.Ring(rank=0, world_size=1, threads=-1)
    # The bound every entry point shares (RINGATTN_THREADS and --threads too): OpenMP
    # crashed the process on 100000 threads instead of failing.
    with pytest.raises(ringattn.InvalidArgument, match=r"threads = 100000 must be in 0\.\.4096"):
        ringattn.Ring(rank=0, world_size=1, threads=100000)
    with pytest.raises(ringattn.InvalidArgument, match="avx9"):
        ringattn.Ring(rank=0, world_size=1, isa="avx9")


def test_a_sink_that_removes_itself_from_inside_a_line_does_not_hang():
    """set_log_sink(None) called by the sink itself used to deadlock the next call."""
    code = (
        "import numpy as np, ringattn\n"
        "lines = []\n"
        "def sink(level, logger, message):\n"
        "    lines.append(message)\n"
        "    ringattn.set_log_sink(None)\n"
        "ringattn.set_log_level('debug')\n"
        "ringattn.set_log_sink(sink)\n"
        "with ringattn.Ring(rank=0, world_size=1, threads=1) as ring:\n"
        "    q = np.ones((8, 2, 32), np.float32)\n"
        "    ring.forward(q, q, q)\n"
        "    ring.forward(q, q, q)\n"
        "ringattn.set_log_sink(lambda *line: None)  # installed and removed again from outside: no hang either\n"
        "ringattn.set_log_sink(None)\n"
        "print(len(lines))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"  # one line reached the sink before it removed itself


def test_close_and_context_manager():
    ring = ringattn.Ring(rank=0, world_size=1)
    with ring as r:
        assert r is ring and not ring.closed and not ring.broken
    assert ring.closed
    ring.close()  # idempotent
    with pytest.raises(ringattn.Error, match="closed"):
        ring.forward(*(np.zeros((1, 1, 32), np.float32),) * 3)
    assert "closed" in repr(ring)


def test_shard_positions():
    p = ringattn.shard_positions("zigzag", 12, 2, 0)
    assert p.dtype == np.int64 and p.tolist() == [0, 1, 2, 9, 10, 11]
    assert ringattn.shard_positions("striped", 7, 3, 1).tolist() == [1, 4]
    with pytest.raises(ValueError, match="diagonal"):
        ringattn.shard_positions("diagonal", 10, 2, 0)
    with pytest.raises(ValueError, match="rank 2"):
        ringattn.shard_positions("zigzag", 10, 2, 2)


def test_exception_classes():
    assert issubclass(ringattn.Error, RuntimeError)
    assert issubclass(ringattn.InvalidArgument, ringattn.Error) and issubclass(ringattn.InvalidArgument, ValueError)
    assert issubclass(ringattn.NetworkError, ringattn.Error)
    assert issubclass(ringattn.FileError, ringattn.Error) and issubclass(ringattn.FileError, OSError)
    with pytest.raises(ValueError, match="loud"):
        ringattn.set_log_level("loud")
    with pytest.raises(ValueError, match="callable"):
        ringattn.set_log_sink(42)
