// Daemons that host a real model (stories260K; skipped with "skipped: no model at ..."
// where the files are absent): streaming completions through the OpenAI-style endpoint to
// curl (server-sent events) and to Python's http.client at once, each llama2.c's exact
// text; chat; refusals before any work; sessions (a follow-up equals its concatenated
// prompt from scratch; rows kept, then freed on every rank when closed, abandoned or
// expired; the cache accounted); a client that leaves mid-stream; a worker killed
// mid-generation (and the sessions gone with the ring); a daemon holding another model;
// 200 requests from 8 connections.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "src/cli/json_object.hpp"
#include "infer/common/json.hpp"
#include "infer/tokenizers/tokenizer_json.hpp"
#include "tests/integration/hf_text_model.hpp"
#include "tests/model/model_files.hpp"
#include "tests/serve/daemon_ring.hpp"
#include "tests/serve/model_ring.hpp"

namespace ringattn::stest {
namespace {

const std::string kClient = RINGATTN_SOURCE_ROOT "/tests/serve/openai_client.py";

// A client that leaves a stream before the ring could end it: rank 1 is held stopped, so no
// token can come; the client connects, reads the endpoint's heartbeat and goes; the endpoint
// finds it gone on its next heartbeat; only then does rank 1 go on. (The ring's --timeout
// must outlast the hold.)
void leave_mid_stream(ModelRing& m, const std::string& request) {
  const double gone = metric(*m.ring, 0, "ringattn_api_clients_gone_total");
  m.ring->signal(1, SIGSTOP);
  {
    itest::Spawned client(curl_post(m, "/v1/completions", request), {}, "/usr/bin/curl");
    CHECK(eventually([&] { client.pump(); return client.out().find(": waiting for the ring") != std::string::npos; }, 60));
  }  // curl is killed here: its connection closes
  CHECK(eventually([&] { return metric(*m.ring, 0, "ringattn_api_clients_gone_total") >= gone + 1; }, 60));
  m.ring->signal(1, SIGCONT);
}

// The same for a whole (not streamed) reply: the client goes once curl says its request body
// was sent ("} [N bytes data]" under -v); the endpoint, finding the connection closed at its
// next heartbeat, cancels the request while rank 1 is still held.
void leave_before_reply(ModelRing& m, const std::string& request) {
  const double gone = metric(*m.ring, 0, "ringattn_api_clients_gone_total");
  m.ring->signal(1, SIGSTOP);
  {
    std::vector<std::string> args = curl_post(m, "/v1/completions", request);
    args.insert(args.begin(), "-v");
    itest::Spawned client(args, {}, "/usr/bin/curl");
    CHECK(eventually([&] { client.pump(); return client.err().find("} [") != std::string::npos; }, 60));
  }
  CHECK(eventually([&] { return metric(*m.ring, 0, "ringattn_api_clients_gone_total") >= gone + 1; }, 60));
  m.ring->signal(1, SIGCONT);
}

}  // namespace

TEST_CASE("serve --model: curl and Python stream llama2.c's exact text at once; chat and whole responses too; refusals before work") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  // Four streaming clients at once: two curl completions, Python's http.client, a curl chat.
  itest::Spawned c1(curl_post(m, "/v1/completions", body(60, true)), {}, "/usr/bin/curl");
  itest::Spawned c2(curl_post(m, "/v1/completions", body(60, true)), {}, "/usr/bin/curl");
  itest::Spawned py({kClient, m.api(), m.token, "stream", kPrompt, "60"}, {}, "/usr/bin/python3");
  itest::Spawned chat(curl_post(m, "/v1/chat/completions",
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 60, \"temperature\": 0, \"stream\": true}"),
                      {}, "/usr/bin/curl");
  const Outcome o1 = c1.wait(120), o2 = c2.wait(120), op = py.wait(120), oc = chat.wait(120);
  INFO("curl 1: " << o1.out << "\npython: " << op.err << "\nrank 0: " << m.ring->log(0));
  bool done = false;
  CHECK(sse_text(o1.out, nullptr, &done) == completion_60());
  CHECK(done);
  CHECK(sse_text(o2.out) == completion_60());
  CHECK(op.exit_code == 0);
  CHECK(op.out == completion_60());
  CHECK(sse_text(oc.out) == completion_60());
  // A whole (not streamed) chat response.
  const Outcome whole = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 60, \"temperature\": 0}"));
  REQUIRE(whole.out.find("HTTP 200") != std::string::npos);
  const infer::Json cj = infer::parse_json(whole.out.substr(0, whole.out.find("\nHTTP")));
  CHECK(cj.at("choices").at(0).at("message").at("content").get<std::string>() == completion_60());
  CHECK(cj.at("usage").at("completion_tokens").get<double>() == 60);
  CHECK(cj.at("usage").at("prompt_tokens").get<double>() == 5);
  // A temperature below the sampler's floor is greedy (1e-45 gave <unk> at every step), and
  // the defaults OpenAI's clients send for parameters the endpoint does not implement are
  // accepted.
  const Outcome tiny = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                               "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 60, "
                               "\"temperature\": 1e-45, \"logprobs\": false, \"presence_penalty\": 0, \"frequency_penalty\": 0, "
                               "\"logit_bias\": {}, \"response_format\": {\"type\": \"text\"}, \"tool_choice\": \"none\", \"n\": 1}"));
  REQUIRE(tiny.out.find("HTTP 200") != std::string::npos);
  CHECK(infer::parse_json(tiny.out.substr(0, tiny.out.find("\nHTTP"))).at("choices").at(0).at("message").at("content").get<std::string>() ==
        completion_60());

  // Refused before any work, each with its HTTP status and what to fix.
  Outcome r = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(4, false), false));
  CHECK(r.out.find("HTTP 401") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(600, false)));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  CHECK(r.out.find("5 tokens and max_tokens 600 exceed the model's context of 512") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": 7}"));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  CHECK(r.out.find("\\\"prompt\\\" must be a string or a non-empty array of token ids") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": [403, 512]}"));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  CHECK(r.out.find("each an integer in [0, 512)") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"x\", \"session\": \"sess-99\"}"));
  CHECK(r.out.find("HTTP 404") != std::string::npos);
  CHECK(r.out.find("no session sess-99") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"x\""));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  // A parameter the endpoint would ignore, asking for something: 400 naming it (on either endpoint).
  r = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"x\", \"echo\": true}"));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  CHECK(r.out.find("\"param\":\"echo\"") != std::string::npos);
  CHECK(r.out.find("\"code\":\"unsupported_parameter\"") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"best_of\": 2}"));
  CHECK(r.out.find("HTTP 400") != std::string::npos);
  CHECK(r.out.find("\"param\":\"best_of\"") != std::string::npos);
  CHECK(r.out.find("\"code\":\"unsupported_parameter\"") != std::string::npos);
  r = run("/usr/bin/curl", curl_post(m, "/v1/nothing", "{}"));
  CHECK(r.out.find("HTTP 404") != std::string::npos);
  CHECK(metric(*m.ring, 0, "ringattn_generations_total{result=\"ok\"}") >= 4);
  CHECK(metric(*m.ring, 0, "ringattn_time_to_first_token_seconds_count") >= 4);
  CHECK(metric(*m.ring, 0, "ringattn_generated_tokens_total{phase=\"decode\"}") >= 240);
}

