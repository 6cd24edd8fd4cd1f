// Serving as the daemons do it for many users at once (stories260K; skipped where it is
// absent): continuous batching — a request that arrives while others decode joins them at
// the next step instead of waiting for them to end, and each reply, paused and resumed
// around the newcomers, is exactly the reply it gets alone (greedy and seeded sampling);
// n > 1 — samples of one prompt sharing its prefill, each the text its seed gives alone;
// the prefix cache — a prompt that starts as an earlier one did computes only the rest,
// with llama2.c's text, and says how many tokens it found cached (also when it arrives
// before the round that ended the earlier reply does); log probabilities equal to
// a float64 model's (tests/serve/logprob_reference.py), whole and streamed; structured output
// and forced tool calls that an independent validator (npm ajv) accepts, at P = 1, 2, 3 and
// --tp 2, with curl, on a seeded model whose chat template teaches Hermes (Qwen) tool calls
// (hermes_model.hpp; test_openai_client.cpp makes the same calls through OpenAI's Node client).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "tests/serve/hermes_model.hpp"
#include "tests/serve/model_ring.hpp"

namespace ringattn::stest {
namespace {

double cached_tokens(const Outcome& o) {
  return response_json(o).at("usage").at("prompt_tokens_details").at("cached_tokens").get<double>();
}
std::string text_of(const Outcome& o) { return response_json(o).at("choices").at(0).at("text").get<std::string>(); }
double prompt_tokens(const Outcome& o) { return response_json(o).at("usage").at("prompt_tokens").get<double>(); }

std::string sampled_body(int max_tokens, bool stream) {
  return "{\"prompt\": " + cli::json_quote(kPrompt) + ", \"max_tokens\": " + std::to_string(max_tokens) +
         ", \"temperature\": 0.8, \"seed\": 42, \"stream\": " + (stream ? "true" : "false") + "}";
}

// A long sampled reply streams; once its first tokens are out, `hold` is stopped (the ring
// waits in its step) while a short greedy request queues, then let go: the long reply pauses
// at its next step, the short one joins it in the next round and ends first. Both texts must
// be what each gets alone, and rank 0's log must show the round they shared.
void join_running(ModelRing& m, int hold) {
  const Outcome alone = run("/usr/bin/curl", curl_post(m, "/v1/completions", sampled_body(300, false)));
  REQUIRE(alone.out.find("HTTP 200") != std::string::npos);
  const std::string long_text = response_json(alone).at("choices").at(0).at("text").get<std::string>();
  REQUIRE(long_text.size() > 100);

  itest::Spawned streaming(curl_post(m, "/v1/completions", sampled_body(300, true)), {}, "/usr/bin/curl");
  REQUIRE(eventually([&] { streaming.pump(); return streaming.out().find("data: {") != std::string::npos; }, 60));
  m.ring->signal(hold, SIGSTOP);
  itest::Spawned short_one(curl_post(m, "/v1/completions", body(60, false)), {}, "/usr/bin/curl");
  const bool queued = eventually([&] { return metric(*m.ring, 0, "ringattn_generations_queued") == 1; }, 60);
  m.ring->signal(hold, SIGCONT);
  REQUIRE(queued);
  const Outcome s = short_one.wait(120), l = streaming.wait(120);
  INFO("short: " << s.out << "\nlong: " << l.out.substr(0, 600) << "\nrank 0: " << m.ring->log(0));
  REQUIRE(s.out.find("HTTP 200") != std::string::npos);
  CHECK(response_json(s).at("choices").at(0).at("text").get<std::string>() == completion_60());
  bool done = false;
  CHECK(sse_text(l.out, nullptr, &done) == long_text);  // paused and resumed: the same coins, the same text
  CHECK(done);
  // The round they shared (logged when it ends, after the long reply's last token).
  CHECK(eventually([&] { return m.ring->log(0).find("2 requests (1 going on)") != std::string::npos; }, 30));
}

// A prompt sent again the moment its first reply's [DONE] arrives, while another reply
// streams on in the round that ended it: the first reply's rows become a prefix-cache entry
// only when that round ends, after the repeat was admitted (and missed); taken into the next
// round, the repeat looks again and finds them. `hold` is stopped meanwhile, so that the
// repeat surely arrives inside the round. A prompt no earlier request used (no other entry
// holds it).
void repeat_at_done(ModelRing& m, int hold) {
  const std::string prompt = "The sun was warm and the birds sang";
  itest::Spawned streaming(curl_post(m, "/v1/completions", sampled_body(300, true)), {}, "/usr/bin/curl");
  REQUIRE(eventually([&] { streaming.pump(); return streaming.out().find("data: {") != std::string::npos; }, 60));
  itest::Spawned first(curl_post(m, "/v1/completions", body(40, true, prompt)), {}, "/usr/bin/curl");
  REQUIRE(eventually([&] { first.pump(); return first.out().find("data: [DONE]") != std::string::npos; }, 120));
  m.ring->signal(hold, SIGSTOP);
  streaming.pump();
  const bool streams_on = streaming.out().find("data: [DONE]") == std::string::npos;  // the round goes on
  itest::Spawned again(curl_post(m, "/v1/completions", body(40, false, prompt)), {}, "/usr/bin/curl");
  const bool queued = eventually([&] { return metric(*m.ring, 0, "ringattn_generations_queued") == 1; }, 60);
  m.ring->signal(hold, SIGCONT);
  REQUIRE(streams_on);
  REQUIRE(queued);
  const Outcome f = first.wait(120), a = again.wait(120);
  streaming.wait(120);
  INFO("first: " << f.out.substr(0, 600) << "\nagain: " << a.out << "\nrank 0: " << m.ring->log(0));
  REQUIRE(a.out.find("HTTP 200") != std::string::npos);
  CHECK(text_of(a) == sse_text(f.out));
  CHECK(cached_tokens(a) == prompt_tokens(a) - 1);
}

// logit_bias and the presence and frequency penalties, greedy: the text a float64 model
// gives from logits shaped the same way (tests/serve/logprob_reference.py --greedy). Under
// --tp the group's first rank shapes and chooses for the group.
void shaped_as_reference(ModelRing& m) {
  const std::string shaping = R"("logit_bias": {"432": -100, "298": 5}, "presence_penalty": 0.5, "frequency_penalty": 1.0)";
  const Outcome ref = run("/usr/bin/python3", {RINGATTN_SOURCE_ROOT "/tests/serve/logprob_reference.py", (m.dir / "stories260K.bin").string(),
                                               "--prompt", "[1, 403, 407, 261, 378]", "--greedy", "40", "--bias",
                                               R"({"432": -100, "298": 5})", "--presence", "0.5", "--frequency", "1.0", "--tokenizer",
                                               (m.dir / "tok512.bin").string()});
  INFO("reference: " << ref.err);
  REQUIRE(ref.exit_code == 0);
  const std::string want = infer::parse_json(ref.out).at("text").get<std::string>();
  const Outcome o = run("/usr/bin/curl", curl_post(m, "/v1/completions",
                                                   R"({"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, )" + shaping + "}"));
  INFO(o.out);
  REQUIRE(o.out.find("HTTP 200") != std::string::npos);
  CHECK(text_of(o) == want);
  CHECK(want.rfind(" there", 0) == 0);  // "," (432), the model's choice, was barred
}

// n = 3 samples of one prompt: each the text its seed gives alone (the seed + its index), whole
// and streamed (chunks by choice index); the prompt prefilled once (`count_prefill`: the ring's
// prefill-token counter's growth, where the test can read it: at P = 3, one row a token; on a
// ring that ran nothing before, as a round's counts are recorded after its last token is out).
void samples_equal_alone(ModelRing& m, bool count_prefill) {
  auto ring_prefill = [&] {
    double n = 0;
    for (int r = 0; r < 3; ++r) n += metric(*m.ring, r, "ringattn_generated_tokens_total{phase=\"prefill\"}");
    return n;
  };
  const std::string prompt = "Lily and Ben went to the park with";  // not asked before: not in the prefix cache
  auto body_of = [&](int seed, int n, bool stream) {
    return "{\"prompt\": " + cli::json_quote(prompt) + ", \"max_tokens\": 24, \"temperature\": 1, \"seed\": " + std::to_string(seed) +
           ", \"n\": " + std::to_string(n) + ", \"stream\": " + (stream ? "true" : "false") + "}";
  };
  const double before = ring_prefill();
  const Outcome three = run("/usr/bin/curl", curl_post(m, "/v1/completions", body_of(11, 3, false)));
  REQUIRE(three.out.find("HTTP 200") != std::string::npos);
  const infer::Json j = response_json(three);
  REQUIRE(j.at("choices").size() == 3);
  CHECK(j.at("usage").at("completion_tokens").get<double>() == 72);
  if (count_prefill)
    CHECK(eventually([&] { return ring_prefill() - before == j.at("usage").at("prompt_tokens").get<double>(); }, 10));
  for (int i = 0; i < 3; ++i) {
    CHECK(j.at("choices").at(i).at("index") == i);
    const Outcome alone = run("/usr/bin/curl", curl_post(m, "/v1/completions", body_of(11 + i, 1, false)));
    CHECK(j.at("choices").at(i).at("text") == response_json(alone).at("choices").at(0).at("text"));
  }
  // Streamed: every chunk names its choice; each choice's chunks are its text, then its finish.
  const Outcome s = run("/usr/bin/curl", curl_post(m, "/v1/completions", body_of(11, 3, true)));
  std::vector<std::string> text(3);
  int finished = 0;
  std::istringstream in(s.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const infer::Json chunk = infer::parse_json(line.substr(6));
    const infer::Json& c = chunk.at("choices").at(0);
    text[c.at("index").get<std::size_t>()] += c.at("text").get<std::string>();
    finished += c.at("finish_reason").is_null() ? 0 : 1;
  }
  CHECK(finished == 3);
  for (int i = 0; i < 3; ++i) CHECK(text[static_cast<std::size_t>(i)] == j.at("choices").at(i).at("text").get<std::string>());
}

TEST_CASE("serve --model: a request that arrives while a long reply streams joins it at the next step; both texts exact") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {}, 10);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  samples_equal_alone(m, true);  // first: no earlier round can still be recording its counts
  join_running(m, 1);
  repeat_at_done(m, 2);
  shaped_as_reference(m);
  // Every ended reply's rows went with its round, but for what the prefix cache keeps.
  CHECK(eventually([&] {
    double rows = 0;
    for (int r = 0; r < 3; ++r) rows += metric(*m.ring, r, "ringattn_generation_cache_rows");
    return rows == metric(*m.ring, 0, "ringattn_prefix_cache_rows") && rows > 0;
  }, 10));
}

