#!/usr/bin/env python3
"""The page for people (GET / on rank 0's API port) in headless Chromium, against three daemons
hosting stories260K.

  test_page.py RINGATTN [--screenshot PNG]

Starts three `ringattn serve` on 127.0.0.1 (free ports, a token file, --cache-mib 1 so that the
cache's use shows) and Chromium (--headless, its DevTools protocol over --remote-debugging-pipe:
no port, no websocket; stdlib only), each in its own process group, killed on every exit. Then
  1. asks the endpoint itself for a chat reply (a whole one: "Once upon a time", temperature 0,
     max_tokens 30) — llama2.c's greedy text;
  2. opens the page: GET / needs no key, GET /v1/ring does (401 without it);
  3. types the key, max_tokens 30, temperature 0, ticks the session box, types "Once upon a
     time" and clicks Send, with real key and mouse events; the reply streamed into the page
     must be the endpoint's own reply;
  4. once the ring is idle, checks every number the page shows against /metrics of each
     daemon, read before and after the page's next two redraws (and unchanged between):
     per rank the KV rows kept (the session's: some on every rank), the capacity, bytes sent
     and received, bytes sent on each link (summing to those sent); the ring's rows reserved and capacity, sessions, decode tokens, prefill and
     decode tokens/s, requests running and queued, prefix-cache hits of lookups (or "—" without
     the metrics);
  5. saves a screenshot (--screenshot, 1280x640).
Prints one line per failure; exit 0 only if all held. Exit 77 (skip) without the model files or
Chromium, unless CI=true (then 1).
"""
import base64
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_daemons import WORLD, Ring, kill_group  # noqa: E402

PROMPT = "Once upon a time"
# llama2.c's greedy tokens after the prompt (../shared/models/stories260K/README.md); 30 are a prefix.
COMPLETION_60 = (", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, "
                 "red ball. She wanted to play with it, but it was too high.\nLily")


def skip(why):
    print("skipped: " + why)
    if os.environ.get("CI") == "true":
        print("FAILED: CI=true, so a missing prerequisite is a failure")
        sys.exit(1)
    sys.exit(77)


