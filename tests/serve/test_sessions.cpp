// Sessions' bookkeeping on rank 0 (SessionTable: reservations, statuses, the rows a
// session keeps, closing, expiry, the ring's re-forming) and the GENERATE payload that
// carries sessions to the workers, against hostile payloads. No sockets.
#include <doctest/doctest.h>

#include <bit>
#include <chrono>
#include <functional>
#include <limits>
#include <span>
#include <memory>
#include <string>
#include <thread>

#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"
#include "src/serve/generation.hpp"
#include "src/plan/cost_model.hpp"
#include "src/serve/sessions.hpp"

namespace ringattn::serve {
namespace {

std::shared_ptr<Generation> request(std::vector<std::int32_t> prompt, int max_tokens) {
  auto g = std::make_shared<Generation>();
  g->prompt = std::move(prompt);
  g->feed = g->prompt;  // what its (first) round feeds
  g->max_tokens = max_tokens;
  return g;
}

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Refusal& e) {
    return e.status();
  }
  return 0;
}

// The result a finished reply of `tokens` leaves, its history `fed` tokens long.
infer::SequenceResult reply(std::vector<std::int32_t> tokens, std::int64_t fed) {
  infer::SequenceResult r;
  r.tokens = std::move(tokens);
  r.next = {1000 + fed, fed};
  return r;
}

}  // namespace

TEST_CASE("sessions: a session keeps its history's rows; its follow-up starts with the unfed token; every reservation comes back") {
  SessionTable t(100, 600, 512);
  auto a = request({1, 403, 407}, 5);
  t.admit(*a, true, "");
  const std::string id = a->session;
  CHECK(id.rfind("sess-", 0) == 0);
  CHECK(id.size() == 5 + 32);  // 128 random bits: not guessable from another session's id
  CHECK(id.find_first_not_of("0123456789abcdef", 5) == std::string::npos);
  CHECK(a->keep);
  CHECK(a->reserved == 8);
  CHECK(t.reserved() == 8);
  auto plain = request({1, 9}, 4);
  t.admit(*plain, false, "");
  CHECK(plain->sequence > a->sequence);  // fresh ids increase in arrival order
  CHECK(!plain->keep);
  CHECK(t.reserved() == 14);
  CHECK(status_of([&] { t.admit(*request({5}, 1), false, id); }) == 409);  // busy with `a`
  CHECK(t.admitted() == 2);  // a refused request is not counted

  // `a` ends at max_tokens: 3 + 4 fed, its 5th token chosen but not fed.
  const infer::SequenceResult ra = reply({10, 11, 12, 13, 14}, 7);
  a->complete = true;
  t.finish(*a, &ra, true);
  t.finish(*plain, nullptr, true);
  t.finish(*plain, nullptr, true);  // settled once: nothing more comes back
  CHECK(t.admitted() == 0);
  CHECK(t.reserved() == 7);  // the session's history only
  auto b = request({20, 21}, 3);
  t.admit(*b, false, id);
  CHECK(b->prompt == std::vector<std::int32_t>{14, 20, 21});  // the unfed token goes in first
  REQUIRE(b->continues);
  CHECK(b->continues->rope_position == 7);
  CHECK(b->continues->ring_position == 1007);
  CHECK(b->sequence == a->sequence);
  CHECK(b->reserved == 7 + 3 + 3);
  CHECK(t.reserved() == 13);
  // `b` ends at EOS: the end token stays out of the history, no token waits.
  const infer::SequenceResult rb = reply({30, 2}, 11);
  b->end_token = true;  // as the ring thread marks a reply that chose one of the model's end tokens
  t.finish(*b, &rb, true);
  CHECK(t.reserved() == 11);
  auto c = request({40}, 2);
  t.admit(*c, false, id);
  CHECK(c->prompt == std::vector<std::int32_t>{40});
  t.finish(*c, nullptr, false);  // failed (or its client left): the session ends
  CHECK(t.admitted() == 0);
  CHECK(t.size() == 0);
  CHECK(t.reserved() == 0);
  CHECK(t.take_ended() == std::vector<std::int32_t>{a->sequence});
  CHECK(status_of([&] { t.admit(*request({5}, 1), false, id); }) == 404);
  auto d = request({1}, 1), e = request({1}, 1);
  t.admit(*d, true, "");
  t.admit(*e, true, "");
  CHECK(d->session != e->session);
}