TEST_CASE("serve --model --prefill-chunk 32: beside a stream, a long prompt goes in chunks, one a step; llama2.c's text") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {"--prefill-chunk", "32"}, 10);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  itest::Spawned streaming(curl_post(m, "/v1/completions", sampled_body(300, true)), {}, "/usr/bin/curl");
  REQUIRE(eventually([&] { streaming.pump(); return streaming.out().find("data: {") != std::string::npos; }, 60));
  // llama2.c's 64 greedy ids after BOS (kRunText) as the prompt, in 3 chunks: its continuation
  // is the greedy story's next words.
  const std::vector<int>& ids = ::test::kRunIds;
  const Outcome o = run("/usr/bin/curl", curl_post(m, "/v1/completions", ids_body(ids_json(ids.begin(), ids.end()), 40, "")));
  streaming.wait(120);
  REQUIRE(o.out.find("HTTP 200") != std::string::npos);
  const std::string text = text_of(o);
  INFO("text: " << text << "\nrank 0: " << m.ring->log(0));
  CHECK(prompt_tokens(o) == 65);
  CHECK(text.size() > 60);
  CHECK(::test::kGreedy256Text.compare(::test::kRunText.size(), text.size(), text) == 0);
  // Its chunks went in rounds beside the stream (32 prompt tokens and the stream's one).
  CHECK(eventually([&] { return m.ring->log(0).find("2 requests (2 going on), 33 tokens fed") != std::string::npos; }, 30));
}

