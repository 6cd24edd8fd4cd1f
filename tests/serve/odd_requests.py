#!/usr/bin/env python3
"""No request can break the ring: hundreds of odd requests against three daemons hosting
stories260K, alone and mixed with good ones, and then the ring still answers exactly.

  odd_requests.py RINGATTN [--seed S] [--rounds N]

Starts three `ringattn serve` on 127.0.0.1 (free ports, each in its own process group,
killed on every exit), then
  1. sends every odd request of a seeded list one at a time (empty, huge and unicode
     prompts, wrong types, every parameter at and past its bounds, broken JSON, wrong
     methods, paths and headers): each must get a well-formed answer, never a 5xx — a 2xx
     with a completion or a stream that ends in [DONE], or a 4xx whose body is an OpenAI
     error object;
  2. after every 40 odd requests, a good one must still give llama2.c's exact text;
  3. sends them again from 6 threads at once, mixed with good requests, each good one exact;
  4. checks every daemon is healthy and the ring never re-formed.
Prints one line per failure and a closing count; exit 0 only if all held. Exit 77 (skip)
without the model files, unless CI=true (then 1).
"""
import http.client
import json
import os
import random
import signal
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_daemons import WORLD, Ring  # noqa: E402

PROMPT = "Once upon a time"
# llama2.c's 60 greedy tokens after the prompt (../shared/models/stories260K/README.md).
COMPLETION_60 = (", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, "
                 "red ball. She wanted to play with it, but it was too high.\nLily")


def skip(why):
    print("skipped: " + why)
    if os.environ.get("CI") == "true":
        print("FAILED: CI=true, so a missing prerequisite is a failure")
        sys.exit(1)
    sys.exit(77)


def send(ring, method, path, body, headers=None, auth=True):
    """One request on a new connection: (status, body text); status 0 if the connection failed."""
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = "Bearer " + ring.token
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", ring.api, timeout=120)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), r.getheader("Content-Type") or ""
    except (OSError, http.client.HTTPException) as e:
        return 0, "connection: %r" % e, ""
    finally:
        c.close()


def good(ring, stream):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 60, "temperature": 0, "stream": stream})
    status, text, _ = send(ring, "POST", "/v1/completions", body)
    if status != 200:
        return "good request: HTTP %d: %s" % (status, text[:300])
    try:
        got = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(text) if e != "[DONE]") if stream else \
            json.loads(text)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError) as e:
        return "good request: unreadable answer (%r): %s" % (e, text[:300])
    return None if got == COMPLETION_60 else "good request: wrong text %r" % got[:120]


def sse_events(text):
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def check_answer(status, text, ctype, page=False):
    """None if the answer is well-formed, else what is wrong with it (`page`: GET /, the page for people)."""
    if page:
        return None if status == 200 and "<title>ringattn</title>" in text else "GET /: HTTP %d, not the page" % status
    if status == 0:
        return "no answer (" + text + ")"
    if status >= 500:
        return "HTTP %d (a server error for a client's request): %s" % (status, text[:300])
    if status >= 400:
        try:
            e = json.loads(text)["error"]
            if not isinstance(e.get("message"), str) or not e["message"] or not isinstance(e.get("type"), str):
                return "HTTP %d: the error object lacks a message or a type: %s" % (status, text[:300])
        except (ValueError, KeyError, TypeError):
            return "HTTP %d without an OpenAI error object: %s" % (status, text[:300])
        return None
    if status != 200:
        return "HTTP %d" % status
    if ctype.startswith("text/event-stream"):
        events = sse_events(text)
        if not events or events[-1] != "[DONE]":
            return "a stream that does not end with [DONE]: ..." + text[-300:]
        for e in events[:-1]:
            j = json.loads(e)
            if "error" in j:
                return "a stream with an error event: " + e[:300]
        return None
    try:
        j = json.loads(text)
    except ValueError:
        return "HTTP 200 that is not JSON: " + text[:300]
    if "choices" not in j and j.get("object") not in ("list", "model", "session"):
        return "HTTP 200 that is neither a completion, a model nor a list: " + text[:300]
    return None