TEST_CASE("sessions: refusals with both numbers: past the context (400), past the ring (413), not now (503)") {
  SessionTable t(50, 600, 40);
  try {
    t.admit(*request({1, 2, 3}, 38), false, "");
    FAIL("admitted");
  } catch (const Refusal& e) {
    CHECK(e.status() == 400);
    CHECK(std::string(e.what()).find("the prompt's 3 tokens and max_tokens 38 exceed the model's context of 40") != std::string::npos);
  }
  SessionTable small(30, 600, 512);
  try {
    small.admit(*request({1, 2}, 30), false, "");
    FAIL("admitted");
  } catch (const Refusal& e) {
    CHECK(e.status() == 413);
    CHECK(std::string(e.what()).find("needs 32 KV-cache rows, and the ring holds at most 30") != std::string::npos);
  }
  auto held = request({1, 2}, 18);  // in flight: its rows are not anyone else's
  small.admit(*held, true, "");
  try {
    small.admit(*request({1, 2}, 10), false, "");
    FAIL("admitted");
  } catch (const Refusal& e) {
    CHECK(e.status() == 503);
    CHECK(std::string(e.what()).find("needs 12 KV-cache rows; 10 of 30 are free now") != std::string::npos);
  }
  CHECK(small.reserved() == 20);  // a refusal reserves nothing
}

TEST_CASE("sessions: idle sessions never keep a request out — the least recently used are ended to make room") {
  SessionTable t(30, 600, 512);
  std::vector<std::shared_ptr<Generation>> open;
  for (int i = 0; i < 3; ++i) {  // three idle sessions of 9 rows each: 27 of 30 held
    auto g = request({1, 2}, 8);
    t.admit(*g, true, "");
    const infer::SequenceResult r = reply({5, 6, 7, 8, 9, 10, 11, 12}, 9);
    g->complete = true;
    t.finish(*g, &r, true);
    open.push_back(g);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // distinct last-use times
  }
  CHECK(t.reserved() == 27);
  // The newest is used again, so the oldest are the least recently used.
  auto again = request({3}, 1);
  t.admit(*again, false, open[2]->session);
  t.finish(*again, nullptr, true);  // finished without a result: that session ends
  CHECK(t.size() == 2);
  t.take_ended();
  auto big = request({1, 2}, 18);  // 20 rows: needs both remaining idle sessions' room? 18 + 20 > 30
  t.admit(*big, false, "");
  CHECK(t.evicted() == 1);  // one was enough: 30 - 9 = 21 >= 20
  CHECK(t.size() == 1);
  CHECK(t.take_ended() == std::vector<std::int32_t>{open[0]->sequence});  // the least recently used went
  CHECK(status_of([&] { t.admit(*request({5}, 1), false, open[0]->session); }) == 404);
  // A request in flight is never evicted: with `big` running, nothing more fits.
  CHECK(status_of([&] { t.admit(*request({1, 2}, 20), false, ""); }) == 503);
  CHECK(t.evicted() == 1);  // and no idle session went for a request that could not fit anyway
}