TEST_CASE("serve --model --prefill-chunk 32: two long prompts arriving at once beside a stream share the rounds' chunk; no round feeds more; llama2.c's texts") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {"--prefill-chunk", "32"}, 10);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  itest::Spawned streaming(curl_post(m, "/v1/completions", sampled_body(300, true)), {}, "/usr/bin/curl");
  REQUIRE(eventually([&] { streaming.pump(); return streaming.out().find("data: {") != std::string::npos; }, 60));
  // Two beginnings of llama2.c's greedy story (cut at words; ~60 and ~80 tokens): each goes on
  // as the story does. Queued together while a rank is held.
  const std::string& greedy = ::test::kGreedy256Text;
  const std::string one = greedy.substr(0, greedy.rfind(' ', 250)), two = greedy.substr(0, greedy.rfind(' ', 330));
  m.ring->signal(1, SIGSTOP);
  itest::Spawned a(curl_post(m, "/v1/completions", body(40, false, one)), {}, "/usr/bin/curl");
  itest::Spawned b(curl_post(m, "/v1/completions", body(40, false, two)), {}, "/usr/bin/curl");
  const bool queued = eventually([&] { return metric(*m.ring, 0, "ringattn_generations_queued") == 2; }, 60);
  m.ring->signal(1, SIGCONT);
  REQUIRE(queued);
  const Outcome oa = a.wait(120), ob = b.wait(120);
  streaming.wait(120);
  const std::string log = m.ring->log(0);
  INFO("rank 0: " << log);
  for (const auto& [prompt, o] : {std::pair{one, oa}, std::pair{two, ob}}) {
    REQUIRE(o.out.find("HTTP 200") != std::string::npos);
    const std::string text = text_of(o);
    INFO("prompt: " << prompt << "\ntext: " << text);
    CHECK(prompt_tokens(o) > 50);
    CHECK(text.size() > 60);
    CHECK(greedy.compare(prompt.size(), text.size(), text) == 0);
  }
  // Every round fed at most the chunk, the stream's token and a token more for each prompt in
  // chunks beside the first; the prompts went in several rounds.
  std::istringstream in(log);
  int rounds = 0, most = 0;
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(" tokens fed");
    if (line.find("generation round") == std::string::npos || at == std::string::npos) continue;
    const auto from = line.rfind(", ", at) + 2;
    most = std::max(most, std::stoi(line.substr(from, at - from)));
    ++rounds;
  }
  CHECK(most <= 32 + 3);
  CHECK(rounds >= 5);
}

