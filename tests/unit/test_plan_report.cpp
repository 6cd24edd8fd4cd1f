// The planner's outputs: --json is valid JSON with every key scripts rely on, the text
// report carries the headline numbers, and the number parsing/formatting helpers.
#include <doctest/doctest.h>

#include <cctype>
#include <map>
#include <string>

#include "ringattn/error.hpp"
#include "src/plan/cost_model.hpp"
#include "src/plan/plan_report.hpp"
#include "src/plan/units.hpp"

using namespace ringattn::plan;
using ringattn::InvalidArgument;

namespace {

// A strict JSON reader for what the planner emits (objects, strings without escapes,
// numbers, true/false/null). Fills `leaves` with "a.b.c" -> raw token; throws on any
// syntax error, so a passing test means the text is valid JSON.
class JsonLeaves {
 public:
  explicit JsonLeaves(const std::string& s) : s_(s) {
    value("");
    ws();
    if (i_ != s_.size()) throw std::runtime_error("trailing text at " + std::to_string(i_));
  }
  std::map<std::string, std::string> leaves;

 private:
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    ws();
    if (i_ >= s_.size() || s_[i_] != c) throw std::runtime_error(std::string("expected ") + c + " at " + std::to_string(i_));
    ++i_;
  }
  std::string string() {
    expect('"');
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' || static_cast<unsigned char>(s_[i_]) < 0x20) throw std::runtime_error("escape or control char");
      ++i_;
    }
    expect('"');
    return s_.substr(start, i_ - 1 - start);
  }
  void value(const std::string& path) {
    ws();
    if (i_ >= s_.size()) throw std::runtime_error("unexpected end");
    if (s_[i_] == '{') {
      ++i_;
      ws();
      if (s_[i_] == '}') {
        ++i_;
        return;
      }
      for (;;) {
        const std::string key = string();
        if (leaves.count(path + key)) throw std::runtime_error("duplicate key " + key);
        expect(':');
        value(path + key + ".");
        ws();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        expect('}');
        return;
      }
    }
    const std::string key = path.substr(0, path.size() - 1);
    if (s_[i_] == '"') {
      leaves[key] = string();
      return;
    }
    const std::size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '-' || s_[i_] == '+' || s_[i_] == '.')) ++i_;
    const std::string tok = s_.substr(start, i_ - start);
    if (tok != "true" && tok != "false" && tok != "null") {
      std::size_t used = 0;
      std::stod(tok, &used);  // throws if not a number
      if (used != tok.size() || tok[0] == '+' || tok[0] == '.') throw std::runtime_error("bad number " + tok);
    }
    leaves[key] = tok;
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

PlanInput seed() {
  PlanInput in;
  in.kv_heads = 8;
  in.flops = 400e12;
  in.bandwidth = 50e9;
  return in;
}

}  // namespace