double every_rank(const DaemonRing& r, const std::string& series) {
  double sum = 0;
  for (int rank = 0; rank < 3; ++rank) sum += metric(r, rank, series);
  return sum;
}

TEST_CASE("serve --model: a session's follow-up equals its concatenated prompt from scratch; its rows stay, then go on every rank; the cache is accounted") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  // 0.5 MiB per daemon: 102 rows of stories260K's 5 layers (5 KiB per token), 306 on the ring.
  ModelRing m(*dir, {"--cache-mib", "0.5", "--session-ttl", "15"}, 30);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const std::vector<int>& run = ::test::kRunIds;  // "Once upon a time" (4 ids) and llama2.c's greedy 60
  CHECK(metric(*m.ring, 0, "ringattn_cache_rows_capacity") == 306);

  // 1. A session's first reply: 20 greedy tokens = llama2.c's first 20.
  Outcome a = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(run.begin(), run.begin() + 4), 20, "true")));
  REQUIRE(a.out.find("HTTP 200") != std::string::npos);
  const infer::Json ja = response_json(a);
  const std::string session = ja.at("session").get<std::string>();
  CHECK(session.rfind("sess-", 0) == 0);
  CHECK(ja.at("choices").at(0).at("finish_reason").get<std::string>() == "length");
  // Its rows stay: BOS, 4 prompt ids and 19 generated (the 20th is chosen, not yet fed).
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 24; }, 10));
  CHECK(metric(*m.ring, 0, "ringattn_sessions") == 1);
  CHECK(metric(*m.ring, 1, "ringattn_generation_cache_rows") > 0);  // spread over the ring, not all on rank 0

  // 2. Its follow-up, streamed: only the new ids go in; their queries pass the kept rows.
  const std::vector<int> follow = {403, 407, 261, 378};  // " Once upon a" again
  Outcome b = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions",
                                            ids_body(ids_json(follow.begin(), follow.end()), 30, cli::json_quote(session), true)));
  const std::string follow_up = sse_text(b.out);
  CHECK(b.out.find("\"session\":\"" + session + "\"") != std::string::npos);
  // 24 + the 20th token + 4 new ids + 29 of 30 generated (the 30th is not fed)
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 58; }, 10));

  // 3. From scratch, without a session: the prompt, the first reply and the follow-up's ids.
  std::vector<int> whole(run.begin(), run.begin() + 24);
  whole.insert(whole.end(), follow.begin(), follow.end());
  Outcome c = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(whole.begin(), whole.end()), 30, "")));
  const infer::Json jc = response_json(c);
  INFO("follow-up: " << b.out.substr(0, 400) << "\nfrom scratch: " << c.out << "\nrank 0: " << m.ring->log(0));
  REQUIRE(!follow_up.empty());
  CHECK(follow_up == jc.at("choices").at(0).at("text").get<std::string>());
  CHECK(infer::json_field(jc, "session") == nullptr);
  // The request without a session left its rows to the prefix cache (BOS, 28 ids, 29 of 30
  // generated): the session's 58 and the entry's 58.
  CHECK(jc.at("usage").at("prompt_tokens_details").at("cached_tokens").get<double>() == 0);  // a session's rows are its own
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 116; }, 10));
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_rows") == 58);

  // 4. The cache is accounted: 58 rows held by the session, 58 by the prefix cache's entry; a
  // request that could never fit is refused (413, both numbers); one that fits only without
  // the idle session (255 rows: it takes the entry, sharing BOS and 3 ids) ends the session
  // (idle rows never keep a request out) and is answered; its own rows become the entry.
  const std::string prompt = ids_json(run.begin(), run.begin() + 4);
  Outcome big = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(prompt, 400, "")));
  CHECK(big.out.find("HTTP 413") != std::string::npos);
  CHECK(big.out.find("needs 405 KV-cache rows, and the ring holds at most 306") != std::string::npos);
  Outcome roomy = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(prompt, 250, "")));
  CHECK(roomy.out.find("HTTP 200") != std::string::npos);
  CHECK(response_json(roomy).at("usage").at("prompt_tokens_details").at("cached_tokens").get<double>() == 4);
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 254; }, 10));  // 5 + 249
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_rows") == 254);
  CHECK(metric(*m.ring, 0, "ringattn_sessions") == 0);
  CHECK(metric(*m.ring, 0, "ringattn_sessions_evicted_total") == 1);
  Outcome evicted = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403]", 4, cli::json_quote(session))));
  CHECK(evicted.out.find("HTTP 404") != std::string::npos);
  CHECK(evicted.out.find("evicted while idle") != std::string::npos);

  // 5. Closed: its rows go on every rank; it is gone for good.
  const Outcome opened = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(prompt, 8, "true")));
  const std::string closing = response_json(opened).at("session").get<std::string>();
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 12; }, 10));
  Outcome del = ::ringattn::stest::run("/usr/bin/curl", {"-s", "-X", "DELETE", "-H", m.auth(), "-w", "\nHTTP %{http_code}\n", m.url("/v1/sessions/" + closing)});
  CHECK(del.out.find("HTTP 200") != std::string::npos);
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 0; }, 10));
  CHECK(metric(*m.ring, 0, "ringattn_sessions") == 0);
  CHECK(metric(*m.ring, 0, "ringattn_cache_rows_reserved") == 0);
  Outcome again = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403]", 4, cli::json_quote(closing))));
  CHECK(again.out.find("HTTP 404") != std::string::npos);
  CHECK(::ringattn::stest::run("/usr/bin/curl", {"-s", "-X", "DELETE", "-H", m.auth(), "-w", "\nHTTP %{http_code}\n", m.url("/v1/sessions/" + closing)})
            .out.find("HTTP 404") != std::string::npos);

  // 6. A client that leaves mid-stream ends its session: its rows go on every rank.
  leave_mid_stream(m, ids_body(prompt, 250, "true", true));
  CHECK(eventually([&] { return metric(*m.ring, 0, "ringattn_generations_total{result=\"cancelled\"}") >= 1; }, 60));
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 0 && metric(*m.ring, 0, "ringattn_sessions") == 0; }, 30));
  CHECK(metric(*m.ring, 0, "ringattn_cache_rows_reserved") == 0);

  // 7. An idle session expires after session_ttl (15 s here): its rows go on every rank.
  Outcome idle = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(prompt, 8, "true")));
  const std::string idle_id = response_json(idle).at("session").get<std::string>();
  // The new session took the entry (its rows past BOS and 3 ids cut on every rank): 5 + 7.
  CHECK(every_rank(*m.ring, "ringattn_generation_cache_rows") == 12);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_rows") == 0);
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 0 && metric(*m.ring, 0, "ringattn_sessions") == 0; }, 60));
  Outcome expired = ::ringattn::stest::run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403]", 4, cli::json_quote(idle_id))));
  CHECK(expired.out.find("HTTP 404") != std::string::npos);
  CHECK(expired.out.find("expired") != std::string::npos);
}