TEST_CASE("serve --model --tp 2 on 4 daemons: a newcomer joins a running reply on the whole mesh; both texts exact") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  RingConfig c;
  c.world = 4;
  ModelRing m(*dir, {"--tp", "2"}, 10, {}, c);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  join_running(m, 3);
  shaped_as_reference(m);
  samples_equal_alone(m, false);
}

TEST_CASE("serve --model: the prefix cache — a repeated prompt, one that extends a cached reply, one that shares part of it, one whose many new tokens are dealt over the ranks: llama2.c's text, their cached tokens; entries evicted for room") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {"--cache-mib", "0.5"}, 10);  // 306 rows ring-wide (stories260K: 5 KiB a token)
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  auto ask = [&](const std::string& prompt, int max_tokens) {
    const Outcome o = run("/usr/bin/curl", curl_post(m, "/v1/completions", body(max_tokens, false, prompt)));
    INFO(o.out);
    REQUIRE(o.out.find("HTTP 200") != std::string::npos);
    return o;
  };
  // From BOS alone llama2.c's greedy text is kGreedy256Text: a prompt that is its beginning
  // (cut at a word) continues it.
  const std::string& greedy = ::test::kGreedy256Text;
  auto continues_greedy = [&](const std::string& prompt, const std::string& text) {
    INFO("prompt: " << prompt << "\ntext: " << text);
    CHECK(text.size() > 60);
    CHECK(greedy.compare(prompt.size(), text.size(), text) == 0);
  };

  const Outcome a = ask(kPrompt, 60);
  CHECK(text_of(a) == completion_60());
  CHECK(cached_tokens(a) == 0);
  // The same prompt again: every token but the last (whose logits choose the first) cached.
  const Outcome b = ask(kPrompt, 60);
  CHECK(text_of(b) == completion_60());
  CHECK(cached_tokens(b) == prompt_tokens(b) - 1);
  // The whole first reply and more: the entry's rows all reused, none cut.
  const Outcome c = ask(::test::kRunText, 40);
  continues_greedy(::test::kRunText, text_of(c));
  CHECK(cached_tokens(c) >= 60);
  // Part of it: the entry's rows past the shared ones are cut on every rank.
  const std::string part = "Once upon a time, there was a little girl named Lily. She loved to play outside";
  const Outcome d = ask(part, 40);
  continues_greedy(part, text_of(d));
  CHECK(cached_tokens(d) == prompt_tokens(d) - 1);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_lookups_total") == 4);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_hits_total") == 3);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_cached_tokens_total") == cached_tokens(b) + cached_tokens(c) + cached_tokens(d));
  const double entry = metric(*m.ring, 0, "ringattn_prefix_cache_rows");
  CHECK(entry == prompt_tokens(d) + 39);
  CHECK(eventually([&] {
    double rows = 0;
    for (int r = 0; r < 3; ++r) rows += metric(*m.ring, r, "ringattn_generation_cache_rows");
    return rows == entry;
  }, 10));
  // A prompt that goes on far past the entry (the greedy text to some 380 bytes): its new
  // tokens, more than the ranks, are dealt over them — every rank feeds some.
  const std::string longer = greedy.substr(0, greedy.rfind(' ', 380));
  std::vector<double> fed_before;
  for (int r = 0; r < 3; ++r) fed_before.push_back(metric(*m.ring, r, "ringattn_generated_tokens_total{phase=\"prefill\"}"));
  const Outcome g = ask(longer, 45);
  continues_greedy(longer, text_of(g));
  const double fresh = prompt_tokens(g) - cached_tokens(g);
  CHECK(cached_tokens(g) >= 40);
  CHECK(fresh >= 30);
  CHECK(eventually([&] {
    double fed = 0;
    bool everyone = true;
    for (int r = 0; r < 3; ++r) {
      const double mine = metric(*m.ring, r, "ringattn_generated_tokens_total{phase=\"prefill\"}") - fed_before[static_cast<std::size_t>(r)];
      everyone = everyone && mine >= std::floor(fresh / 3);
      fed += mine;
    }
    return everyone && fed == fresh;
  }, 10));
  // A prompt sharing only BOS (not worth the cache) that needs more than is free: the entry
  // is evicted for it, never keeping it out.
  const Outcome e = ask("Lily", 300);
  CHECK(cached_tokens(e) == 0);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_evictions_total") == 1);
}