class Chromium:
    """Headless Chromium driven through its DevTools protocol on a pipe (fd 3 in, fd 4 out:
    JSON messages ended by NUL), one page attached in flat mode."""

    def __init__(self, exe, work):
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()
        args = [exe, "--headless", "--remote-debugging-pipe", "--user-data-dir=" + os.path.join(work, "profile"),
                "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-dev-shm-usage", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--hide-scrollbars", "--mute-audio", "about:blank"]
        if os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses root otherwise
        log = open(os.path.join(work, "chromium.log"), "ab")

        def at_3_and_4():  # in the child, before exec: the pipe's ends where Chromium looks for them
            ends = [os.dup(to_chrome), os.dup(from_chrome)]  # above both targets, whatever the originals were
            os.dup2(ends[0], 3)
            os.dup2(ends[1], 4)

        self.proc = subprocess.Popen(args, pass_fds=(3, 4), preexec_fn=at_3_and_4, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        os.close(to_chrome)
        os.close(from_chrome)
        self._next = 0
        self._lock = threading.Lock()
        self._answers = {}
        self._arrived = threading.Condition(self._lock)
        self.events = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.session = None

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._answers[None] = "the browser closed its pipe"
                    self._arrived.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                m = json.loads(raw)
                if "id" in m:
                    with self._lock:
                        self._answers[m["id"]] = m
                        self._arrived.notify_all()
                else:
                    self.events.put(m)

    def call(self, method, params=None, session=True, timeout=30):
        with self._lock:
            self._next += 1
            n = self._next
        m = {"id": n, "method": method, "params": params or {}}
        if session and self.session:
            m["sessionId"] = self.session
        os.write(self._out, json.dumps(m).encode() + b"\0")
        until = time.time() + timeout
        with self._lock:
            while n not in self._answers:
                if None in self._answers:
                    raise RuntimeError("%s: %s" % (method, self._answers[None]))
                left = until - time.time()
                if left <= 0:
                    raise RuntimeError("%s: no answer from the browser in %d s" % (method, timeout))
                self._arrived.wait(left)
            a = self._answers.pop(n)
        if "error" in a:
            raise RuntimeError("%s: %s" % (method, a["error"]))
        return a["result"]

    def open_page(self, width, height):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def navigate(self, url):
        self.call("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href === %s" % json.dumps(url), 30)

    def eval(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page script %r: %s" % (expression[:80], r["exceptionDetails"]))
        return r["result"].get("value")

    def wait_for(self, expression, seconds):
        until = time.time() + seconds
        while time.time() < until:
            if self.eval(expression):
                return True
            time.sleep(0.1)
        return False

    def click(self, element_id):
        """A real mouse click at the middle of the element."""
        box = self.eval("(() => { const b = document.getElementById(%s).getBoundingClientRect(); "
                        "return [b.x + b.width / 2, b.y + b.height / 2]; })()" % json.dumps(element_id))
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def type_into(self, element_id, text):
        """Focuses the element, empties it and types `text` as key input would."""
        self.eval("(() => { const e = document.getElementById(%s); e.focus(); e.value = ''; })()" % json.dumps(element_id))
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path):
        png = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
            self.proc.wait(timeout=5)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            pass
        kill_group(self.proc)
        os.close(self._out)


# What the page shows, by the ids and data-value attributes web_page.cpp gives its numbers.
READ_PAGE = """(() => {
  const v = (id) => document.getElementById(id).dataset.value;
  const ranks = {};
  for (const tr of document.querySelectorAll('#ranks tr')) {
    const use = tr.querySelector('td.cache-rows');
    ranks[tr.dataset.rank] = use ? {rows: use.dataset.value, capacity: use.dataset.capacity, text: use.firstChild.nodeValue,
      sent: tr.querySelector('td.sent').dataset.value, received: tr.querySelector('td.received').dataset.value,
      links: Object.fromEntries([...tr.querySelectorAll('td.links span.link')].map((s) => [s.dataset.peer, s.dataset.value]))}
      : {error: tr.textContent};
  }
  return {running: v('requests-running'), queued: v('requests-queued'), sessions: v('sessions'),
    reserved: v('cache-reserved'), capacity: v('cache-capacity'), prefill: v('tps-prefill'), decode: v('tps-decode'),
    generated: v('generated-tokens'), hits: v('prefix-hits'), hits_text: document.getElementById('prefix-hits').textContent,
    ranks: ranks, refreshes: Number(document.body.dataset.refreshes)};
})()"""


def compare(page, scrapes, failures):
    """Every number the page shows against the daemons' /metrics."""
    def same(what, shown, want):
        try:
            ok = float(shown) == float(want)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            failures.append("%s: the page shows %r, /metrics says %r" % (what, shown, want))

    m0 = scrapes[0]
    capacity = m0["ringattn_cache_rows_capacity"]
    same("cache capacity", page["capacity"], capacity)
    same("cache rows reserved", page["reserved"], m0["ringattn_cache_rows_reserved"])
    same("sessions", page["sessions"], m0["ringattn_sessions"])
    same("decode tokens", page["generated"], m0['ringattn_generated_tokens_total{phase="decode"}'])
    same("prefill tokens/s", page["prefill"], m0["ringattn_prefill_tokens_per_second"])
    same("decode tokens/s", page["decode"], m0["ringattn_decode_tokens_per_second"])
    same("requests queued", page["queued"], m0["ringattn_generations_queued"])
    same("requests running", page["running"], 0)  # the ring is idle
    hits = m0.get("ringattn_prefix_cache_hits_total")
    if hits is None:
        if page["hits"] != "" or page["hits_text"] != "\u2014":
            failures.append("prefix-cache hits without the metric: the page shows %r" % page["hits_text"])
    else:
        same("prefix-cache hits", page["hits"], hits)
        lookups = m0["ringattn_prefix_cache_lookups_total"]
        if page["hits_text"] != "%d of %d prompts" % (hits, lookups):
            failures.append("prefix-cache hits read %r, /metrics says %d of %d" % (page["hits_text"], hits, lookups))
    kept = 0
    for r in range(WORLD):
        shown = page["ranks"].get(str(r))
        if not shown or "error" in shown:
            failures.append("rank %d: the page shows %r" % (r, shown))
            continue
        m = scrapes[r]
        rows = m["ringattn_generation_cache_rows"]
        kept += rows
        same("rank %d KV rows" % r, shown["rows"], rows)
        same("rank %d capacity" % r, shown["capacity"], capacity // WORLD)
        same("rank %d bytes sent" % r, shown["sent"], m["ringattn_bytes_sent_total"])
        same("rank %d bytes received" % r, shown["received"], m["ringattn_bytes_received_total"])
        # Each link the rank's /metrics counts, the page shows: the bytes it sent to that peer
        # (its successor on the ring at least), and they add up to all it sent.
        links = {k[len('ringattn_link_bytes_sent_total{peer="'):-2]: v for k, v in m.items()
                 if k.startswith('ringattn_link_bytes_sent_total{peer="') and v > 0}  # the page lists links that carried any
        if sorted(shown["links"]) != sorted(links) or str((r + 1) % WORLD) not in links:
            failures.append("rank %d: the page's links %r, /metrics's %r" % (r, shown["links"], links))
        for peer, sent in links.items():
            same("rank %d bytes sent to rank %s" % (r, peer), shown["links"].get(peer), sent)
        same("rank %d bytes sent on its links, summed" % r, sum(links.values()), m["ringattn_bytes_sent_total"])
        if shown["text"] != "%d / %d" % (rows, capacity // WORLD):
            failures.append("rank %d: the cache's use reads %r" % (r, shown["text"]))
    if kept <= 0:
        failures.append("the session kept no KV rows on any rank")


def run(ring, browser, screenshot, failures):
    # 1. The endpoint's own reply.
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 30, "temperature": 0})
    status, text = ring.request("POST", ring.api, "/v1/chat/completions", body, ring.token)
    if status != 200:
        failures.append("the endpoint's reply: HTTP %d %s" % (status, text[:300]))
        return
    want = json.loads(text)["choices"][0]["message"]["content"]
    if len(want) < 40 or not COMPLETION_60.startswith(want):
        failures.append("the endpoint's reply is not llama2.c's text: %r" % want)

    # 2. The page needs no key; the ring's state does.
    status, html = ring.request("GET", ring.api, "/")
    if status != 200 or "<title>ringattn</title>" not in html:
        failures.append("GET / without a key: HTTP %d" % status)
    if ring.request("GET", ring.api, "/v1/ring")[0] != 401:
        failures.append("GET /v1/ring without a key is not 401")
    url = "http://127.0.0.1:%d/" % ring.api
    browser.open_page(1280, 640)
    browser.navigate(url)

    # 3. Type the key and a message, as a person would; the streamed reply is the endpoint's.
    browser.type_into("key", ring.token)
    browser.click("use-key")
    if not browser.wait_for("document.getElementById('model').dataset.value === 'stories260K'", 20):
        failures.append("the page never named the model: %r" % browser.eval("document.getElementById('notice').textContent"))
        return
    browser.type_into("max_tokens", "30")
    browser.type_into("temperature", "0")
    browser.click("session")
    browser.type_into("prompt", PROMPT)
    browser.click("send")
    if not browser.wait_for("(() => { const a = document.querySelector('.assistant'); "
                            "return a && a.dataset.state !== 'streaming'; })()", 120):
        failures.append("the page's reply never ended")
        return
    state = browser.eval("document.querySelector('.assistant').dataset.state")
    got = browser.eval("[...document.querySelector('.assistant').childNodes].filter(n => n.nodeType === 3)"
                       ".map(n => n.nodeValue).join('')")
    if state != "done" or got != want:
        failures.append("the page's reply (%s) %r is not the endpoint's %r" % (state, got, want))
    print("page: the reply streamed into the page is the endpoint's: %r" % got, flush=True)

    # 4. The numbers, once the ring is idle: /metrics before and after two redraws, unchanged.
    time.sleep(0.6)  # past the endpoint's 500 ms cache of /v1/ring
    before = [ring.scrape(r) for r in range(WORLD)]
    seen = browser.eval("Number(document.body.dataset.refreshes)")
    if not browser.wait_for("Number(document.body.dataset.refreshes) >= %d" % (seen + 2), 10):
        failures.append("the page stopped redrawing the ring's state")
    page = browser.eval(READ_PAGE)
    after = [ring.scrape(r) for r in range(WORLD)]
    keys = ("ringattn_generation_cache_rows", "ringattn_bytes_sent_total", "ringattn_bytes_received_total",
            "ringattn_cache_rows_reserved", 'ringattn_generated_tokens_total{phase="decode"}')
    if any(before[r].get(k) != after[r].get(k) for r in range(WORLD) for k in keys):
        failures.append("/metrics moved while the ring was idle")
    compare(page, after, failures)
    print("page: %d numbers shown equal /metrics (rows kept per rank %s of %s)" %
          (10 + sum(4 + len(page["ranks"][str(r)].get("links", {})) for r in range(WORLD)), [page["ranks"][str(r)].get("rows") for r in range(WORLD)], page["ranks"]["0"].get("capacity")),
          flush=True)

    # 5. What a person sees.
    if screenshot:
        size = browser.screenshot(screenshot)
        print("page: screenshot %s (%d bytes)" % (screenshot, size))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe = os.path.abspath(sys.argv[1])
    screenshot = sys.argv[sys.argv.index("--screenshot") + 1] if "--screenshot" in sys.argv else None
    here = os.path.dirname(os.path.abspath(__file__))
    model = os.environ.get("RINGATTN_MODEL_DIR") or os.path.join(here, "..", "..", "..", "shared", "models", "stories260K")
    if not (os.path.isfile(os.path.join(model, "stories260K.bin")) and os.path.isfile(os.path.join(model, "tok512.bin"))):
        skip("no model at %s (set RINGATTN_MODEL_DIR)" % model)
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if not chromium:
        skip("no Chromium (Debian: apt-get install chromium)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # meson's timeout: the finally below still runs
    failures = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="ringattn-page-") as work:
        ring = Ring(exe, model, work, ("--cache-mib", "1"))
        browser = None
        try:
            if not ring.wait_ready(90):
                print("FAILED: the ring never became ready\n" + ring.log(0)[-3000:])
                return 1
            browser = Chromium(chromium, work)
            run(ring, browser, screenshot, failures)
        except RuntimeError as e:
            failures.append(str(e))
        finally:
            if browser:
                if failures:
                    with open(os.path.join(work, "chromium.log"), errors="replace") as f:
                        print("chromium's log:\n" + f.read()[-2000:])
                browser.close()
            ring.close()
    for f in failures:
        print("FAILED: " + f)
    print("test_page: %d failures in %.1f s" % (len(failures), time.time() - started))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