TEST_CASE("serve --model: a client gone mid-stream is cancelled; a worker killed mid-generation is named; the ring re-forms; the next text is exact") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {}, 30);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  leave_mid_stream(m, body(500, true));
  CHECK(eventually([&] { return metric(*m.ring, 0, "ringattn_generations_total{result=\"cancelled\"}") >= 1; }, 60));
  leave_before_reply(m, body(500, false));  // a whole reply's client that leaves is found too
  CHECK(eventually([&] { return metric(*m.ring, 0, "ringattn_generations_total{result=\"cancelled\"}") >= 2; }, 60));
  CHECK(sse_text(run("/usr/bin/curl", curl_post(m, "/v1/completions", body(60, true))).out) == completion_60());

  // A session open across the failure: the re-formed ring keeps none of the old one's rows.
  const Outcome kept = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403, 407, 261, 378]", 8, "true")));
  const std::string session = response_json(kept).at("session").get<std::string>();

  itest::Spawned stream(curl_post(m, "/v1/completions", body(500, true)), {}, "/usr/bin/curl");
  CHECK(eventually([&] { stream.pump(); return stream.out().find("data: ") != std::string::npos; }, 60));
  m.ring->signal(1, SIGKILL);
  const Outcome o = stream.wait(120);
  std::string error;
  sse_text(o.out, &error);
  INFO("stream: " << o.out.substr(o.out.size() > 600 ? o.out.size() - 600 : 0));
  CHECK(error.find("rank 1") != std::string::npos);
  m.ring->start(1);
  REQUIRE(m.ring->wait_ready(60));
  CHECK(sse_text(run("/usr/bin/curl", curl_post(m, "/v1/completions", body(60, true))).out) == completion_60());
  const Outcome gone = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403]", 4, cli::json_quote(session))));
  CHECK(gone.out.find("HTTP 404") != std::string::npos);
  CHECK(metric(*m.ring, 0, "ringattn_sessions") == 0);
  // The re-formed ring holds only the last reply's rows, as the prefix cache's entry (BOS, 4, 59).
  CHECK(eventually([&] { return every_rank(*m.ring, "ringattn_generation_cache_rows") == 64; }, 10));
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_rows") == 64);
}