TEST_CASE("serve --model: logprobs (completions, 0-5) and logprobs + top_logprobs (chat, streamed) equal a float64 model's") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {}, 10);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const std::vector<int>& run_ids = ::test::kRunIds;  // llama2.c's greedy ids after "Once upon a time"
  const int n = 20;
  std::string prompt = "[1", generated = "[";
  for (int i = 0; i < 4; ++i) prompt += ", " + std::to_string(run_ids[static_cast<std::size_t>(i)]);
  for (int i = 4; i < 4 + n; ++i) generated += (i > 4 ? ", " : "") + std::to_string(run_ids[static_cast<std::size_t>(i)]);
  const Outcome ref = run("/usr/bin/python3", {RINGATTN_SOURCE_ROOT "/tests/serve/logprob_reference.py", (*dir / "stories260K.bin").string(),
                                               "--prompt", prompt + "]", "--generated", generated + "]", "--top", "5"});
  INFO("reference: " << ref.err);
  REQUIRE(ref.exit_code == 0);
  const infer::Json want = infer::parse_json(ref.out);
  REQUIRE(want.size() == static_cast<std::size_t>(n));
  constexpr double kTol = 1e-4;  // fp32 logits against float64, after a log softmax
  // The top alternatives' log probabilities, largest first, of a reference step.
  auto top_values = [&](std::size_t i, std::size_t k) {
    std::vector<double> v;
    for (std::size_t j = 0; j < k; ++j) v.push_back(want[i].at("top")[j][1].get<double>());
    return v;
  };

  const Outcome c = run("/usr/bin/curl", curl_post(m, "/v1/completions",
                                                   "{\"prompt\": \"Once upon a time\", \"max_tokens\": 20, \"temperature\": 0, \"logprobs\": 5}"));
  REQUIRE(c.out.find("HTTP 200") != std::string::npos);
  const infer::Json cj = response_json(c);
  const infer::Json& lp = cj.at("choices").at(0).at("logprobs");
  REQUIRE(lp.at("token_logprobs").size() == static_cast<std::size_t>(n));
  std::string joined;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    CHECK(std::abs(lp.at("token_logprobs")[i].get<double>() - want[i].at("logprob").get<double>()) < kTol);
    std::vector<double> got;
    for (const auto& [text, x] : lp.at("top_logprobs")[i].items()) got.push_back(x.get<double>());
    std::sort(got.rbegin(), got.rend());
    const std::vector<double> w = top_values(i, got.size());
    REQUIRE(got.size() == 5);
    for (std::size_t j = 0; j < got.size(); ++j) CHECK(std::abs(got[j] - w[j]) < kTol);
    CHECK(lp.at("text_offset")[i].get<double>() == static_cast<double>(joined.size()));
    joined += lp.at("tokens")[i].get<std::string>();
  }
  CHECK(joined == text_of(c));

  // A chat (llama2.c's: the message's text), streamed: each chunk carries its tokens' entries.
  const Outcome chat = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 20, "
                                                      "\"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 3, \"stream\": true}"));
  std::vector<infer::Json> entries;
  std::istringstream in(chat.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const infer::Json j = infer::parse_json(line.substr(6));
    const infer::Json& choice = j.at("choices").at(0);
    if (const infer::Json* l = infer::json_field(choice, "logprobs"); l && !l->is_null())
      for (const infer::Json& e : l->at("content")) entries.push_back(e);
  }
  REQUIRE(entries.size() == static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    CHECK(std::abs(entries[i].at("logprob").get<double>() - want[i].at("logprob").get<double>()) < kTol);
    const infer::Json& top = entries[i].at("top_logprobs");
    REQUIRE(top.size() == 3);
    const std::vector<double> w = top_values(i, 3);
    for (std::size_t j = 0; j < 3; ++j) CHECK(std::abs(top[j].at("logprob").get<double>() - w[j]) < kTol);
    std::string bytes;
    for (const infer::Json& b : entries[i].at("bytes")) bytes += static_cast<char>(b.get<int>());
    CHECK(bytes == entries[i].at("token").get<std::string>());
  }
  // Refusals: out of range, and top_logprobs without logprobs.
  const Outcome six = run("/usr/bin/curl", curl_post(m, "/v1/completions", "{\"prompt\": \"a\", \"logprobs\": 6}"));
  CHECK(six.out.find("HTTP 400") != std::string::npos);
  const Outcome alone = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                                       "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 2}"));
  CHECK(alone.out.find("HTTP 400") != std::string::npos);
  CHECK(alone.out.find("invalid_parameter_combination") != std::string::npos);
}