TEST_SUITE("plan report") {
  TEST_CASE("--json parses and has every documented key") {
    const std::string json = format_plan_json(make_plan(seed()));
    JsonLeaves j(json);
    for (const char* key :
         {"input.heads", "input.head_dim", "input.kv_heads", "input.layers", "input.seq", "input.nodes", "input.block",
          "input.d", "input.d_kv", "input.dtype_bytes", "input.flops_per_second", "input.bandwidth_bytes_per_second",
          "input.flops_assumed", "input.bandwidth_assumed", "memory.kv_bytes_per_layer", "memory.kv_bytes_all_layers",
          "memory.kv_bytes_per_layer_mha", "memory.node_q_bytes", "memory.node_kv_bytes", "memory.node_o_bytes",
          "memory.node_transfer_buffer_bytes", "memory.node_attention_bytes", "memory.node_kv_all_layers_bytes",
          "step.flops", "step.bytes", "step.compute_seconds", "step.transfer_seconds", "step.margin", "step.verdict",
          "step_causal_zigzag.margin", "step_causal_zigzag.verdict", "overlap.min_block", "overlap.min_block_causal_zigzag",
          "overlap.hidden_margin", "overlap.marginal_margin", "overlap.ring_seconds_per_layer", "traffic.ring_elements",
          "traffic.ulysses_elements", "traffic.ring_over_ulysses", "traffic.ulysses_possible",
          "causal_balance.contiguous_utilisation", "causal_balance.zigzag_utilisation",
          "causal_balance.zigzag_units_per_node", "training.backward_step.flops", "training.backward_step.bytes",
          "training.backward_step.margin", "training.backward_step.verdict", "training.backward_step_causal_zigzag.margin",
          "training.min_block_backward", "training.min_block_backward_causal_zigzag", "training.seconds_per_layer",
          "training.node_bytes", "schedules.ring.seconds", "schedules.ring.ring_seconds", "schedules.best_group",
          "schedules.group_bandwidth_bytes_per_second", "schedules.hybrid_2.possible", "schedules.hybrid_2.seconds",
          "schedules.hybrid_2.all_to_all_bytes", "schedules.hybrid_4.possible", "schedules.ulysses.possible"}) {
      CAPTURE(key);
      CHECK(j.leaves.count(key) == 1);
    }
    CHECK(j.leaves.at("input.seq") == "1048576");
    CHECK(j.leaves.at("input.d_kv") == "1024");
    CHECK(j.leaves.at("step.verdict") == "hidden");
    CHECK(j.leaves.at("input.flops_assumed") == "false");
    CHECK(std::stod(j.leaves.at("step.flops")) == doctest::Approx(4.398e12).epsilon(1e-3));
    CHECK(std::stod(j.leaves.at("memory.kv_bytes_all_layers")) == 2.0 * 1048576 * 1024 * 2 * 32);  // exact
    CHECK(j.leaves.at("causal_balance.zigzag_units_per_node") == "129");
  }

  TEST_CASE("one node: no Ulysses ratio (null), still valid JSON") {
    PlanInput in = seed();
    in.nodes = 1;
    JsonLeaves j(format_plan_json(make_plan(in)));
    CHECK(j.leaves.at("traffic.ring_over_ulysses") == "null");
  }

  TEST_CASE("the text report carries the headline numbers") {
    const std::string text = format_plan_text(make_plan(seed()));
    INFO(text);
    for (const char* want : {"b = 16,384", "d_kv = 1024", "137 GB", "4.40e+12 FLOP in 11.0 ms", "67.1 MB in 1.34 ms",
                             "hidden", "b* = d_kv*s*F / (2*d*B) = 2,000 tokens (causal zigzag: 4,000)", "50.8 %", "129 = 2P+1", "not possible"})
      CHECK(text.find(want) != std::string::npos);
    CHECK(text.find("assumed") == std::string::npos);
  }

  TEST_CASE("a prompt on the prefix cache: pass-Q dealt over the nodes when new >= P and cached x P >= new; on one node when new x (P-1) < cached; else a prefill afresh; in text and JSON") {
    PlanInput in = seed();  // 64 nodes
    in.cached = 2000;
    in.fresh = 31;  // 31 x 63 = 1953 < 2000
    CHECK(format_plan_text(make_plan(in)).find("1,953 < 2,000 cached  ->  pass-Q") != std::string::npos);
    CHECK(JsonLeaves(format_plan_json(make_plan(in))).leaves.at("prefix_cache.choice") == "pass_q");
    in.cached = 1900;
    in.fresh = 31;  // 1953 >= 1900
    CHECK(format_plan_text(make_plan(in)).find("1,953 >= 1,900 cached  ->  prefill the whole prompt afresh") != std::string::npos);
    CHECK(JsonLeaves(format_plan_json(make_plan(in))).leaves.at("prefix_cache.choice") == "prefill");
    in.fresh = 6400;  // 100 a node against 130 for the prefill
    CHECK(format_plan_text(make_plan(in)).find("new >= P: pass-Q, the new tokens dealt over the nodes (~100 a node against 130 for a prefill afresh)") !=
          std::string::npos);
    CHECK(JsonLeaves(format_plan_json(make_plan(in))).leaves.at("prefix_cache.choice") == "pass_q");
    in.cached = 50;  // 3200 > 6400 / 64 ... but 50 x 64 = 3200 < 6400: not worth cutting the entry
    CHECK(format_plan_text(make_plan(in)).find("cached x P = 3,200 < 6,400 new  ->  prefill the whole prompt afresh") != std::string::npos);
    CHECK(JsonLeaves(format_plan_json(make_plan(in))).leaves.at("prefix_cache.choice") == "prefill");
    CHECK(prefix_pays(1000, 1000, 1));  // one node: half the work saved
    CHECK(!prefix_pays(1, 1000, 1));    // one node: BOS is not worth cutting an entry for
    CHECK(prefix_pays(1, 64, 64));   // dealt over the nodes, a share of 1/P
    CHECK(!prefix_pays(1, 65, 64));
    CHECK(!prefix_pays(0, 0, 1));
  }

  TEST_CASE("parse_rate: exponents and SI suffixes") {
    CHECK(parse_rate("400e12", "--flops") == 400e12);
    CHECK(parse_rate("50G", "--bandwidth") == 50e9);
    CHECK(parse_rate("2.5e9", "--bandwidth") == 2.5e9);
    CHECK(parse_rate("1.5T", "--flops") == 1.5e12);
    CHECK(parse_rate("3k", "--x") == 3000);
    for (const char* bad : {"", "G", "-5", "0", "inf", "nan", " 5", "5 G", "5GB", "1e999", "0x10"})
      CHECK_THROWS_WITH_AS(parse_rate(bad, "--bandwidth"), doctest::Contains("--bandwidth"), InvalidArgument);
  }

  TEST_CASE("formatting") {
    CHECK(format_bytes(17.18e9) == "17.2 GB");
    CHECK(format_bytes(268.4e6) == "268 MB");
    CHECK(format_bytes(512) == "512 B");
    CHECK(format_seconds(10.995e-3) == "11.0 ms");
    CHECK(format_seconds(0.2983e-3) == "298 us");
    CHECK(format_seconds(1.2) == "1.20 s");
    CHECK(format_rate(400e12, "FLOP/s") == "400 TFLOP/s");
    CHECK(format_rate(2.5e9, "B/s") == "2.50 GB/s");
    CHECK(format_count(1048576) == "1,048,576");
    CHECK(format_count(-1000) == "-1,000");
    CHECK(format_count(999) == "999");
    CHECK(format_sig(4.398e12) == "4.40e+12");
    CHECK(format_sig(8.19) == "8.19");
    CHECK(format_sig(4.1) == "4.10");
    CHECK(format_sig(100) == "100");
  }
}