TEST_CASE("serve --model: prompts shorter than the ring (an empty one is BOS alone) get llama2.c's text, alone and beside others; the ring stays up") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir);  // 3 daemons: a batch of 1 or 2 tokens leaves a rank without a row
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  auto text_of = [&](const Outcome& o, bool chat) {
    INFO("response: " << o.out.substr(0, 600) << "\nrank 0: " << m.ring->log(0));
    REQUIRE(o.out.find("HTTP 200") != std::string::npos);
    const infer::Json j = response_json(o);
    const infer::Json& c = j.at("choices").at(0);
    return chat ? c.at("message").at("content").get<std::string>() : c.at("text").get<std::string>();
  };
  // From BOS alone run.c's greedy text starts "Once upon a time": its 64 ids are kRunIds.
  CHECK(text_of(run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"\", \"max_tokens\": 64, \"temperature\": 0}")), false) ==
        ::test::kRunText);
  CHECK(text_of(run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                               "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}], \"max_tokens\": 64, \"temperature\": 0}")),
                true) == ::test::kRunText);
  // BOS and " Once": two tokens on three ranks, streamed.
  CHECK(sse_text(run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[403]", 63, "", true))).out) == ::test::kRunText.substr(4));
  // Beside a full prompt, at once (one batch or two, whichever the ring takes).
  itest::Spawned empty(curl_post(m, "/v1/completions", "{\"prompt\": \"\", \"max_tokens\": 64, \"temperature\": 0, \"stream\": true}"), {},
                       "/usr/bin/curl");
  itest::Spawned full(curl_post(m, "/v1/completions", body(60, true)), {}, "/usr/bin/curl");
  CHECK(sse_text(empty.wait(120).out) == ::test::kRunText);
  CHECK(sse_text(full.wait(120).out) == completion_60());
  // A session opened by an empty prompt goes on from its kept rows like any other.
  const Outcome opened = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"\", \"max_tokens\": 4, \"temperature\": 0, \"session\": true}"));
  CHECK(text_of(opened, false) == "Once upon a time");
  const std::string session = response_json(opened).at("session").get<std::string>();
  const std::vector<int>& ids = ::test::kRunIds;
  // The 4th chosen token (378) is not fed yet: the follow-up's first id is it.
  const Outcome next = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body("[378]", 8, cli::json_quote(session))));
  std::string want;
  {
    const Outcome whole = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(ids.begin(), ids.begin() + 4), 8, "")));
    want = text_of(whole, false);
  }
  CHECK(text_of(next, false) == want);
  // Nothing broke: one formation, every rank healthy.
  CHECK(metric(*m.ring, 0, "ringattn_ring_formations_total") == 1);
  for (int r = 0; r < 3; ++r) CHECK(http_get(m.ring->metrics(r), "/healthz").first == 200);
}

