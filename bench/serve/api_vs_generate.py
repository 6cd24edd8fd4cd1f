#!/usr/bin/env python3
"""The OpenAI-style endpoint against `ringattn generate` of the same prompt, same run, same
machine (issue 18's target: time to first token and tokens/s through the endpoint >= 0.9x
generate's).

  bench/serve/api_vs_generate.py [--model-dir DIR] [--nodes P] [--rounds R] [--max-tokens N] [--out FILE]

Starts P daemons hosting the model on loopback (one kernel thread each), then alternates per
round: one streamed completion through the endpoint (time to first token: request sent ->
first token's event; decode tokens/s: the tokens after the first over the time from the first
to the last event) and one `ringattn generate --nodes P --json` (its ranks' prefill time,
which is its time to first token on a formed ring, and its decode tokens/s). Medians over the
rounds; one JSON line per round and a summary line to --out (default
bench/results/serve/api.jsonl).
"""
import argparse
import http.client
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RA = os.path.join(ROOT, "build", "ringattn")


def free_ports(n):
    """n distinct free ports: all held until all are chosen (one at a time may repeat)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def stream(api, token, prompt, max_tokens):
    conn = http.client.HTTPConnection(api, timeout=120)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Authorization": "Bearer " + token})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()))
    times, text = [], ""
    while True:
        line = resp.readline().decode()
        if not line:
            break
        if not line.startswith("data: "):
            continue
        data = line[6:].strip()
        if data == "[DONE]":
            break
        e = json.loads(data)
        piece = e["choices"][0]["text"]
        if piece:
            times.append(time.perf_counter())
            text += piece
    conn.close()
    return {"ttft": times[0] - t0, "decode_tps": (len(times) - 1) / (times[-1] - times[0]), "tokens": len(times), "text": text}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=os.environ.get("RINGATTN_MODEL_DIR", os.path.join(ROOT, "..", "shared", "models", "stories260K")))
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=252)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "serve", "api.jsonl"))
    a = ap.parse_args()
    model, tok = os.path.join(a.model_dir, "stories260K.bin"), os.path.join(a.model_dir, "tok512.bin")
    work = tempfile.mkdtemp()
    token_file = os.path.join(work, "token")
    token = os.urandom(16).hex()
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(token)
    master, api, *controls = free_ports(2 + a.nodes)
    daemons = []
    try:
        for r in range(a.nodes):
            daemons.append(subprocess.Popen(
                [RA, "serve", "--rank", str(r), "--world-size", str(a.nodes), "--master", "127.0.0.1:%d" % master,
                 "--listen", "127.0.0.1", "--control", "127.0.0.1:%d" % controls[r], "--metrics", "off",
                 "--token-file", token_file, "--threads", "1", "--model", model, "--tokenizer", tok,
                 "--api", "127.0.0.1:%d" % api], stderr=open(os.path.join(work, "rank%d.log" % r), "w")))
        api_addr = "127.0.0.1:%d" % api
        for _ in range(300):
            try:
                stream(api_addr, token, a.prompt, 2)
                break
            except Exception:
                time.sleep(0.1)
        rows = []
        for i in range(a.rounds):
            s = stream(api_addr, token, a.prompt, a.max_tokens)
            g = json.loads(subprocess.run([RA, "generate", "--model", model, "--tokenizer", tok, "--prompt", a.prompt,
                                           "--max-tokens", str(a.max_tokens), "--nodes", str(a.nodes), "--threads", "1",
                                           "--json"], check=True, capture_output=True, text=True).stdout)
            same = a.prompt + s["text"] == g["results"][0]["text"]
            rows.append({"round": i, "api_ttft_s": s["ttft"], "api_decode_tokens_per_s": s["decode_tps"],
                         "generate_prefill_s": g["prefill_seconds"], "generate_decode_tokens_per_s": g["decode_tokens_per_s"],
                         "same_text": same})
            print("round %d: endpoint ttft %.4f s, %.0f tok/s; generate prefill %.4f s, %.0f tok/s; same text %s" %
                  (i, s["ttft"], s["decode_tps"], g["prefill_seconds"], g["decode_tokens_per_s"], same), file=sys.stderr)
        med = lambda k: statistics.median(r[k] for r in rows)
        summary = {"bench": "api_vs_generate", "cpu": cpu_name(), "vcpus": os.cpu_count(), "nodes": a.nodes,
                   "max_tokens": a.max_tokens, "rounds": a.rounds, "prompt": a.prompt,
                   "api_ttft_s": med("api_ttft_s"), "generate_prefill_s": med("generate_prefill_s"),
                   "ttft_ratio_generate_over_api": med("generate_prefill_s") / med("api_ttft_s"),
                   "api_decode_tokens_per_s": med("api_decode_tokens_per_s"),
                   "generate_decode_tokens_per_s": med("generate_decode_tokens_per_s"),
                   "decode_ratio_api_over_generate": med("api_decode_tokens_per_s") / med("generate_decode_tokens_per_s"),
                   "all_same_text": all(r["same_text"] for r in rows),
                   "command": "bench/serve/api_vs_generate.py " + " ".join(sys.argv[1:])}
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.out + ".tmp", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.write(json.dumps(summary) + "\n")
        os.replace(a.out + ".tmp", a.out)
        print(json.dumps(summary))
    finally:
        for d in daemons:
            d.kill()
        for d in daemons:
            d.wait()


if __name__ == "__main__":
    main()
