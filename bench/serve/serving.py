#!/usr/bin/env python3
"""Serving under load: Poisson arrivals of mixed streamed requests against the daemons'
endpoint (continuous batching, the prefix cache), against the batch-at-a-time endpoint
before them (commit 380f217, built elsewhere: --baseline) and against llama.cpp's
multi-sequence context on the same GGUF file, all in one run on one machine.

  bench/serve/serving.py [--ringattn EXE] [--baseline EXE] [--scenario mixed,short,cached]
                         [--systems ringattn,baseline,llamacpp] [--nodes 2,3] [--rate R] [--out FILE]

The model: issue 44's shape (4 layers, dim 2048, 32 query / 8 K/V heads of 64, MLP 8192,
context 8192) with Llama 2's tokenizer (32000 ids, its real tokenizer.json from the tests' npm
cache), seeded weights as bf16 matrices, written once by bench/llamacpp/write_gguf.py into
/var/cache/ringattn-bench/models (never the tree); every daemon and llama.cpp load that file.

Scenarios (each a list of measurements; every daemon one kernel thread, loopback, free ports,
a token file; every process stopped, also on failure):
  mixed   --requests (32) requests, Poisson arrivals at --rate (0.4) a second (seed --seed), a
          stated mix of prompts (random ids after BOS): --long (4) of them log-uniform in
          [1024, 4096] tokens, the longest set to 4096, the others log-uniform in [64, 512]
          (16,092 prompt tokens with seed 1: all 32 log-uniform in [64, 4096] would be ~31,000,
          more than this 2-vCPU machine prefills in the arrivals' span); 16-256 new tokens
          (uniform), greedy, streamed; per request its time to first token (sent -> first token's event)
          and inter-token gaps; per system output tokens/s over the makespan (first arrival ->
          last token), TTFT and ITL p50/p99. Systems: the daemons at each --nodes P, the
          baseline's at each P, llama.cpp once (2 threads in all: the machine's 2 vCPUs that
          the ring's daemons share; a sequence per request; node-llama-cpp's batcher, 512 tokens
          a batch).
  short   a 64-token prompt, 16 new, sent while a 400-token reply streams (after its 32nd
          token) vs. the same-sized request on an idle ring: TTFT ratio (target <= 3x); for the
          daemons and the baseline at P = --acceptance-nodes (2), --repeats times.
  cached  a 2000-token prompt (BOS + 1999 ids) sent twice without a session, 16 new tokens:
          the second's usage.prompt_tokens_details.cached_tokens over its prompt (target >= 90%)
          and its TTFT over the first's (target <= 0.3x); every repeat a fresh prompt,
          --cached-repeats (5) times for each of --cached-gaps (0 and 0.5 s: the second sent
          the moment the first's [DONE] arrives, and half a second later).

Writes one JSON line per request or repeat and one summary per configuration to --out
(bench/results/serve/serving.jsonl), a plot beside it (serving.png: TTFT CDFs and p50/p99
bars; python3-matplotlib) and prints a Markdown table. Progress goes to stderr.
"""
import argparse
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "bench", "serve")
TOKENIZERS_NODE = os.path.join(ROOT, "tests", "model", "tokenizers_node", "run.sh")
SHAPE = dict(dim=2048, layers=4, heads=32, kv_heads=8, head_dim=64, ffn=8192, context=8192)
BOS = 1


def log(msg):
    print("serving: " + msg, file=sys.stderr, flush=True)


def cpu_desc():
    info = {}
    for line in open("/proc/cpuinfo"):
        k, _, v = line.partition(":")
        info.setdefault(k.strip(), v.strip())
    return "%s (family %s, model %s), %d vCPUs" % (info.get("model name"), info.get("cpu family"), info.get("model"),
                                                 os.cpu_count())


def cpu_snapshot(pids):
    """Busy CPU seconds of the whole machine, and of this process and `pids` (its children)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick  # user, nice, system, irq, softirq
    t = os.times()
    ours = t.user + t.system
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ours += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except OSError:
            pass
    return busy, ours, time.time()


def others_share(a, b):
    """The share of the machine's CPUs that other processes used between two snapshots:
    the lead's builds and tests share this VM, and two vCPUs notice every compile."""
    return round(max(0.0, (b[0] - a[0]) - (b[1] - a[1])) / ((b[2] - a[2]) * os.cpu_count()), 3)