TEST_CASE("serve --model --weights-dtype bf16: the daemons hold the matrices in bf16 and give generate's bf16 text") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  const itest::Outcome g = itest::run_ringattn({"generate", "--model", (*dir / "stories260K.bin").string(), "--tokenizer",
                                                (*dir / "tok512.bin").string(), "--prompt", kPrompt, "--max-tokens", "40",
                                                "--nodes", "1", "--weights-dtype", "bf16", "--json"});
  INFO("generate: " << g.err << "\n" << g.out);
  REQUIRE(g.exit_code == 0);
  const std::string whole = infer::parse_json(g.out).at("results")[0].at("text").get<std::string>();
  REQUIRE(whole.rfind(kPrompt, 0) == 0);
  ModelRing m(*dir, {"--weights-dtype", "bf16"});
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const Outcome o = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(40, false)));
  INFO("response: " << o.out.substr(0, 600) << "\nrank 0: " << m.ring->log(0));
  REQUIRE(o.out.find("HTTP 200") != std::string::npos);
  const std::string text = response_json(o).at("choices").at(0).at("text").get<std::string>();
  CHECK(text.size() > 20);
  CHECK(kPrompt + text == whole);
}

TEST_CASE("serve --model --tp 2 on 4 daemons (a 2 x 2 mesh): llama2.c's text; a stop sequence ends one reply of a batch on the whole group; sessions go on; half the cache per row") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  // 0.5 MiB per daemon: each holds 2 of stories260K's 4 K/V heads, 2.5 KiB per token: 204
  // rows, and the ring's two groups 408.
  RingConfig c;
  c.world = 4;
  ModelRing m(*dir, {"--tp", "2", "--cache-mib", "0.5"}, 10, {}, c);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  CHECK(metric(*m.ring, 0, "ringattn_cache_rows_capacity") == 408);
  CHECK(sse_text(run("/usr/bin/curl", curl_post(m, "/v1/completions", body(60, true))).out) == completion_60());
  // Two replies in one batch (or two, whichever the ring takes); rank 0's stop sequence
  // ends the first after " park" while the second goes on: rank 1, in rank 0's group, must
  // stop feeding it at the same step.
  const std::string full = completion_60();
  const std::string until = full.substr(0, full.find(" park"));
  itest::Spawned stopped(curl_post(m, "/v1/completions",
                                   "{\"prompt\": \"Once upon a time\", \"max_tokens\": 60, \"temperature\": 0, \"stream\": true, "
                                   "\"stop\": [\" park\"]}"),
                         {}, "/usr/bin/curl");
  itest::Spawned beside(curl_post(m, "/v1/completions", body(60, true)), {}, "/usr/bin/curl");
  CHECK(sse_text(stopped.wait(120).out) == until);
  CHECK(sse_text(beside.wait(120).out) == full);
  // A session's follow-up from the group's kept rows equals its whole prompt from scratch.
  const std::vector<int>& ids = ::test::kRunIds;
  const Outcome opened = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(ids.begin(), ids.begin() + 4), 8, "true")));
  REQUIRE(opened.out.find("HTTP 200") != std::string::npos);
  const std::string session = response_json(opened).at("session").get<std::string>();
  const Outcome next = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(ids.begin() + 11, ids.begin() + 12), 8, cli::json_quote(session))));
  const Outcome whole = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(ids.begin(), ids.begin() + 12), 8, "")));
  INFO("follow-up: " << next.out.substr(0, 400) << "\nwhole: " << whole.out.substr(0, 400));
  REQUIRE(next.out.find("HTTP 200") != std::string::npos);
  CHECK(response_json(next).at("choices").at(0).at("text") == response_json(whole).at("choices").at(0).at("text"));
  CHECK(metric(*m.ring, 0, "ringattn_ring_formations_total") == 1);
  for (int r = 0; r < 4; ++r) CHECK(http_get(m.ring->metrics(r), "/healthz").first == 200);
  // A daemon restarted with another --tp is refused at the handshake naming the option and
  // both values (it was "job options (their digest) differs").
  m.ring->signal(3, SIGKILL);
  m.ring->stop(3, 10);
  m.ring->set_rank_extra(3, {"--tp", "1"});
  m.ring->start(3);
  CHECK(eventually([&] { return m.ring->log(3).find("group_size (the mesh's group: --tp)' differs") != std::string::npos; }, 60));
  CHECK(m.ring->log(3).find("rank 3 has 1") != std::string::npos);
}

