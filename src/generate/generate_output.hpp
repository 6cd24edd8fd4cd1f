// ringattn generate — what a person sees: the text as it is generated, and the run's
// figures at the end.
//
// Text mode, one prompt: the prompt's text, then each generated token's piece the moment
// it arrives (stdout, flushed), as llama2.c's run.c prints them; the figures go to stderr.
// Several prompts: each prompt's text, in prompt order, once all are done. --json: one
// object on stdout at the end, the texts, token ids and figures in it. A prompt's text
// ends at BOS or EOS, as run.c stops at BOS (the ring still decodes --max-tokens steps
// for every prompt: its ranks step in lockstep).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "../cli/json_object.hpp"

namespace ringattn::generate {

// One generated token, as the rank that owns its prompt reports it.
struct TokenEvent {
  std::int32_t prompt = 0;
  std::string id;            // the prompt's id as JSON ("\"prompt\"", "17")
  std::int32_t token = 0;
  std::string piece;         // the text it completes ("" without a tokenizer); at the end, the text held back
  bool ends = false;         // an end token (BOS, EOS...): the prompt's text ends here
  std::optional<std::string> prompt_text;  // with the prompt's first generated token
  std::int64_t prompt_tokens = 0;
};

// What each rank measured (its STATS line).
struct RankFigures {
  std::int64_t rows = 0, prompt_tokens = 0, decode_steps = 0, prompts = 0;
  double prefill_seconds = 0, prefill_attention_seconds = 0, decode_seconds = 0, decode_attention_seconds = 0;
  double decode_compute_seconds = 0;  // the decode kernel over this rank's cache
  // Memory: the model's weights as held, this rank's K/V cache at the end, the process's peak
  // resident set (VmHWM) after the run.
  std::int64_t weight_bytes = 0, kv_cache_bytes = 0, peak_rss_bytes = 0;
  cli::JsonObject json() const;
  static RankFigures parse(const std::string& json);  // throws std::runtime_error
};

class GenerateOutput {
 public:
  // `streaming`: one prompt in text mode (its pieces are printed as they come).
  GenerateOutput(bool json, bool streaming, cli::JsonObject run_fields);
  void on_token(const TokenEvent& e);
  // Every rank's figures (the slowest rank's phase times are the run's): prints the texts
  // not yet printed and the figures.
  void finish(const std::vector<RankFigures>& ranks);
  bool has_text() const { return !texts_.empty(); }  // a token of some prompt arrived

 private:
  struct Text {
    std::string id, text;
    std::vector<std::int64_t> tokens;
    std::int64_t prompt_tokens = 0;
    bool ended = false;
  };
  bool json_, streaming_;
  cli::JsonObject run_fields_;
  std::map<std::int32_t, Text> texts_;
  std::chrono::steady_clock::time_point start_;
  std::optional<double> first_token_seconds_;
};

}  // namespace ringattn::generate