// A schema of recursion and unions for structured output (the tools' are hermes_model.hpp's).
const char* kTree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
  "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 1}}, "required": ["v", "kids"], "additionalProperties": false}},
  "$ref": "#/$defs/node"})";

// Structured output (two schemas, three seeds, whole and streamed) and forced tool calls
// (required and named, whole and streamed), then a tool result's follow-up, on `m`.
void constrained_replies_validate(ModelRing& m) {
  infer::Json cases = infer::Json::array();
  auto chat = [&](const std::string& extra) {
    const Outcome o = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
                                                     R"({"messages": [{"role": "user", "content": "Who?"}], "max_tokens": 160, )" + extra + "}"));
    INFO(o.out.substr(0, 2000));
    REQUIRE(o.out.find("HTTP 200") != std::string::npos);
    return o;
  };
  for (const char* schema : {kPerson, kTree}) {
    infer::Json c = {{"name", schema == kPerson ? "person" : "tree"}, {"schema", infer::parse_json(schema)}, {"outputs", infer::Json::array()}};
    for (int seed = 1; seed <= 3; ++seed) {
      const std::string format = std::string(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": )") +
                                 schema + "}}, \"temperature\": 1, \"seed\": " + std::to_string(seed);
      const infer::Json j = response_json(chat(format));
      CHECK(j.at("choices").at(0).at("finish_reason") == "stop");
      c["outputs"].push_back(j.at("choices").at(0).at("message").at("content"));
      const Outcome s = chat(format + R"(, "stream": true)");
      CHECK(sse_text(s.out) == c["outputs"].back().get<std::string>());  // the same text, streamed
    }
    cases.push_back(c);
  }
  // Forced calls: required (either tool) and named; the arguments against the tool's parameters.
  const std::string tools = std::string(R"("tools": [{"type": "function", "function": {"name": "weather", "parameters": )") + kWeather +
                            R"(}}, {"type": "function", "function": {"name": "person", "parameters": )" + kPerson + "}}]";
  infer::Json weather = {{"name", "weather"}, {"schema", infer::parse_json(kWeather)}, {"outputs", infer::Json::array()}};
  infer::Json person = {{"name", "person"}, {"schema", infer::parse_json(kPerson)}, {"outputs", infer::Json::array()}};
  std::string call_id, call_args;
  for (int seed = 1; seed <= 3; ++seed) {
    for (const std::string choice : {R"("required")", R"({"type": "function", "function": {"name": "weather"}})"}) {
      const infer::Json j = response_json(chat(tools + R"(, "tool_choice": )" + choice + R"(, "temperature": 1, "seed": )" + std::to_string(seed)));
      const infer::Json& choice0 = j.at("choices").at(0);
      INFO("reply: " << j.dump());
      CHECK(choice0.at("finish_reason") == "tool_calls");
      REQUIRE(choice0.at("message").at("tool_calls").size() == 1);
      const infer::Json& call = choice0.at("message").at("tool_calls").at(0);
      const std::string name = call.at("function").at("name").get<std::string>();
      if (choice.find("weather") != std::string::npos) CHECK(name == "weather");
      (name == "weather" ? weather : person)["outputs"].push_back(call.at("function").at("arguments"));
      call_id = call.at("id").get<std::string>();
      call_args = call.at("function").at("arguments").get<std::string>();
    }
  }
  // Streamed: one tool_calls delta once the call is whole.
  const Outcome s = chat(tools + R"(, "tool_choice": "required", "temperature": 1, "seed": 9, "stream": true)");
  CHECK(s.out.find("\"tool_calls\":[{\"index\":0,") != std::string::npos);
  CHECK(s.out.find("\"finish_reason\":\"tool_calls\"") != std::string::npos);
  cases.push_back(weather);
  cases.push_back(person);
  ajv_accepts(cases);
  // The tool's result goes back in the next request, through the template.
  const Outcome follow = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Who?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": )" +
      cli::json_quote(call_id) + R"(, "type": "function", "function": {"name": "weather", "arguments": )" + cli::json_quote(call_args) +
      R"(}}]}, {"role": "tool", "tool_call_id": )" + cli::json_quote(call_id) + R"(, "content": "12 C"}], "max_tokens": 8, )" + tools + "}"));
  CHECK(follow.out.find("HTTP 200") != std::string::npos);
  // What cannot be enforced is refused by name.
  const Outcome pattern = run("/usr/bin/curl", curl_post(m, "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}}})"));
  CHECK(pattern.out.find("HTTP 400") != std::string::npos);
  CHECK(pattern.out.find(R"(unsupported schema keyword \"pattern\" at #)") != std::string::npos);  // as the JSON body escapes it
}

TEST_CASE("serve --model DIR: structured output and forced tool calls validate with ajv at P = 1, 2, 3 and --tp 2") {
  const HermesModel model;
  for (const auto& [world, tp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {3, 1}, {4, 2}}) {
    CAPTURE(world);
    CAPTURE(tp);
    RingConfig c;
    c.world = world;
    std::vector<std::string> more;
    if (tp > 1) more = {"--tp", std::to_string(tp)};
    ModelRing m(model.path, more, 10, {"--model", model.path.string()}, c);
    INFO(m.ring->logs());
    REQUIRE(m.ring->wait_ready(60));
    constrained_replies_validate(m);
  }
}

}  // namespace
}  // namespace ringattn::stest