TEST_CASE("serve --model: a daemon holding another model file is refused, naming both ranks and both files") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const std::string other = m.ring->dir().file("stories260K-flipped.bin");
  {
    std::ifstream in(*dir / "stories260K.bin", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes[bytes.size() / 2] ^= 1;  // one weight's lowest bit
    std::ofstream(other, std::ios::binary) << bytes;
  }
  m.ring->signal(2, SIGKILL);
  m.ring->stop(2, 10);
  m.ring->set_rank_extra(2, {"--model", other});
  m.ring->start(2);
  CHECK(eventually([&] { return m.ring->log(0).find("hold different models") != std::string::npos; }, 60));
  const std::string log0 = m.ring->log(0);
  CHECK(log0.find("rank 0 and rank 2 hold different models") != std::string::npos);
  CHECK(log0.find("stories260K-flipped.bin") != std::string::npos);
  // Rank 2 learns the verdict from rank 0's message, after rank 0 has logged it: wait for it too.
  CHECK(eventually([&] { return m.ring->log(2).find("rank 0 and rank 2 hold different models") != std::string::npos; }, 60));
  const Outcome r = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(4, false)));
  CHECK(r.out.find("HTTP 503") != std::string::npos);  // the ring is not formed: nothing is generated
}

TEST_CASE("serve --model: 200 requests from 8 connections, every text exact; rank 0's RSS flat over the next 200") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const std::string want = completion_60();
  auto load = [&](int n) {
    const Outcome o = run("/usr/bin/python3", {kClient, m.api(), m.token, "load", std::to_string(n), "8", kPrompt, "60", want}, 600);
    INFO("client: " << o.err);
    REQUIRE(o.exit_code == 0);
    return infer::parse_json(o.out);
  };
  // A first round of the same size warms the allocator's arenas (one per connection thread
  // that served): RSS settles after it (+1 %, then +0.2 %, +0.05 % by hand), a leak would not.
  const infer::Json warm = load(200);
  CHECK(warm.at("ok").get<double>() == 200);
  const long before = rss_kib(m.ring->pid(0));
  const infer::Json j = load(200);
  const long after = rss_kib(m.ring->pid(0));
  INFO("rss " << before << " -> " << after << " KiB");
  CHECK(j.at("ok").get<double>() == 200);
  CHECK(j.at("wrong").get<double>() == 0);
  CHECK(j.at("errors").get<double>() == 0);
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("RSS not compared under AddressSanitizer (its quarantine keeps freed memory resident)");
#else
  CHECK(static_cast<double>(after) <= 1.05 * static_cast<double>(before));