def odd_requests(rng):
    """(description, method, path, body bytes, headers, auth): a seeded, varied list."""
    out = []

    def post(desc, body, path="/v1/completions", headers=None, auth=True, method="POST"):
        if not isinstance(body, (bytes, str)):
            body = json.dumps(body, ensure_ascii=rng.random() < 0.5)
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        out.append((desc, method, path, body, headers, auth))

    # Bodies that are not a request.
    for b in ["", "null", "[]", "123", '"prompt"', "{", '{"prompt": "x"', '{"prompt": "x",}', "{'prompt': 'x'}",
              '{"prompt": "x"}garbage', '{"prompt": NaN}', '{"prompt": Infinity}', '{"max_tokens": 1e999, "prompt": "x"}',
              "\xef\xbb\xbf{\"prompt\": \"x\"}", '{"prompt": "\\ud800"}', '{"prompt": "\\u0000"}', '{"prompt": "a\\u0000b"}',
              "[" * 100000, '{"a":' * 5000 + "1" + "}" * 5000, '{"prompt": "x", "prompt": 5}']:
        post("body %r" % b[:40], b)
    post("invalid UTF-8 bytes", b'{"prompt": "\xff\xfe\xc3\x28"}')
    # Prompts.
    for p in ["", " ", "\n", "\t\t", "💥" * 50, "שלום עולם", "\u200b\u200d", "a" * 3000, "x " * 20000,
              "Once upon a time" * 200, None, 5, 1.5, True, [], [[]], ["a"], ["a", "b"], [1.5], [-1], [512], [511],
              [0], [1], [2], [1] * 600, [1e20], [True], [None], ["1"], {"text": "x"}]:
        post("prompt %r" % (p if not isinstance(p, (str, list)) or len(p) < 30 else type(p).__name__ + " of %d" % len(p)),
             {"prompt": p, "max_tokens": rng.choice([1, 2, 5])})
    post("a 600 KB prompt", {"prompt": "Once upon a time " * 36000, "max_tokens": 4})
    post("a body over 1 MiB", {"prompt": "x" * (1 << 20)})
    # Every parameter at and past its bounds, and of the wrong type.
    values = [None, 0, -1, 1, 2, 0.5, 1.0000001, 2 ** 31, 2 ** 53, 2 ** 64, -2 ** 63, 1e308, "5", "", True, [], {}]
    for key in ["max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "n", "stream", "session",
                "logprobs", "echo", "best_of", "presence_penalty", "frequency_penalty", "user", "suffix", "logit_bias"]:
        for v in values:
            post("%s=%r" % (key, v), {"prompt": rng.choice(["", PROMPT, "a"]), key: v,
                                      "max_tokens": v if key == "max_tokens" else rng.choice([1, 3])})
    for v in [0, 1, 510, 511, 512, 513, 100000]:
        post("max_tokens=%d with the prompt" % v, {"prompt": PROMPT, "max_tokens": v, "temperature": 0})
    for stop in ["", ".", [], [""], ["."], [".", ","], ["a"] * 4, ["a"] * 5, [5], "x" * 10000, None, {"a": 1}]:
        post("stop=%r" % (stop if not isinstance(stop, str) or len(stop) < 20 else "long"),
             {"prompt": PROMPT, "max_tokens": 20, "stop": stop, "stream": rng.random() < 0.5})
    for model in ["", "x", "stories260K", "gpt-4o-nonexistent", None, 5, "../../etc/passwd"]:
        post("model=%r" % model, {"prompt": PROMPT, "max_tokens": 2, "model": model})
    for so in [None, {}, {"include_usage": True}, {"include_usage": "yes"}, 5]:
        post("stream_options=%r" % so, {"prompt": PROMPT, "max_tokens": 3, "stream": True, "stream_options": so})
    for s in [True, False, "sess-0", "sess-999999999", "sess-", "sess-x", "s" * 100, 123, [], "sess-1"]:
        post("session=%r" % (s if not isinstance(s, str) or len(s) < 20 else "long"),
             {"prompt": "a", "max_tokens": 2, "session": s})
    # Chat.
    for msgs in [None, [], {}, "hi", [{}], [{"role": "user"}], [{"content": 5}], [{"role": "user", "content": ""}],
                 [{"role": "user", "content": None}], [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                 [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Once upon a time"}],
                 [{"role": "user", "content": "x"}] * 300, [{"role": 5, "content": "x"}], [[]], ["x"]]:
        post("chat messages %r" % (msgs if len(json.dumps(msgs)) < 60 else "of %d" % len(msgs)),
             {"messages": msgs, "max_tokens": 2, "stream": rng.random() < 0.3}, path="/v1/chat/completions")
    # Methods, paths, headers.
    for method, path in [("GET", "/v1/completions"), ("PUT", "/v1/completions"), ("DELETE", "/v1/completions"),
                         ("PATCH", "/v1/chat/completions"), ("POST", "/v1/models"), ("GET", "/v1/models/stories260K"),
                         ("POST", "/v1/completions/"), ("POST", "//v1/completions"), ("POST", "/v1/completions?x=1"),
                         ("POST", "/v1/" + "a" * 9000), ("DELETE", "/v1/sessions/sess-0"), ("DELETE", "/v1/sessions/x"),
                         ("GET", "/"), ("POST", "/v1/embeddings"), ("OPTIONS", "/v1/completions")]:
        post("%s %s" % (method, path[:40]), {"prompt": "a", "max_tokens": 1}, path=path, method=method)
    post("no bearer token", {"prompt": "a"}, auth=False)
    post("a wrong bearer token", {"prompt": "a"}, auth=False, headers={"Authorization": "Bearer wrong"})
    post("a malformed Authorization", {"prompt": "a"}, auth=False, headers={"Authorization": "Basic abc"})
    post("a text/plain body", {"prompt": PROMPT, "max_tokens": 2}, headers={"Content-Type": "text/plain"})
    post("a huge header", {"prompt": "a", "max_tokens": 1}, headers={"X-Big": "y" * 60000})
    # Random mixtures of the above keys and values.
    keys = ["prompt", "max_tokens", "temperature", "top_p", "seed", "stream", "stop", "n", "model", "session"]
    pool = values + ["", "x", PROMPT, [1, 2], [403, 407], {"k": "v"}]
    for i in range(120):
        body = {k: rng.choice(pool) for k in rng.sample(keys, rng.randint(1, len(keys)))}
        if rng.random() < 0.7:
            body["prompt"] = rng.choice(["", "a", PROMPT, [403], "💥"])
        if rng.random() < 0.8:
            body["max_tokens"] = rng.choice([1, 2, 8, 64])
        post("mixture %d" % i, body, path=rng.choice(["/v1/completions", "/v1/chat/completions"]))
    rng.shuffle(out)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = sys.argv[1]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.environ.get("RINGATTN_MODEL_DIR") or os.path.join(here, "..", "..", "..", "shared", "models", "stories260K")
    if not (os.path.isfile(os.path.join(model, "stories260K.bin")) and os.path.isfile(os.path.join(model, "tok512.bin"))):
        skip("no model at %s (set RINGATTN_MODEL_DIR)" % model)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # meson's timeout: the finally below still runs
    failures = []
    with tempfile.TemporaryDirectory(prefix="ringattn-odd-") as work:
        ring = Ring(exe, model, work)
        try:
            if not ring.wait_ready(90):
                print("FAILED: the ring never became ready\n" + ring.log(0)[-3000:])
                return 1
            requests = odd_requests(random.Random(seed))
            print("odd_requests: %d odd requests, seed %d" % (len(requests), seed), flush=True)

            def one(req):
                desc, method, path, body, headers, auth = req
                status, text, ctype = send(ring, method, path, body, headers, auth)
                why = check_answer(status, text, ctype, page=(method, path) == ("GET", "/"))
                if why:
                    failures.append("%s: %s" % (desc, why))
                return status

            statuses = {}
            for i, req in enumerate(requests):  # 1. alone, a good one after every 40
                s = one(req)
                statuses[s] = statuses.get(s, 0) + 1
                if i % 40 == 39:
                    why = good(ring, stream=i % 80 == 39)
                    if why:
                        failures.append("after %d odd requests: %s" % (i + 1, why))
                    print("  %d/%d alone, statuses so far %s" % (i + 1, len(requests), dict(sorted(statuses.items()))),
                          flush=True)

            lock = threading.Lock()  # 2. mixed: 6 threads, a good request between odd ones
            queue = list(requests)
            goods = [0]

            def worker(k):
                while True:
                    with lock:
                        if not queue:
                            return
                        req = queue.pop()
                    one(req)
                    if random.Random(seed * 7919 + len(queue)).random() < 0.15:
                        why = good(ring, stream=k % 2 == 0)
                        with lock:
                            goods[0] += 1
                        if why:
                            failures.append("mixed: " + why)

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print("  mixed: %d odd and %d good requests from 6 threads" % (len(requests), goods[0]), flush=True)

            for stream in (False, True):  # 3. the ring still answers exactly, and never broke
                why = good(ring, stream)
                if why:
                    failures.append("at the end: " + why)
            for r in range(WORLD):
                status, text = ring.get(ring.metrics[r], "/healthz")
                if status != 200:
                    failures.append("rank %d /healthz: %d %s" % (r, status, text.strip()))
            formations = ring.metric(0, "ringattn_ring_formations_total")
            if formations != 1:
                failures.append("the ring formed %g times (a request broke it)" % formations)
            if failures:
                for r in range(WORLD):
                    tail = [l for l in ring.log(r).splitlines() if "warn" in l or "error" in l][-10:]
                    if tail:
                        print("rank %d warnings:\n  %s" % (r, "\n  ".join(tail)))
        finally:
            ring.close()
    for f in failures:
        print("FAILED: " + f)
    print("odd_requests: %d odd requests alone and mixed, %d failures" % (len(requests), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