def free_ports(n):
    """n distinct free ports: all held until all are chosen (one at a time may repeat)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cache_dir():
    d = "/var/cache/ringattn-bench"
    if not os.access(os.path.dirname(d), os.W_OK) and not os.path.isdir(d):
        d = os.path.expanduser("~/.cache/ringattn-bench")
    return d


def model_file(seed):
    """The GGUF file every system loads, written once (bench/llamacpp/write_gguf.py)."""
    s = SHAPE
    path = os.path.join(cache_dir(), "models", "serving-seed%d-llama2tok-d%d-l%d-h%d-kv%d-f%d-c%d-bf16.gguf" % (
        seed, s["dim"], s["layers"], s["heads"], s["kv_heads"], s["ffn"], s["context"]))
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tok = tempfile.mkdtemp()
    try:
        subprocess.run(["bash", TOKENIZERS_NODE, "install"], check=True, stdout=sys.stderr)
        subprocess.run(["bash", TOKENIZERS_NODE, "files", "llama2", tok], check=True)
        log("writing " + path)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "llamacpp", "write_gguf.py"), "--seed", str(seed),
                        "--tokenizer", tok, "--dtype", "bf16", "--out", path] +
                       [a for k, v in s.items() for a in ("--" + k.replace("_", "-"), str(v))], check=True)
    finally:
        shutil.rmtree(tok)
    return path


def build_rev(exe):
    """The commit a build's source tree is at (its build directory sits in the tree)."""
    r = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(exe)), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() or None


def llama_dir():
    subprocess.run(["bash", TOKENIZERS_NODE, "install-llama"], check=True, stdout=sys.stderr)
    return subprocess.run(["bash", TOKENIZERS_NODE, "llama-dir"], check=True, capture_output=True, text=True).stdout.strip()


class Ring:
    """P daemons hosting the model on loopback, one kernel thread each; stopped on exit."""

    def __init__(self, exe, nodes, model):
        self.exe, self.nodes, self.model = exe, nodes, model

    def __enter__(self):
        self.work = tempfile.mkdtemp(prefix="serving-")
        token_file = os.path.join(self.work, "token")
        self.token = os.urandom(16).hex()
        with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(self.token)
        # The daemons run under names of their own (a link to the binary, one to the model):
        # a `pkill -f "ringattn serve"` elsewhere on a shared machine, which stopped this
        # bench's daemons mid-run twice, then leaves them alone.
        exe, model = os.path.join(self.work, "ra-serving"), os.path.join(self.work, "model.gguf")
        os.symlink(os.path.abspath(self.exe), exe)
        os.symlink(os.path.abspath(self.model), model)
        master, api, *controls = free_ports(2 + self.nodes)
        self.api = "127.0.0.1:%d" % api
        self.daemons = []
        try:
            for r in range(self.nodes):
                self.daemons.append(subprocess.Popen(
                    [exe, "serve", "--rank", str(r), "--world-size", str(self.nodes), "--master", "127.0.0.1:%d" % master,
                     "--listen", "127.0.0.1", "--control", "127.0.0.1:%d" % controls[r], "--metrics", "off",
                     "--token-file", token_file, "--threads", "1", "--model", model] +
                    (["--api", self.api] if r == 0 else []),
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "rank%d.log" % r), "w")))
            deadline = time.time() + 300
            while True:
                if any(d.poll() is not None for d in self.daemons):
                    raise RuntimeError("a daemon exited while the ring formed")
                try:
                    # ready, and warm: a prefill over the ring and a few decode steps
                    stream(self.api, self.token, list(range(3, 259)), 8)
                    break
                except (OSError, RuntimeError, http.client.HTTPException):
                    if time.time() > deadline:
                        raise
                    time.sleep(0.2)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind, value, tb):
        for d in self.daemons:
            d.kill()
        for d in self.daemons:
            d.wait()
        if kind is not None:
            for r in range(len(self.daemons)):
                with open(os.path.join(self.work, "rank%d.log" % r)) as f:
                    log("rank %d's log ends:\n%s" % (r, "".join(f.readlines()[-15:])))
        shutil.rmtree(self.work, ignore_errors=True)


