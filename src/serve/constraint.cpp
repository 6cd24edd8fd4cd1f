// ringattn serve — a reply's constrained decoding (constraint.hpp).
#include "constraint.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "ringattn/error.hpp"

namespace ringattn::serve {

namespace {

std::vector<std::int32_t> grammar_ends(bool framed, const std::vector<std::int32_t>& ends) {
  return framed ? std::vector<std::int32_t>{} : ends;  // framed: the closing comes before any end token
}

void only(std::span<float> logits, std::span<const std::int32_t> allowed) {
  std::vector<float> keep;
  for (const std::int32_t t : allowed) keep.push_back(t >= 0 && static_cast<std::size_t>(t) < logits.size() ? logits[static_cast<std::size_t>(t)] : 0);
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < allowed.size(); ++i)
    if (allowed[i] >= 0 && static_cast<std::size_t>(allowed[i]) < logits.size()) logits[static_cast<std::size_t>(allowed[i])] = keep[i];
}

}  // namespace

// The text: each phase's part in order. Forced tokens write their phase's text once, when
// its last token is taken; the grammar's tokens their bytes.
class Constraint::Text : public infer::TextStream {
 public:
  explicit Text(Constraint& c) : c_(c), bytes_(c.bytes_) {}
  std::string next(int token) override {
    const Phase p = c_.phase_of_last_;
    if (p == Phase::grammar) return bytes_.next(token);
    if (p == Phase::after && c_.completed_ == Phase::after) return bytes_.finish() + std::exchange(c_.completed_text_, {});
    if (p == Phase::before && c_.completed_ == Phase::before) return std::exchange(c_.completed_text_, {});
    return {};
  }
  std::string finish() override { return bytes_.finish(); }

 private:
  Constraint& c_;
  infer::constrain::BytesStream bytes_;
};

Constraint::Constraint(const infer::constrain::Grammar& grammar, const infer::constrain::TokenBytes& bytes, std::vector<std::int32_t> ends,
                       std::vector<std::int32_t> before, std::string before_text, std::vector<std::int32_t> after, std::string after_text)
    : matcher_(grammar, bytes, grammar_ends(!after.empty(), ends)), bytes_(bytes), ends_(std::move(ends)), before_(std::move(before)),
      after_(std::move(after)), before_text_(std::move(before_text)), after_text_(std::move(after_text)) {}

Constraint::Phase Constraint::phase() const {
  if (at_ < before_.size() && !grammar_started_) return Phase::before;
  if (!grammar_done_) return Phase::grammar;
  if (at_ < after_.size()) return Phase::after;
  return Phase::end;
}

void Constraint::mask(std::span<float> logits) const {
  switch (phase()) {
    case Phase::before: return only(logits, std::span(&before_[at_], 1));
    case Phase::grammar: return matcher_.mask(logits);
    case Phase::after: return only(logits, std::span(&after_[at_], 1));
    case Phase::end: return only(logits, ends_);
  }
}

void Constraint::advance(std::int32_t token) {
  phase_of_last_ = phase();
  switch (phase_of_last_) {
    case Phase::before:
      if (token != before_[at_]) throw InvalidArgument("constrained reply: token " + std::to_string(token) + " where the forced one was due");
      completed_ = Phase::end;
      if (++at_ == before_.size()) {
        grammar_started_ = true;
        at_ = 0;
        completed_ = Phase::before;
        completed_text_ = before_text_;
      }
      return;
    case Phase::grammar:
      matcher_.advance(token);
      if (!after_.empty() && matcher_.done()) grammar_done_ = true;
      if (after_.empty() && matcher_.ended()) grammar_done_ = true;
      return;
    case Phase::after:
      if (token != after_[at_]) throw InvalidArgument("constrained reply: token " + std::to_string(token) + " where the forced one was due");
      completed_ = Phase::end;
      if (++at_ == after_.size()) {
        completed_ = Phase::after;
        completed_text_ = after_text_;
      }
      return;
    case Phase::end:
      return;
  }
}

std::unique_ptr<infer::TextStream> Constraint::text() { return std::make_unique<Text>(*this); }

}  // namespace ringattn::serve
