// Serving as the daemons do it for many users at once (stories260K; skipped where it is
// absent): continuous batching — a request that arrives while others decode joins them at
// the next step instead of waiting for them to end, and each reply, paused and resumed
// around the newcomers, is exactly the reply it gets alone (greedy and seeded sampling);
// the prefix cache — a prompt that starts as an earlier one did computes only the rest,
// with llama2.c's text, and says how many tokens it found cached.
#include <doctest/doctest.h>
#include <signal.h>

#include <string>

#include "tests/serve/model_ring.hpp"

namespace ringattn::stest {
namespace {

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

TEST_CASE("serve --model: a request that arrives while a long reply streams joins it at the next step; both texts exact") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  ModelRing m(*dir, {}, 10);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  join_running(m, 1);
  // Every ended reply's rows went with its round, but for what the prefix cache keeps.
  CHECK(eventually([&] {
    double rows = 0;
    for (int r = 0; r < 3; ++r) rows += metric(*m.ring, r, "ringattn_generation_cache_rows");
    return rows == metric(*m.ring, 0, "ringattn_prefix_cache_rows") && rows > 0;
  }, 10));
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
}

double cached_tokens(const Outcome& o) {
  return response_json(o).at("usage").at("prompt_tokens_details").at("cached_tokens").get<double>();
}
std::string text_of(const Outcome& o) { return response_json(o).at("choices").at(0).at("text").get<std::string>(); }
double prompt_tokens(const Outcome& o) { return response_json(o).at("usage").at("prompt_tokens").get<double>(); }

TEST_CASE("serve --model: the prefix cache — a repeated prompt, one that extends a cached reply, one that shares part of it: llama2.c's text, their cached tokens; entries evicted for room") {
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
  // A prompt sharing only BOS (not worth the cache) that needs more than is free: the entry
  // is evicted for it, never keeping it out.
  const Outcome e = ask("Lily", 300);
  CHECK(cached_tokens(e) == 0);
  CHECK(metric(*m.ring, 0, "ringattn_prefix_cache_evictions_total") == 1);
}

}  // namespace
}  // namespace ringattn::stest