def stream(api, token, ids, max_tokens, on_event=None, client=1):
    """One streamed greedy completion of token ids (the endpoint adds BOS): the time it was
    sent, every event's time (perf_counter), and the usage chunk. `client` picks the source
    address 127.0.1.<client>: the endpoint holds at most 16 requests of one address at once,
    so concurrent requests come from addresses of their own, as from clients of their own."""
    conn = http.client.HTTPConnection(api, timeout=600, source_address=("127.0.1.%d" % client, 0))
    body = json.dumps({"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    sent = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Authorization": "Bearer " + token})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
    times, usage, finish = [], None, None
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue  # blank separators, keep-alive comments
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        e = json.loads(data)
        if "error" in e:
            raise RuntimeError("error event: %s" % json.dumps(e["error"])[:300])
        if e.get("usage"):
            usage = e["usage"]
        for c in e.get("choices", []):
            if c.get("text"):
                times.append(time.perf_counter())
                if on_event:
                    on_event(len(times))
            finish = c.get("finish_reason") or finish
    conn.close()
    if not times:
        raise RuntimeError("a stream without a token")
    return {"sent": sent, "times": times, "usage": usage, "finish": finish}


def workload(seed, n, rate, vocab, long):
    """n requests: Poisson arrivals (the first at 0), `long` of them with prompts log-uniform in
    [1024, 4096] tokens (the longest set to 4096) and the rest log-uniform in [64, 512], in a
    random order (long < 0: all log-uniform in [64, 4096]); new tokens uniform in [16, 256]."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=n)
    arrival = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    loguniform = lambda lo, hi, k: np.rint(np.exp(rng.uniform(math.log(lo), math.log(hi), size=k))).astype(int)
    if long < 0:
        lengths = loguniform(64, 4096, n)
    else:
        tail = loguniform(1024, 4096, long)
        if long:
            tail[np.argmax(tail)] = 4096
        lengths = rng.permutation(np.concatenate([loguniform(64, 512, n - long), tail]))
    new = rng.integers(16, 257, size=n)
    return [{"id": i, "arrival_s": float(arrival[i]), "prompt_tokens": int(lengths[i]), "max_tokens": int(new[i]),
             "ids": rng.integers(3, vocab, size=int(lengths[i]) - 1).tolist()}  # after BOS: BOS + ids = the prompt
            for i in range(n)]


def request_row(times_since_sent, completion_tokens):
    t = times_since_sent
    return {"ttft_s": round(t[0], 5), "token_s": [round(x, 4) for x in t], "events": len(t),
            "completion_tokens": completion_tokens}


def gaps_of(row):
    t = row["token_s"]
    return [b - a for a, b in zip(t, t[1:])]


def run_ring_mixed(ring, reqs):
    rows, errors = [None] * len(reqs), []
    start = time.perf_counter() + 0.5
    done = [0]

    def one(r):
        time.sleep(max(0.0, start + r["arrival_s"] - time.perf_counter()))
        try:
            s = stream(ring.api, ring.token, r["ids"], r["max_tokens"], client=1 + r["id"] % 250)
        except Exception as e:  # noqa: BLE001 (reported, the run fails below)
            errors.append("request %d: %s" % (r["id"], e))
            return
        row = request_row([x - s["sent"] for x in s["times"]], s["usage"]["completion_tokens"])
        row.update(id=r["id"], arrival_s=r["arrival_s"], sent_s=round(s["sent"] - start, 5),
                   end_s=round(s["times"][-1] - start, 5), prompt_tokens=s["usage"]["prompt_tokens"],
                   max_tokens=r["max_tokens"], finish_reason=s["finish"])
        rows[r["id"]] = row
        done[0] += 1
        log("  %2d/%d done: request %d (%d prompt tokens, %d new) ttft %.2f s" %
            (done[0], len(reqs), r["id"], row["prompt_tokens"], row["completion_tokens"], row["ttft_s"]))

    threads = [threading.Thread(target=one, args=(r,)) for r in reqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return rows


def run_llamacpp_mixed(model, reqs, threads, nlc):
    work = tempfile.mkdtemp(prefix="serving-llama-")
    try:
        path = os.path.join(work, "requests.json")
        with open(path, "w") as f:
            json.dump([{"id": r["id"], "arrival_s": r["arrival_s"], "tokens": [BOS] + r["ids"], "max_tokens": r["max_tokens"]}
                       for r in reqs], f)
        env = dict(os.environ, NODE_LLAMA_CPP_DIR=nlc, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true", NODE_LLAMA_CPP_GPU="false")
        p = subprocess.Popen(["node", os.path.join(HERE, "serving_llamacpp.mjs"), "--model", model, "--requests", path,
                              "--threads", str(threads)], stdout=subprocess.PIPE, text=True, env=env)
        rows, summary, before = [None] * len(reqs), None, None
        try:
            for line in p.stdout:
                o = json.loads(line)
                if o.get("ready"):
                    before = cpu_snapshot([p.pid])
                elif o.get("summary"):
                    summary = dict(o, others_cpu_share=others_share(before, cpu_snapshot([p.pid])))
                elif "id" in o:
                    r = reqs[o["id"]]
                    row = request_row(o["token_s"], len(o["tokens"]))
                    row.update(id=r["id"], arrival_s=r["arrival_s"], sent_s=round(o["sent_s"], 5),
                               end_s=round(o["sent_s"] + o["token_s"][-1], 5), prompt_tokens=r["prompt_tokens"],
                               max_tokens=r["max_tokens"],
                               finish_reason="length" if len(o["tokens"]) == r["max_tokens"] else "stop")
                    rows[r["id"]] = row
                    log("  %2d/%d done: request %d (%d prompt tokens, %d new) ttft %.2f s" %
                        (sum(x is not None for x in rows), len(reqs), r["id"], r["prompt_tokens"], len(o["tokens"]),
                         row["ttft_s"]))
        finally:
            if p.poll() is None and summary is None:
                p.kill()
            p.wait()
        if p.returncode != 0 or summary is None:
            raise RuntimeError("serving_llamacpp.mjs failed (exit %s)" % p.returncode)
        return rows, summary
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pct(xs, q):
    return float(np.percentile(np.asarray(xs, dtype=float), q))


def summarize_mixed(rows):
    ttft = [r["ttft_s"] for r in rows]
    itl = [g for r in rows for g in gaps_of(r)]
    out = sum(r["completion_tokens"] for r in rows)
    makespan = max(r["end_s"] for r in rows) - min(r["sent_s"] for r in rows)
    return {"requests": len(rows), "output_tokens": out, "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
            "makespan_s": round(makespan, 3), "throughput_tokens_per_s": round(out / makespan, 2),
            "ttft_p50_s": round(pct(ttft, 50), 4), "ttft_p99_s": round(pct(ttft, 99), 4),
            "itl_p50_s": round(pct(itl, 50), 5), "itl_p99_s": round(pct(itl, 99), 5),
            "events_equal_tokens": all(r["events"] == r["completion_tokens"] for r in rows)}


def fresh_ids(rng, n, vocab):
    return rng.integers(3, vocab, size=n).tolist()


def scenario_short(ring, rng, vocab, repeats, after=32, long_tokens=400):
    """A short request on an idle ring, then the same-sized one while a long reply streams."""
    rows = []
    for k in range(repeats):
        idle = stream(ring.api, ring.token, fresh_ids(rng, 63, vocab), 16)
        reached = threading.Event()
        result = {}

        def long_reply():
            try:
                result["s"] = stream(ring.api, ring.token, fresh_ids(rng_long, 63, vocab), long_tokens,
                                     on_event=lambda n: n >= after and reached.set(), client=2)
            finally:
                reached.set()

        rng_long = np.random.default_rng(rng.integers(1 << 30))
        t = threading.Thread(target=long_reply)
        t.start()
        reached.wait()
        loaded = stream(ring.api, ring.token, fresh_ids(rng, 63, vocab), 16)
        t.join()
        if "s" not in result:
            raise RuntimeError("the long reply failed")
        lng = result["s"]
        long_at = sum(1 for x in lng["times"] if x < loaded["sent"])
        row = {"repeat": k, "idle_ttft_s": round(idle["times"][0] - idle["sent"], 5),
               "loaded_ttft_s": round(loaded["times"][0] - loaded["sent"], 5),
               "long_tokens": lng["usage"]["completion_tokens"], "long_tokens_before_short": long_at,
               "long_tokens_during_short_ttft": sum(1 for x in lng["times"] if loaded["sent"] <= x < loaded["times"][0])}
        row["ratio"] = round(row["loaded_ttft_s"] / row["idle_ttft_s"], 3)
        rows.append(row)
        log("  short, repeat %d: idle %.3f s, beside a streaming reply %.3f s: %.1fx" %
            (k, row["idle_ttft_s"], row["loaded_ttft_s"], row["ratio"]))
    return rows


def scenario_cached(ring, rng, vocab, repeats, gap, prompt=2000):
    """A 2000-token prompt sent twice, no session, the second `gap` seconds after the first's
    [DONE]: the second's cached tokens and TTFT."""
    rows = []
    for k in range(repeats):
        ids = fresh_ids(rng, prompt - 1, vocab)
        first = stream(ring.api, ring.token, ids, 16)
        time.sleep(gap)
        second = stream(ring.api, ring.token, ids, 16)
        u = second["usage"]
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        row = {"repeat": k, "gap_s": gap, "prompt_tokens": u["prompt_tokens"], "cached_tokens": cached,
               "cached_share": round(cached / u["prompt_tokens"], 4) if cached is not None else None,
               "first_ttft_s": round(first["times"][0] - first["sent"], 5),
               "second_ttft_s": round(second["times"][0] - second["sent"], 5)}
        row["ratio"] = round(row["second_ttft_s"] / row["first_ttft_s"], 4)
        rows.append(row)
        log("  cached, repeat %d: %s of %d prompt tokens cached; ttft %.3f s then %.3f s: %.3fx" %
            (k, cached, u["prompt_tokens"], row["first_ttft_s"], row["second_ttft_s"], row["ratio"]))
    return rows