#endif
}

// A Hugging Face directory of the seeded text model (hf_text_model.hpp), removed at the end.
struct HfModelDir {
  std::filesystem::path path;
  explicit HfModelDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("ringattn-" + tag + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
    ::test::hf_text::write_model(path, 5);
  }
  ~HfModelDir() { std::filesystem::remove_all(path); }
};

TEST_CASE("serve --model DIR: a Hugging Face directory with its tokenizer.json gives generate's text, streamed and whole; its end token ends the reply") {
  const HfModelDir model("hfserve");
  const std::filesystem::path& dir = model.path;
  const infer::TokenizerJson tok = infer::TokenizerJson::load(dir / "tokenizer.json", dir / "tokenizer_config.json");
  const std::string prompt = "the world isn't flat , it 's round. Ünïcode 🙂";
  // generate's greedy ids for the prompt (no end token yet); then the first one not seen
  // before it becomes the model's end token.
  const Outcome g = itest::run_ringattn({"generate", "--model", dir.string(), "--prompt", prompt, "--max-tokens", "30", "--nodes", "1",
                                         "--threads", "1", "--timeout", "60", "--json"});
  INFO("generate: " << g.err << "\n" << g.out);
  REQUIRE(g.exit_code == 0);
  std::vector<int> ids;
  const infer::Json out = infer::parse_json(g.out);
  for (const infer::Json& t : out.at("results").at(0).at("tokens")) ids.push_back(static_cast<int>(t.get<double>()));
  REQUIRE(ids.size() == 30);
  std::size_t k = 1;
  while (k < ids.size() && std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids[k]) != ids.begin() + static_cast<std::ptrdiff_t>(k)) ++k;
  REQUIRE(k < ids.size());
  std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": " << ids[k] << "}";
  const std::string upto_end = ::test::hf_text::printed(tok, std::vector<int>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k)));
  // generate --chat's reply to a conversation, through the directory's chat template.
  const Outcome gc = itest::run_ringattn({"generate", "--model", dir.string(), "--chat", "--system", "Be brief.", "--prompt", "the world?",
                                          "--max-tokens", "20", "--nodes", "1", "--threads", "1", "--timeout", "60", "--json"});
  INFO("generate --chat: " << gc.err);
  REQUIRE(gc.exit_code == 0);
  std::vector<int> chat_ids;
  const infer::Json chat_out = infer::parse_json(gc.out);
  for (const infer::Json& t : chat_out.at("results").at(0).at("tokens")) chat_ids.push_back(static_cast<int>(t.get<double>()));
  const std::string chat_text = ::test::hf_text::printed(tok, chat_ids);

  ModelRing m(dir, {}, 10, {"--model", dir.string()});
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const Outcome whole = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(30, false, prompt)));
  REQUIRE(whole.out.find("HTTP 200") != std::string::npos);
  const infer::Json w = infer::parse_json(whole.out.substr(0, whole.out.find("\nHTTP")));
  CHECK(w.at("choices").at(0).at("text").get<std::string>() == upto_end);
  CHECK(w.at("choices").at(0).at("finish_reason").get<std::string>() == "stop");
  CHECK(w.at("usage").at("completion_tokens").get<double>() == static_cast<double>(k));
  CHECK(w.at("usage").at("prompt_tokens").get<double>() == static_cast<double>(tok.encode(prompt, true).size()));
  const Outcome streamed = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(30, true, prompt)));
  bool done = false;
  CHECK(sse_text(streamed.out, nullptr, &done) == upto_end);
  CHECK(done);
  // Cut by max_tokens before the end token: the text held back at the last token is sent too.
  const Outcome cut = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(static_cast<int>(k) - 1 > 0 ? static_cast<int>(k) - 1 : 1, true, prompt)));
  const std::size_t n = k > 1 ? k - 1 : 1;
  CHECK(sse_text(cut.out) == ::test::hf_text::printed(tok, std::vector<int>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n))));
  // Chat: the conversation through the model's chat template, generate --chat's text, whole and streamed.
  const std::string conversation =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the world?"}], "max_tokens": 20, "temperature": 0)";
  const Outcome chat = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions", conversation + "}"));
  REQUIRE(chat.out.find("HTTP 200") != std::string::npos);
  const infer::Json cj = infer::parse_json(chat.out.substr(0, chat.out.find("\nHTTP")));
  CHECK(cj.at("choices").at(0).at("message").at("content").get<std::string>() == chat_text);
  CHECK(cj.at("usage").at("prompt_tokens").get<double>() == chat_out.at("results").at(0).at("prompt_tokens").get<double>());
  CHECK(sse_text(run("/usr/bin/curl", curl_post(m, "/v1/chat/completions", conversation + R"(, "stream": true})")).out) == chat_text);
  const Outcome session = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions", conversation + R"(, "session": true})"));
  CHECK(session.out.find("HTTP 400") != std::string::npos);
  CHECK(session.out.find("sessions with a chat template are not implemented") != std::string::npos);
  // The endpoint names the model by its directory.
  const Outcome models = run("/usr/bin/curl", {"-s", "-H", m.auth(), m.url("/v1/models")});
  CHECK(models.out.find("\"id\":\"" + dir.filename().string() + "\"") != std::string::npos);
}

