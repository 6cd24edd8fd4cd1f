// ringattn serve — the page and GET /v1/ring (web_page.hpp).
#include "web_page.hpp"

#include <httplib.h>

#include <exception>
#include <memory>

#include "../cli/json_object.hpp"
#include "ring_view.hpp"

namespace ringattn::serve {
namespace {

// Every number the page shows carries its exact value in data-value (tests compare those
// with /metrics); the elements tests drive have ids; <body data-refreshes> counts the
// redraws of the ring's state and an answer's data-state says streaming, done or error.
constexpr const char* kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ringattn</title>
<link rel="icon" href="data:,">
<style>
:root { --ink: #1d2330; --dim: #667085; --line: #d9dee7; --bg: #f6f7f9; --card: #fff; --accent: #2f6fde; --bad: #b42318; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 10px 20px; background: var(--card); border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0 8px 0 0; }
#model { font-weight: 600; color: var(--accent); }
#keyform { margin-left: auto; display: flex; gap: 6px; }
#notice { color: var(--dim); font-size: 13px; width: 100%; }
#notice.bad { color: var(--bad); }
main { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 16px; padding: 16px 20px; }
@media (max-width: 900px) { main { grid-template-columns: 1fr; } }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; }
h2 { font-size: 15px; margin: 0 0 10px; }
#log { min-height: 260px; max-height: 60vh; overflow-y: auto; display: flex; flex-direction: column; gap: 8px; margin-bottom: 10px; }
.msg { padding: 8px 11px; border-radius: 8px; white-space: pre-wrap; overflow-wrap: anywhere; max-width: 92%; }
.user { align-self: flex-end; background: #e4edfd; }
.assistant { align-self: flex-start; background: #f1f2f4; }
.assistant[data-state="streaming"]::after { content: "\25CF"; color: var(--accent); margin-left: 4px; }
.assistant[data-state="error"] { background: #fde8e7; color: var(--bad); }
.meta { display: block; font-size: 12px; color: var(--dim); margin-top: 4px; }
textarea { width: 100%; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 6px; resize: vertical; }
.controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-top: 8px; font-size: 13px; color: var(--dim); }
input { font: inherit; padding: 4px 6px; border: 1px solid var(--line); border-radius: 5px; }
input[type=number] { width: 80px; }
button { font: inherit; padding: 5px 14px; border: 1px solid var(--accent); border-radius: 6px; background: var(--accent); color: #fff; cursor: pointer; }
button.plain { background: #fff; color: var(--accent); }
button:disabled { opacity: .5; cursor: default; }
dl { display: grid; grid-template-columns: auto 1fr; gap: 4px 14px; margin: 0 0 14px; font-size: 14px; }
dt { color: var(--dim); }
dd { margin: 0; font-variant-numeric: tabular-nums; }
table { width: 100%; border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 5px 6px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--dim); font-weight: 500; }
.bar { height: 6px; background: #e8ebf0; border-radius: 3px; margin-top: 3px; min-width: 60px; }
.bar > div { height: 100%; background: var(--accent); border-radius: 3px; }
td.err { color: var(--bad); }
td.links span.link { display: block; white-space: nowrap; }
</style>
</head>
<body data-refreshes="0">
<header>
  <h1>ringattn</h1><span id="model" data-value="">no model yet</span>
  <form id="keyform"><input id="key" type="password" placeholder="API key" autocomplete="off" aria-label="API key"><button id="use-key">Use key</button></form>
  <div id="notice">Type the endpoint's API key (the ring's token or --api-key-file): it stays in this browser.</div>
</header>
<main>
  <section>
    <h2>Chat</h2>
    <div id="log" aria-live="polite"></div>
    <form id="ask">
      <textarea id="prompt" rows="3" placeholder="Once upon a time"></textarea>
      <div class="controls">
        <label>max_tokens <input id="max_tokens" type="number" min="1" value="64"></label>
        <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8"></label>
        <label title="the conversation's KV rows stay on the ring: each message sends only its own tokens"><input id="session" type="checkbox"> keep the conversation on the ring (session)</label>
        <button id="send">Send</button><button id="new-chat" class="plain" type="button">New chat</button>
      </div>
    </form>
  </section>
  <section>
    <h2>Ring <span id="ring-state" data-value=""></span></h2>
    <dl>
      <dt>requests</dt><dd><span id="requests-running" data-value="">—</span> running, <span id="requests-queued" data-value="">—</span> queued</dd>
      <dt>sessions</dt><dd id="sessions" data-value="">—</dd>
      <dt>KV cache</dt><dd><span id="cache-reserved" data-value="">—</span> of <span id="cache-capacity" data-value="">—</span> rows reserved</dd>
      <dt>prefill</dt><dd><span id="tps-prefill" data-value="">—</span> tokens/s (last batch)</dd>
      <dt>decode</dt><dd><span id="tps-decode" data-value="">—</span> tokens/s (last batch)</dd>
      <dt>generated</dt><dd><span id="generated-tokens" data-value="">—</span> tokens</dd>
      <dt>prefix-cache hits</dt><dd id="prefix-hits" data-value="">—</dd>
    </dl>
    <table>
      <thead><tr><th>rank</th><th>host</th><th>state</th><th>KV rows / capacity</th><th>sent</th><th>received</th><th>sent on each link</th></tr></thead>
      <tbody id="ranks"></tbody>
    </table>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const stored = "ringattn.key";
let key = localStorage.getItem(stored) || "";
let model = null, session = null, busy = false, polling = false;
let admitted = false;  // the endpoint took our key (or asks none): the ring's state is polled
const conversation = [];

function notice(text, bad) { $("notice").textContent = text; $("notice").className = bad ? "bad" : ""; }
function auth(json) {
  const h = key ? { "Authorization": "Bearer " + key } : {};
  if (json) h["Content-Type"] = "application/json";
  return h;
}
async function why(res) {
  try { return (await res.json()).error.message; } catch (e) { return "HTTP " + res.status; }
}

// Asked at load (an endpoint with --api-key-file none needs no key) and for each key typed.
async function loadModel() {
  try {
    const res = await fetch("/v1/models", { headers: auth(false) });
    admitted = res.ok;
    if (res.status === 401 && !key) return;  // the first visit: the notice asks for the key
    if (!res.ok) { notice(await why(res), true); return; }
    model = (await res.json()).data[0].id;
    $("model").textContent = model;
    $("model").dataset.value = model;
    notice("Connected. Messages go to POST /v1/chat/completions; the ring's state comes from GET /v1/ring every second.");
  } catch (e) { notice("the endpoint did not answer: " + e.message, true); }
}

function bubble(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role;
  d.textContent = text;
  $("log").appendChild(d);
  $("log").scrollTop = $("log").scrollHeight;
  return d;
}

// One server-sent event's data: the text it adds (a chunk), or an error.
function apply(data, reply) {
  const j = JSON.parse(data);
  if (j.error) throw new Error(j.error.message);
  if (j.session) session = j.session;
  for (const c of j.choices || []) {
    if (c.delta && c.delta.content) reply.text += c.delta.content;
    if (c.finish_reason) reply.finish = c.finish_reason;
  }
}

async function send(ev) {
  ev.preventDefault();
  const text = $("prompt").value;
  if (busy || !text.trim()) return;
  const keep = $("session").checked;
  const message = { role: "user", content: text };
  const body = {
    messages: keep && session ? [message] : conversation.concat([message]),
    max_tokens: Number($("max_tokens").value), temperature: Number($("temperature").value), stream: true,
  };
  if (model) body.model = model;
  if (keep) body.session = session || true;
  conversation.push(message);
  bubble("user", text);
  $("prompt").value = "";
  const out = bubble("assistant", "");
  out.dataset.state = "streaming";
  busy = true;
  $("send").disabled = true;
  const reply = { text: "", finish: null };
  const started = performance.now();
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: auth(true), body: JSON.stringify(body) });
    if (!res.ok) throw new Error(await why(res));
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", done = false;
    while (!done) {
      const { value, done: closed } = await reader.read();
      if (closed) break;
      buffer += decoder.decode(value, { stream: true });
      for (let cut; (cut = buffer.indexOf("\n\n")) >= 0;) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;  // ": waiting for the ring" keeps the connection
          if (line === "data: [DONE]") { done = true; continue; }
          apply(line.slice(6), reply);
          out.textContent = reply.text;
        }
      }
    }
    if (!done) throw new Error("the stream ended before [DONE]");
    conversation.push({ role: "assistant", content: reply.text });
    out.dataset.state = "done";
    const meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = reply.finish + " \u00b7 " + ((performance.now() - started) / 1000).toFixed(1) + " s" + (session ? " \u00b7 " + session : "");
    out.appendChild(meta);
  } catch (e) {
    out.dataset.state = "error";
    out.textContent = (reply.text ? reply.text + "\n" : "") + e.message;
    conversation.pop();
    session = null;  // a request on a session that fails ends the session
  }
  busy = false;
  $("send").disabled = false;
}

