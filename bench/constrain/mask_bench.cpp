// bench/constrain/: the cost of constrained decoding per generated token (infer/constrain/): how
// long Matcher::mask takes on a real vocabulary, step by step, along seeded random walks that
// look like generation: random logits, masked, the largest taken, for `budget` tokens or until
// an end token.
//
//   bench_constrain_mask --tokenizer FILE [--vocab N] [--schema FILE|json_object|strict]
//                        [--walks N] [--budget TOKENS] [--seed S] [--fresh-grammar 0|1]
//
// A tokenizer.json, or llama2.c's tokenizer.bin with --vocab. Each walk is a request: a matcher
// of its own, on the grammar the bench keeps (its walks kept in the grammar's memo, as a server
// that keeps grammars) or, with --fresh-grammar 1, on one compiled for it (every request pays
// for its walks). Prints one JSON line: the vocabulary, the grammar, the steps, mask() per step
// (mean, p50, p99, max; the first step of each walk apart), a string's body entered cold (its
// trie walk and its uncertain tokens) and warm, advance() per step, and the one-off costs (the
// tokens' bytes and trie, the grammar). mask() is timed in the thread's CPU time, the rest in
// wall time.
// Built on request: ninja -C BUILD bench/constrain/bench_constrain_mask
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "../../infer/common/json.hpp"
#include "../../infer/constrain/json_schema.hpp"
#include "../../infer/constrain/matcher.hpp"
#include "../../infer/constrain/token_bytes.hpp"
#include "../../infer/job/model_files.hpp"
#include "../../infer/job/options.hpp"
#include "../../infer/job/text_tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
// This thread's CPU time: on a machine shared with other work, what the step itself cost.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// An OpenAI strict schema of the usual shape: strings, an enum, numbers, a bounded array of objects.
constexpr const char* kStrict = R"({"type":"object","additionalProperties":false,
  "required":["name","summary","rating","tags","steps","verdict"],
  "properties":{"name":{"type":"string"},"summary":{"type":"string","maxLength":200},
    "rating":{"type":"number"},"tags":{"type":"array","items":{"type":"string"},"maxItems":5},
    "steps":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["n","text"],
      "properties":{"n":{"type":"integer"},"text":{"type":"string"}}}},
    "verdict":{"enum":["yes","no","unsure"]}}})";

