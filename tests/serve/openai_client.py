#!/usr/bin/env python3
"""A client of the daemons' OpenAI-style endpoint on Python's own http.client (what a user
without the openai package has), for tests/serve/test_model_daemons.cpp.

  openai_client.py HOST:PORT TOKEN stream PROMPT MAX_TOKENS
      one streaming completion (server-sent events): prints the completion's text
  openai_client.py HOST:PORT TOKEN load REQUESTS CONNECTIONS PROMPT MAX_TOKENS EXPECTED
      REQUESTS completions (half streamed) over CONNECTIONS keep-alive connections at once;
      prints {"ok": n, "errors": n, "wrong": n, "first_wrong": ...}: ok = exactly EXPECTED,
      errors = a JSON error object with an HTTP status, wrong = anything else
"""
import http.client
import json
import sys
import threading


def request(conn, token, body):
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    return conn.getresponse()


def read_stream(resp):
    """The completion's text from an SSE response; raises on a malformed event."""
    text, done = "", False
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            resp.read()  # the rest of the chunked body, so the connection can take the next request
            break
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError("error event: " + event["error"]["message"])
        text += event["choices"][0]["text"]
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    return text


def completion(host, token, prompt, max_tokens, stream, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection(host, timeout=120)
    try:
        resp = request(conn, token, {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": stream})
        if resp.status != 200:
            body = json.loads(resp.read())
            return None, "HTTP %d: %s" % (resp.status, body["error"]["message"])
        if stream:
            return read_stream(resp), None
        return json.loads(resp.read())["choices"][0]["text"], None
    finally:
        if own:
            conn.close()


def main():
    host, token, mode = sys.argv[1:4]
    if mode == "stream":
        text, err = completion(host, token, sys.argv[4], int(sys.argv[5]), True)
        if err:
            print(err, file=sys.stderr)
            sys.exit(1)
        sys.stdout.write(text)
        return
    requests, conns, prompt, max_tokens, expected = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], int(sys.argv[7]), sys.argv[8]
    lock = threading.Lock()
    counts = {"ok": 0, "errors": 0, "wrong": 0, "first_wrong": None}
    pending = list(range(requests))

    def worker():
        conn = http.client.HTTPConnection(host, timeout=120)
        while True:
            with lock:
                if not pending:
                    break
                i = pending.pop()
            try:
                text, err = completion(host, token, prompt, max_tokens, i % 2 == 0, conn)
            except Exception as e:  # a broken connection: a new one for the next request
                text, err = None, None
                conn.close()
                conn = http.client.HTTPConnection(host, timeout=120)
                with lock:
                    counts["wrong"] += 1
                    counts["first_wrong"] = counts["first_wrong"] or repr(e)
                continue
            with lock:
                if err:
                    counts["errors"] += 1
                elif text == expected:
                    counts["ok"] += 1
                else:
                    counts["wrong"] += 1
                    counts["first_wrong"] = counts["first_wrong"] or text
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