async function endSession() {
  if (!session) return;
  const id = session;
  session = null;
  try { await fetch("/v1/sessions/" + id, { method: "DELETE", headers: auth(false) }); } catch (e) { /* it expires */ }
}

function put(id, value, text) {
  const el = $(id);
  el.dataset.value = value === null || value === undefined ? "" : String(value);
  el.textContent = value === null || value === undefined ? "\u2014" : text === undefined ? String(value) : text;
}
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; ++i) n /= 1024;
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}
function rate(x) { return x > 0 ? x.toFixed(1) : "\u2014"; }
function cell(tr, text, value, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (value !== undefined) td.dataset.value = value === null ? "" : String(value);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function draw(v) {
  put("ring-state", v.state, v.health === "ok" ? v.state : v.state + " \u00b7 " + v.health);
  put("requests-running", v.requests.running);
  put("requests-queued", v.requests.queued);
  put("sessions", v.sessions);
  put("cache-reserved", v.cache_rows.reserved);
  put("cache-capacity", v.cache_rows.capacity);
  put("tps-prefill", v.tokens_per_second.prefill, rate(v.tokens_per_second.prefill));
  put("tps-decode", v.tokens_per_second.decode, rate(v.tokens_per_second.decode));
  put("generated-tokens", v.generated_tokens);
  put("prefix-hits", v.prefix_cache_hits,
      v.prefix_cache_lookups === null ? undefined : v.prefix_cache_hits + " of " + v.prefix_cache_lookups + " prompts");
  const rows = [];
  for (const r of v.ranks) {
    const tr = document.createElement("tr");
    tr.dataset.rank = r.rank;
    cell(tr, String(r.rank));
    if (r.error !== null) {
      cell(tr, r.control || "\u2014");
      const td = cell(tr, r.error, undefined, "err");
      td.colSpan = 5;
      rows.push(tr);
      continue;
    }
    cell(tr, r.host, undefined);
    cell(tr, r.state, undefined);
    const use = cell(tr, r.cache_rows + " / " + r.cache_rows_capacity, r.cache_rows, "cache-rows");
    use.dataset.capacity = r.cache_rows_capacity;
    const bar = document.createElement("div"), fill = document.createElement("div");
    bar.className = "bar";
    fill.style.width = (r.cache_rows_capacity > 0 ? Math.min(100, 100 * r.cache_rows / r.cache_rows_capacity) : 0) + "%";
    bar.appendChild(fill);
    use.appendChild(bar);
    cell(tr, bytes(r.bytes_sent), r.bytes_sent, "sent");
    cell(tr, bytes(r.bytes_received), r.bytes_received, "received");
    const links = cell(tr, "", undefined, "links");
    for (const l of r.links) {  // to each peer rank: the bytes this rank sent it
      const span = document.createElement("span");
      span.className = "link";
      span.dataset.peer = l.peer;
      span.dataset.value = l.bytes_sent;
      span.textContent = "\u2192 " + l.peer + ": " + bytes(l.bytes_sent);
      links.appendChild(span);
    }
    rows.push(tr);
  }
  $("ranks").replaceChildren(...rows);
}

async function refresh() {
  if (polling || !admitted) return;
  polling = true;
  try {
    const res = await fetch("/v1/ring", { headers: auth(false) });
    if (res.ok) draw(await res.json());
    else {
      admitted = res.status !== 401;  // a key taken back (the daemon restarted with another): ask again
      notice(await why(res), true);
    }
  } catch (e) {
    notice("the endpoint did not answer: " + e.message, true);
  }
  polling = false;
  document.body.dataset.refreshes = Number(document.body.dataset.refreshes) + 1;
}

$("keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("key").value.trim();
  localStorage.setItem(stored, key);
  loadModel().then(refresh);
});
$("ask").addEventListener("submit", send);
$("prompt").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) send(ev);
});
$("session").addEventListener("change", () => { if (!$("session").checked) endSession(); });
$("new-chat").addEventListener("click", () => {
  endSession();
  conversation.length = 0;
  $("log").replaceChildren();
});
$("key").value = key;
loadModel().then(refresh);
setInterval(refresh, 1000);
</script>
</body>
</html>
)page";

// This origin only: the page's own script and style, its fetches to this endpoint.
constexpr const char* kPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void answer_error(httplib::Response& res, const std::string& message) {
  cli::JsonObject e;
  e.add("message", message).add("type", "server_error").add_null("param").add_null("code");
  res.status = 500;
  res.set_content(cli::JsonObject().add("error", e).str(), "application/json");
}

}  // namespace

bool is_public_page(const httplib::Request& req) { return (req.method == "GET" || req.method == "HEAD") && req.path == "/"; }

void add_page_routes(httplib::Server& s, const RingService& service, const Metrics& metrics) {
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy", kPolicy);
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("Cache-Control", "no-cache");
    res.set_content(kPage, "text/html; charset=utf-8");
  });
  auto view = std::make_shared<RingView>(service, metrics);
  s.Get("/v1/ring", [view](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_header("Cache-Control", "no-store");
      res.set_content(view->json(), "application/json");
    } catch (const std::exception& e) {
      answer_error(res, std::string("the ring's state could not be read: ") + e.what());
    }
  });
}

}  // namespace ringattn::serve