TEST_CASE("sessions: closing a busy session waits for its reply; idle ones expire; the ring's re-forming drops all") {
  SessionTable t(100, 0.05, 512);
  auto a = request({1, 2}, 2);
  t.admit(*a, true, "");
  t.close(a->session);  // busy: ends when its reply does
  CHECK(t.size() == 1);
  const infer::SequenceResult r = reply({7, 8}, 3);
  a->complete = true;
  t.finish(*a, &r, true);
  CHECK(t.size() == 0);
  CHECK(t.reserved() == 0);
  CHECK(t.take_ended().size() == 1);
  CHECK(status_of([&] { t.close(a->session); }) == 404);

  auto b = request({1, 2}, 2);
  t.admit(*b, true, "");
  t.finish(*b, &r, true);
  t.expire(std::chrono::steady_clock::now());
  CHECK(t.size() == 1);  // not idle long enough yet
  t.expire(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  CHECK(t.size() == 0);
  CHECK(t.reserved() == 0);
  CHECK(t.take_ended().size() == 1);

  auto c = request({1, 2}, 2);
  t.admit(*c, true, "");
  t.finish(*c, &r, true);
  t.drop_all();
  CHECK(t.size() == 0);
  CHECK(t.reserved() == 0);
  CHECK(t.take_ended().empty());  // the rows went with the ring
}

TEST_CASE("prefix cache: a whole reply's rows become an entry; a prompt that starts the same takes it, cut past the shared part; the cost model decides; entries go before idle sessions") {
  CHECK(plan::prefix_pays(10, 2, 3));   // 2 new tokens on one rank beat 12 over 3 ranks
  CHECK(!plan::prefix_pays(3, 2, 3));   // not 5 over 3
  CHECK(plan::prefix_pays(1, 3, 3));    // 3 new tokens dealt over 3 ranks: one a rank
  CHECK(!plan::prefix_pays(1, 4, 3));   // BOS alone is not worth cutting an entry for 4 new tokens
  CHECK(plan::prefix_pays(100, 100, 1));  // one rank: half the work saved
  CHECK(!plan::prefix_pays(1, 100, 1));   // BOS saves too little to cut an entry for
  CHECK(!plan::prefix_pays(0, 1, 1));

  SessionTable t(40, 600, 512, 3);
  auto a = request({1, 5, 6, 7}, 4);
  t.admit(*a, false, "");
  CHECK(a->cached == 0);
  CHECK(!a->continues);
  a->chosen = {8, 9, 10, 11};  // 8, 9, 10 fed; 11 chosen last
  a->complete = true;
  const infer::SequenceResult ra = reply({8, 9, 10, 11}, 7);
  CHECK(t.finish(*a, &ra, true));  // the table keeps its rows
  CHECK(t.cache_figures().entries == 1);
  CHECK(t.cache_figures().rows == 7);
  CHECK(t.reserved() == 7);

  // A prompt that goes on from the whole entry (BOS 5 6 7 8 9 10) and adds 2: no cut.
  auto b = request({1, 5, 6, 7, 8, 9, 10, 12, 13}, 2);
  t.admit(*b, false, "");
  CHECK(b->sequence == a->sequence);
  CHECK(b->cached == 7);
  CHECK(b->feed == std::vector<std::int32_t>{12, 13});
  REQUIRE(b->continues);
  CHECK(b->continues->ring_position == 1007);
  CHECK(b->continues->rope_position == 7);
  CHECK(!b->cut_from);
  CHECK(b->ran);  // its sequence has rows on every rank: erased if it fails
  CHECK(t.reserved() == 7 + 2 + 2);
  CHECK(t.cache_figures().entries == 0);  // taken while it runs
  b->chosen = {14, 15};
  b->complete = true;
  const infer::SequenceResult rb = reply({14, 15}, 10);
  CHECK(t.finish(*b, &rb, true));
  CHECK(t.cache_figures().rows == 10);  // BOS 5 6 7 8 9 10 12 13 14

  // Too little shared for the cost model (BOS, then 2 new tokens: fewer than the ranks, so on
  // one rank, against 3 tokens over 3): computed afresh, and kept as a second entry.
  auto d = request({1, 20, 21}, 2);
  t.admit(*d, false, "");
  CHECK(d->cached == 0);
  d->chosen = {30, 31};
  d->complete = true;
  const infer::SequenceResult rd = reply({30, 31}, 4);
  CHECK(t.finish(*d, &rd, true));
  CHECK(t.cache_figures().entries == 2);

  // The same first prompt again: all but its last token shared; the rows past them cut.
  auto c = request({1, 5, 6, 7}, 4);
  t.admit(*c, false, "");
  CHECK(c->cached == 3);
  CHECK(c->feed == std::vector<std::int32_t>{7});
  CHECK(c->cut_from == 1003);
  CHECK(!t.finish(*c, nullptr, false));  // failed: not kept (the caller erases its rows)
  CHECK(t.reserved() == 4);  // the other entry's rows
  CHECK(t.cache_figures().entries == 1);

  const auto f = t.cache_figures();
  CHECK(f.lookups == 4);
  CHECK(f.hits == 2);
  CHECK(f.cached_tokens == 10);

  // An idle session (12 rows) and the entry (4): a request of 25 needs 1 more than is free;
  // the entry goes first, the session stays.
  auto s = request({1, 40, 41}, 10);
  t.admit(*s, true, "");
  s->complete = true;
  const infer::SequenceResult rs = reply({50}, 12);
  t.finish(*s, &rs, true);
  CHECK(t.reserved() == 16);
  auto big = request({1, 60}, 23);
  t.admit(*big, false, "");
  CHECK(t.cache_figures().entries == 0);
  CHECK(t.cache_figures().evicted == 1);
  CHECK(t.size() == 1);
  CHECK(t.take_ended() == std::vector<std::int32_t>{d->sequence});
}

TEST_CASE("prefix cache: a request admitted before the entry it needs was filed (the round that ended that reply still ran) looks again when taken") {
  SessionTable t(100, 600, 512, 3);
  auto a = request({1, 5, 6, 7}, 4);
  t.admit(*a, false, "");
  auto again = request({1, 5, 6, 7}, 4);  // arrives while a's round runs: nothing to find yet
  t.admit(*again, false, "");
  CHECK(again->cached == 0);
  CHECK(again->missed);
  const std::int32_t fresh = again->sequence;
  CHECK(t.reserved() == 16);
  CHECK(!t.look_again(*again));  // still nothing
  a->chosen = {8, 9, 10, 11};
  a->complete = true;
  const infer::SequenceResult ra = reply({8, 9, 10, 11}, 7);
  CHECK(t.finish(*a, &ra, true));  // the round ended: a's rows are an entry
  CHECK(t.reserved() == 8 + 7);
  CHECK(t.look_again(*again));  // taken into the next round: it finds them
  CHECK(again->sequence == a->sequence);
  CHECK(again->sequence != fresh);
  CHECK(again->cached == 3);
  CHECK(again->feed == std::vector<std::int32_t>{7});
  CHECK(again->cut_from == 1003);
  CHECK(again->ran);
  CHECK(t.reserved() == 8);  // its own reservation holds the entry's rows now
  CHECK(t.cache_figures().entries == 0);
  CHECK(t.cache_figures().lookups == 2);
  CHECK(t.cache_figures().hits == 1);
  CHECK(!t.look_again(*again));  // it holds rows now: never again
  // A session's request, one that found its prefix at admission, and a sample never look again.
  auto s = request({1, 5, 6, 7}, 2);
  t.admit(*s, true, "");
  CHECK(!s->missed);
  auto sample = request({1, 5, 6, 7}, 2);
  t.admit(*sample, false, "", false);
  CHECK(!sample->missed);
  CHECK(!t.look_again(*sample));
}

TEST_CASE("GENERATE: sessions' fields round-trip in binary; ids this rank does not keep, or keeps, are refused where they would be misused") {
  auto a = request({1, 403}, 4);
  a->sequence = 7;
  a->keep = true;
  a->sampling = infer::Sampling{0.7f, 0.9f, (std::uint64_t{1} << 60) + 3};
  auto b = request({14, 20}, 3);
  b->sequence = 3;
  b->keep = true;
  b->continues = infer::Continuation{1007, 7};
  b->cut_from = 1007;  // a cached prefix it shares in part: its rows from 1007 go first
  const std::vector<std::byte> payload = encode_generate(make_batch({a, b}, {2}));
  const GenerateBatch d = decode_generate(payload, 512, 512, 1024, {2, 3});
  REQUIRE(d.prompts.size() == 2);
  CHECK(d.end == std::vector<std::int32_t>{2});
  REQUIRE(d.cuts.size() == 1);
  CHECK(d.cuts[0].sequence == 3);
  CHECK(d.cuts[0].from == 1007);
  CHECK(d.max_tokens == 4);
  CHECK(d.prompts[0].tokens == std::vector<std::int32_t>{1, 403});
  CHECK(d.prompts[0].sequence == 7);
  CHECK(d.prompts[0].keep);
  CHECK(!d.prompts[0].continues);
  CHECK(d.prompts[0].sampling->temperature == 0.7f);  // bit for bit: no text in between
  CHECK(d.prompts[0].sampling->top_p == 0.9f);
  CHECK(d.prompts[0].sampling->seed == (std::uint64_t{1} << 60) + 3);
  CHECK(d.prompts[1].max_tokens == 3);
  REQUIRE(d.prompts[1].continues);
  CHECK(d.prompts[1].continues->ring_position == 1007);
  CHECK(d.prompts[1].continues->rope_position == 7);

  auto refused = [](std::span<const std::byte> p, const std::set<std::int32_t>& kept, const std::string& why) {
    try {
      decode_generate(p, 512, 512, 1024, kept);
    } catch (const NetworkError& e) {
      CHECK(e.cause() == FailureCause::protocol);
      CHECK(e.origin_rank() == 0);
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(why) != std::string::npos);
      return;
    }
    FAIL("accepted a payload of " << p.size() << " bytes");
  };
  refused(payload, {3}, "ends name sequence 2, which this rank does not keep");
  refused(payload, {2}, "its cuts name sequence 3 (from ring position 1007), which this rank does not keep");
  b->cut_from.reset();
  refused(encode_generate(make_batch({a, b}, {2})), {2}, "continues sequence 3, which this rank does not keep");
  refused(payload, {2, 3, 7}, "a new prompt takes sequence 7");
  refused(encode_generate(make_batch({}, {})), {}, "neither prompts nor sequences to end");
  b->continues = infer::Continuation{1007, 508};  // history + 2 tokens + 3 > 512
  refused(encode_generate(make_batch({b}, {})), {3}, "exceed the model's context of 512");
  b->continues = infer::Continuation{1007, 7};
  a->sequence = 3;
  refused(encode_generate(make_batch({b, a}, {})), {3}, "sequence 3 appears twice");
  a->sequence = -1;
  refused(encode_generate(make_batch({a}, {})), {}, "sequence -1 is negative");
  a->sequence = 1;
  a->feed = {1, 512};
  refused(encode_generate(make_batch({a}, {})), {}, "token id 512 is outside the model's vocabulary of 512");
  a->feed = {1, 403};
  // Damaged payloads: every count is bounded by the bytes left; flags are 0 or 1; no byte after the last field.
  std::vector<std::byte> p = encode_generate(make_batch({a}, {}));
  for (std::size_t cut = 0; cut < p.size(); ++cut)  // cut inside a field, or short of what a count promised
    refused(std::span(p).first(cut), {}, cut < 16 ? "ends at byte" : cut < 16 + 50 ? "counts 1 prompts in" : "counts 2 tokens in");
  std::vector<std::byte> q = p;
  q.push_back(std::byte{0});
  refused(q, {}, "1 bytes after its last field");
  q = p;
  put_le(q.data() + 12, std::uint32_t{0x40000000});  // the prompt count
  refused(q, {}, "counts 1073741824 prompts");
  q = p;
  put_le(q.data() + 16, std::uint32_t{0xFFFFFFFF});  // the first prompt's token count
  refused(q, {}, "counts 4294967295 tokens");
  q = p;
  q[16 + 12] = std::byte{2};  // keep
  refused(q, {}, "a flag byte that is neither 0 nor 1");
  q = p;
  put_le(q.data() + 16 + 14, std::bit_cast<std::uint32_t>(std::numeric_limits<float>::quiet_NaN()));  // temperature
  refused(q, {}, "temperature or top_p is out of range");
  // An erasure-only job (sessions ended, nothing queued) is a batch of no prompts.
  CHECK(decode_generate(encode_generate(make_batch({}, {2})), 512, 512, 1024, {2}).prompts.empty());
}

}  // namespace ringattn::serve
