// ringattn serve — one reply's constrained decoding (structured output and forced tool calls):
// tokens forced before the grammar (a tool-call syntax's opening, which may be a special
// token no grammar can write), the grammar itself (infer/constrain: a JSON schema's, or any
// object's), tokens forced after it (the syntax's closing), then only the model's end
// tokens. On rank 0 only: it shapes the logits before each choice (under --tp the group
// takes rank 0's choice), and it writes the reply's text from the grammar's bytes (what the
// grammar checked, not the tokenizer's clean-up of spaces).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../../infer/constrain/grammar.hpp"
#include "../../infer/constrain/matcher.hpp"
#include "../../infer/constrain/token_bytes.hpp"
#include "../../infer/job/text_tokenizer.hpp"

namespace ringattn::serve {

class Constraint {
 public:
  // `before`/`after`: token ids forced around the grammar, with their texts; `ends`: the
  // model's end tokens (allowed once the grammar and `after` are through).
  Constraint(const infer::constrain::Grammar& grammar, const infer::constrain::TokenBytes& bytes, std::vector<std::int32_t> ends,
             std::vector<std::int32_t> before = {}, std::string before_text = {}, std::vector<std::int32_t> after = {},
             std::string after_text = {});
  void mask(std::span<float> logits) const;  // -inf where the next token may not be
  void advance(std::int32_t token);          // the token chosen (one mask() allowed)
  // The reply's text as its tokens come (infer::TextStream): the forced parts' texts, the
  // grammar's bytes.
  std::unique_ptr<infer::TextStream> text();

 private:
  class Text;
  enum class Phase { before, grammar, after, end };
  Phase phase() const;
  infer::constrain::Matcher matcher_;
  infer::constrain::TokenBytes bytes_;
  std::vector<std::int32_t> ends_, before_, after_;
  std::string before_text_, after_text_;
  std::size_t at_ = 0;  // tokens of before_ (then after_) taken
  bool grammar_started_ = false;  // before_ is through
  bool grammar_done_ = false;     // the grammar's value is whole (and, framed, nothing may follow it)
  Phase phase_of_last_ = Phase::before;  // the phase of the token advance() took last
  Phase completed_ = Phase::end;         // the forced part that token completed (end: none)
  std::string completed_text_;           // its text, for the reply's
};

}  // namespace ringattn::serve