def med_range(xs):
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}


def plot(summaries, mixed_rows, path):
    """TTFT CDFs and ITL p50/p99 bars of the mixed scenario, one line / pair of bars a system."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib (apt-get install python3-matplotlib): no plot")
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    for label, rows in mixed_rows.items():
        t = sorted(r["ttft_s"] for r in rows)
        a.step(t, [(i + 1) / len(t) for i in range(len(t))], where="post", label=label)
    a.set_xscale("log")
    a.set_xlabel("time to first token (s)")
    a.set_ylabel("share of requests")
    a.set_title("TTFT CDF", fontsize=10)
    a.legend(fontsize=7)
    labels = list(mixed_rows)
    x = np.arange(len(labels))
    p50 = [summaries[lb]["itl_p50_s"] * 1e3 for lb in labels]
    p99 = [summaries[lb]["itl_p99_s"] * 1e3 for lb in labels]
    b.bar(x - 0.2, p50, 0.4, label="p50")
    b.bar(x + 0.2, p99, 0.4, label="p99")
    b.set_yscale("log")
    b.set_xticks(x, [lb.replace("batch-at-a-time ", "batch ").replace(" ", "\n") for lb in labels], fontsize=7)
    b.set_ylabel("inter-token latency (ms)")
    b.set_title("ITL p50 / p99", fontsize=10)
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    log("wrote " + path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringattn", default=os.path.join(ROOT, "build", "ringattn"), help="this tree's build")
    ap.add_argument("--baseline", help="ringattn built at 380f217 (batch at a time); without it the baseline is skipped")
    ap.add_argument("--baseline-name", default="380f217")
    ap.add_argument("--model", help="a GGUF file (default: the seeded one, written once into the bench cache)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenario", default="mixed,short,cached")
    ap.add_argument("--systems", default="ringattn,baseline,llamacpp")
    ap.add_argument("--nodes", default="2,3")
    ap.add_argument("--acceptance-nodes", type=int, default=2)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--long", type=int, default=4, help="requests with prompts of 1024-4096 tokens (the others "
                    "64-512); -1: every prompt log-uniform in [64, 4096]")
    ap.add_argument("--rate", type=float, default=0.4, help="Poisson arrivals a second")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cached-gaps", default="0,0.5", help="seconds between the first reply's end and the second "
                    "request in the cached scenario, each a measurement of its own")
    ap.add_argument("--cached-repeats", type=int, default=5)
    ap.add_argument("--llama-threads", default="2,1", help="llama.cpp's threads, each a run of its own (2: the "
                    "machine's 2 vCPUs, as the daemons' 2 x 1; 1: immune to a busy core, see SERVING.md)")
    ap.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    ap.add_argument("--report-only", action="store_true", help="print the table and draw the plot from --out")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "serve", "serving.jsonl"))
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # daemons stopped by the finally blocks
    scenarios, systems = a.scenario.split(","), a.systems.split(",")
    nodes = [int(n) for n in a.nodes.split(",")]
    gaps = [float(g) for g in a.cached_gaps.split(",")]
    llama_threads = [int(t) for t in a.llama_threads.split(",")]
    if a.report_only:
        report(a.out)
        return
    command = "bench/serve/serving.py " + " ".join(sys.argv[1:])
    cpu = cpu_desc()
    model = a.model or model_file(a.seed)
    vocab = 32000
    builds = [("ringattn", a.ringattn)] + ([("baseline", a.baseline)] if a.baseline and "baseline" in systems else [])
    builds = [(k, exe) for k, exe in builds if k in systems]
    name = {"ringattn": "ringattn", "baseline": "batch-at-a-time " + a.baseline_name}
    log("%s; model %s; scenarios %s" % (cpu, model, a.scenario))
    t_all = time.time()

    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    partial = a.out + ".partial"
    if a.append and os.path.exists(a.out):
        shutil.copy(a.out, partial)
    out = open(partial, "a" if a.append else "w")
    common = {"cpu": cpu, "model": os.path.basename(model), "command": command}

    def emit(o):
        out.write(json.dumps(dict(o, **common) if o.get("summary") else o) + "\n")
        out.flush()

    reqs = workload(a.seed, a.requests, a.rate, vocab, a.long)
    try:
        if "mixed" in scenarios:
            log("mixed: %d requests, Poisson %.3g/s over %.0f s, %d prompt tokens, up to %d new" % (
                len(reqs), a.rate, reqs[-1]["arrival_s"], sum(r["prompt_tokens"] for r in reqs),
                sum(r["max_tokens"] for r in reqs)))
        for kind, exe in builds:
            for p in nodes:
                todo = ["mixed"] if "mixed" in scenarios else []
                todo += [s for s in ("short", "cached") if s in scenarios and p == a.acceptance_nodes]
                if not todo:
                    continue
                label = "%s P=%d" % (name[kind], p)
                log("%s: starting %d daemons (%s)" % (label, p, exe))
                with Ring(exe, p, model) as ring:
                    if "mixed" in todo:
                        log("%s: mixed arrivals" % label)
                        before = cpu_snapshot([d.pid for d in ring.daemons])
                        rows = run_ring_mixed(ring, reqs)
                        others = others_share(before, cpu_snapshot([d.pid for d in ring.daemons]))
                        for r in rows:
                            emit(dict(r, scenario="mixed", system=label))
                        s = dict(summarize_mixed(rows), others_cpu_share=others)
                        emit(dict(s, scenario="mixed", system=label, summary=True, nodes=p, threads_per_daemon=1,
                                  rate_per_s=a.rate, seed=a.seed, long=a.long, commit=build_rev(exe)))
                        log("%s: %s" % (label, json.dumps(s)))
                    rng = np.random.default_rng([a.seed, p, 7])  # the same fresh prompts for both builds
                    if "short" in todo:
                        log("%s: a short request beside a streaming reply" % label)
                        before = cpu_snapshot([d.pid for d in ring.daemons])
                        rows = scenario_short(ring, rng, vocab, a.repeats)
                        others = others_share(before, cpu_snapshot([d.pid for d in ring.daemons]))
                        for r in rows:
                            emit(dict(r, scenario="short", system=label))
                        s = {"ratio": med_range([r["ratio"] for r in rows]),
                             "idle_ttft_s": med_range([r["idle_ttft_s"] for r in rows]),
                             "loaded_ttft_s": med_range([r["loaded_ttft_s"] for r in rows]), "others_cpu_share": others}
                        emit(dict(s, scenario="short", system=label, summary=True, repeats=a.repeats, target="ratio <= 3"))
                    if "cached" in todo:
                        for gap in gaps:
                            log("%s: a 2000-token prompt twice, the second %g s after the first's end" % (label, gap))
                            before = cpu_snapshot([d.pid for d in ring.daemons])
                            rows = scenario_cached(ring, rng, vocab, a.cached_repeats, gap)
                            others = others_share(before, cpu_snapshot([d.pid for d in ring.daemons]))
                            for r in rows:
                                emit(dict(r, scenario="cached", system=label))
                            s = {"gap_s": gap, "ratio": med_range([r["ratio"] for r in rows]),
                                 "first_ttft_s": med_range([r["first_ttft_s"] for r in rows]),
                                 "second_ttft_s": med_range([r["second_ttft_s"] for r in rows]),
                                 "cached_share": (med_range([r["cached_share"] for r in rows])
                                                  if all(r["cached_share"] is not None for r in rows) else None),
                                 "hits": sum(1 for r in rows if r["cached_tokens"]), "others_cpu_share": others}
                            emit(dict(s, scenario="cached", system=label, summary=True, repeats=a.cached_repeats,
                                      target="cached_share >= 0.9, ratio <= 0.3"))
                log("%s: stopped (%.0f s into the run)" % (label, time.time() - t_all))
        for threads in (llama_threads if "mixed" in scenarios and "llamacpp" in systems else []):
            label = "llama.cpp %d thread%s" % (threads, "s" if threads > 1 else "")
            log("%s: mixed arrivals (node-llama-cpp, a sequence per request)" % label)
            rows, info = run_llamacpp_mixed(model, reqs, threads, llama_dir())
            for r in rows:
                emit(dict(r, scenario="mixed", system=label))
            s = dict(summarize_mixed(rows), others_cpu_share=info["others_cpu_share"])
            emit(dict(s, scenario="mixed", system=label, summary=True, rate_per_s=a.rate, seed=a.seed, long=a.long,
                      llama_cpp=info["llama_cpp"]["release"], node_llama_cpp=info["node_llama_cpp"],
                      threads=info["threads"], batch_size=info["batch_size"], sequences=info["sequences"],
                      context_size_per_sequence=info["context_size_per_sequence"]))
            log("%s: %s" % (label, json.dumps(s)))
    finally:
        out.close()
    os.replace(partial, a.out)
    log("wrote %s (%.0f s in all)" % (a.out, time.time() - t_all))
    report(a.out)


def report(path):
    """The table, the acceptance lines and the plot, from every line of the results file."""
    rows = [json.loads(line) for line in open(path)]
    summaries, mixed_rows = {}, {}
    for r in rows:
        if r["scenario"] == "mixed" and r.get("summary"):
            summaries[r["system"]] = r
        elif r["scenario"] == "mixed":
            mixed_rows.setdefault(r["system"], []).append(r)
    if mixed_rows:
        plot(summaries, mixed_rows, os.path.splitext(path)[0] + ".png")
    first = next(r for r in rows if r.get("summary"))
    print("%s; `%s`" % (first["cpu"], first["command"]))
    other = lambda s: "%.0f%%" % (100 * s["others_cpu_share"]) if "others_cpu_share" in s else "-"
    if summaries:
        print("\n| system | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | output tokens/s | makespan | other processes' CPU |")
        print("|---|---|---|---|---|---|---|---|")
        for label, s in summaries.items():
            print("| %s | %.2f s | %.2f s | %.1f ms | %.1f ms | %.1f | %.1f s | %s |" % (
                label, s["ttft_p50_s"], s["ttft_p99_s"], s["itl_p50_s"] * 1e3, s["itl_p99_s"] * 1e3,
                s["throughput_tokens_per_s"], s["makespan_s"], other(s)))
    for s in rows:
        if not s.get("summary"):
            continue
        if s["scenario"] == "short":
            print("%s, short beside a 400-token stream: TTFT %.3f s vs %.3f s idle: ratio %.2fx (min %.2f, max %.2f; "
                  "target <= 3; others' CPU %s)" % (s["system"], s["loaded_ttft_s"]["median"], s["idle_ttft_s"]["median"],
                                                    s["ratio"]["median"], s["ratio"]["min"], s["ratio"]["max"], other(s)))
        if s["scenario"] == "cached":
            share = "%.2f%%" % (100 * s["cached_share"]["median"]) if s["cached_share"] else "none reported"
            print("%s, 2000-token prompt twice (the second %g s after the first's end): cached %s (%d of %d repeats "
                  "hit); TTFT %.3f s then %.3f s: ratio %.3fx (min %.3f, max %.3f; target <= 0.3; others' CPU %s)" % (
                      s["system"], s["gap_s"], share, s["hits"], s["repeats"], s["first_ttft_s"]["median"],
                      s["second_ttft_s"]["median"], s["ratio"]["median"], s["ratio"]["min"], s["ratio"]["max"], other(s)))


if __name__ == "__main__":
    main()