// A model's own chat template is as untrusted as a request: one that copies a 16 MB string
// into lists of lists (it was a 500 after gigabytes, std::bad_alloc naming nothing) is
// refused 400 on every chat request, naming the template's file and line, within the
// daemon's 64 MiB a render; completions still work and the ring stays up.
TEST_CASE("serve --model DIR: a hostile chat template in the model's files is refused per request, naming its file and line") {
  const HfModelDir model("hftmpl");
  const std::filesystem::path& dir = model.path;
  infer::Json config;
  {
    std::ifstream in(dir / "tokenizer_config.json");
    config = infer::parse_json(std::string(std::istreambuf_iterator<char>(in), {}));
  }
  config["chat_template"] = "{% set s = 'x' * 16000000 %}{% set a = [s,s,s,s,s,s,s,s,s,s] %}\n{{ a|length }}{{ messages|length }}";
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  ModelRing m(dir, {}, 10, {"--model", dir.string()});
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const Outcome chat = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})"));
  INFO(chat.out);
  CHECK(chat.out.find("HTTP 400") != std::string::npos);
  CHECK(chat.out.find("tokenizer_config.json: line 1: makes more than 64 MiB") != std::string::npos);  // the daemon's limit, at the list
  CHECK(chat.out.find("\"param\":\"messages\"") != std::string::npos);
  const Outcome plain = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(4, false, "the world")));
  CHECK(plain.out.find("HTTP 200") != std::string::npos);
  CHECK(metric(*m.ring, 0, "ringattn_ring_formations_total") == 1);
}

// Gemma 3's text checkpoints have 262144 rows and a tokenizer whose added <image_soft_token>
// is 262144: such a tokenizer loads (infer/job/text_tokenizer.hpp), and a request whose text
// holds the token is refused 400 naming it and the field, on either endpoint; others run.
TEST_CASE("serve --model DIR: a text holding an added token past the model's rows is refused 400, naming the token") {
  const HfModelDir model("hfrows");
  const std::filesystem::path& dir = model.path;
  {
    std::ifstream in(dir / "tokenizer.json");
    infer::JsonMap t = infer::parse_json_map(std::string(std::istreambuf_iterator<char>(in), {}));
    t["added_tokens"].push_back({{"id", ::test::hf_text::kVocab}, {"content", "<|img|>"}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
    std::ofstream(dir / "tokenizer.json") << t.dump();
  }
  ModelRing m(dir, {}, 10, {"--model", dir.string()});
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const std::string names = "<|img|>\\\", token " + std::to_string(::test::hf_text::kVocab);  // in JSON: its quote escaped
  const Outcome text = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(4, false, "see <|img|>")));
  INFO(text.out);
  CHECK(text.out.find("HTTP 400") != std::string::npos);
  CHECK(text.out.find(names) != std::string::npos);
  CHECK(text.out.find("\"param\":\"prompt\"") != std::string::npos);
  const Outcome chat = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "see <|img|>"}], "max_tokens": 4})"));
  INFO(chat.out);
  CHECK(chat.out.find("HTTP 400") != std::string::npos);
  CHECK(chat.out.find(names) != std::string::npos);
  CHECK(chat.out.find("\"param\":\"messages\"") != std::string::npos);
  const Outcome plain = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(4, false, "the world")));
  CHECK(plain.out.find("HTTP 200") != std::string::npos);
  CHECK(metric(*m.ring, 0, "ringattn_ring_formations_total") == 1);
}

}  // namespace ringattn::stest