struct Rng {  // xorshift64*: a cheap source for 128k logits a step
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24); }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer, schema = "strict";
  std::int64_t vocab = 0;
  int walks = 20, budget = 64;
  bool fresh = false;
  std::uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokenizer") tokenizer = v;
    else if (a == "--vocab") vocab = std::stoll(v);
    else if (a == "--schema") schema = v;
    else if (a == "--walks") walks = std::stoi(v);
    else if (a == "--budget") budget = std::stoi(v);
    else if (a == "--seed") seed = std::stoull(v);
    else if (a == "--fresh-grammar") fresh = v == "1";
    else {
      std::cerr << "bench_constrain_mask: unknown option " << a << "\n";
      return 2;
    }
  }
  if (tokenizer.empty()) {
    std::cerr << "usage: bench_constrain_mask --tokenizer FILE [--vocab N] [--schema FILE|json_object|strict] [--walks N] [--budget T] [--seed S]\n";
    return 2;
  }
  try {
    infer::JobOptions opt;
    opt.tokenizer = tokenizer;
    opt.model.vocab = vocab ? vocab : (1 << 24);
    infer::ModelFiles files("", "", opt.tokenizer);
    const auto tok = infer::load_text_tokenizer(opt, files).tokenizer;
    if (!tok) throw std::runtime_error("no tokenizer");
    auto t0 = Clock::now();
    const infer::constrain::TokenBytes bytes = infer::constrain::token_bytes(*tok);
    const double bytes_ms = ms_since(t0);
    auto make_grammar = [&] {
      if (schema == "json_object") return infer::constrain::json_object_grammar();
      if (schema == "strict") return infer::constrain::json_schema_grammar(infer::parse_json(kStrict));
      std::ifstream f(schema);
      std::stringstream text;
      text << f.rdbuf();
      return infer::constrain::json_schema_grammar(infer::parse_json(text.str()));
    };
    t0 = Clock::now();
    const infer::constrain::Grammar kept = make_grammar();
    const double grammar_ms = ms_since(t0);
    const auto end = static_cast<std::int32_t>(bytes.vocab());  // an end token past the vocabulary
    std::vector<float> logits(static_cast<std::size_t>(bytes.vocab()) + 1);
    std::vector<double> first, later, adv;
    Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
    std::size_t tokens = 0;
    for (int w = 0; w < walks; ++w) {
      const infer::constrain::Grammar g = fresh ? make_grammar() : kept;
      infer::constrain::Matcher m(g, bytes, {end});
      for (int step = 0; step < budget && !m.ended(); ++step) {
        for (float& x : logits) x = rng.uniform();
        const double c0 = cpu_ms();
        m.mask(logits);
        (step == 0 ? first : later).push_back(cpu_ms() - c0);
        const auto pick = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        t0 = Clock::now();
        m.advance(pick);
        adv.push_back(ms_since(t0));
        ++tokens;
      }
    }
    // A string's body entered cold (a fresh grammar: its trie walk, its uncertain tokens checked),
    // then again (both kept), five times: the one-byte tokens of {"name":" in a fresh matcher.
    std::vector<std::int32_t> single(256, -1);
    for (std::int32_t id = 0; id < bytes.vocab(); ++id)
      if (bytes.bytes(id).size() == 1 && single[static_cast<unsigned char>(bytes.bytes(id)[0])] < 0)
        single[static_cast<unsigned char>(bytes.bytes(id)[0])] = id;
    std::vector<double> cold, warm;
    for (int i = 0; i < 5; ++i) {
      const infer::constrain::Grammar g = make_grammar();
      infer::constrain::Matcher m(g, bytes, {end});
      for (const char c : std::string(schema == "json_object" ? "{\"a\":\"" : "{\"name\":\"")) m.advance(single[static_cast<unsigned char>(c)]);
      double c0 = cpu_ms();
      m.mask(logits);
      cold.push_back(cpu_ms() - c0);
      c0 = cpu_ms();
      m.mask(logits);
      warm.push_back(cpu_ms() - c0);
    }
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (const double x : v) s += x;
      return v.empty() ? 0 : s / static_cast<double>(v.size());
    };
    std::printf("{\"bench\":\"constrain_mask\",\"tokenizer\":\"%s\",\"vocab\":%d,\"longest_token\":%zu,\"trie_nodes\":%zu,\"grammar\":\"%s\","
                "\"walks\":%d,\"fresh_grammar\":%s,\"budget\":%d,\"tokens\":%zu,\"mask_ms_mean\":%.3f,\"mask_ms_p50\":%.3f,\"mask_ms_p99\":%.3f,\"mask_ms_max\":%.3f,"
                "\"first_mask_ms_mean\":%.3f,\"string_cold_ms_min\":%.3f,\"string_cold_ms_p50\":%.3f,\"string_warm_ms_p50\":%.3f,\"advance_ms_mean\":%.4f,\"token_bytes_ms\":%.1f,\"grammar_ms\":%.2f}\n",
                tokenizer.c_str(), bytes.vocab(), bytes.longest(), bytes.trie().nodes(), kept.describe().c_str(), walks, fresh ? "true" : "false", budget, tokens,
                mean(later), percentile(later, 0.5), percentile(later, 0.99), percentile(later, 1.0), mean(first), percentile(cold, 0), percentile(cold, 0.5), percentile(warm, 0.5), mean(adv), bytes_ms,
                grammar_ms);
  } catch (const std::exception& e) {
    std::cerr << "bench_constrain_mask: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
