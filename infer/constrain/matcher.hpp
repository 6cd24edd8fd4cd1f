// infer — constrained decoding: a grammar (grammar.hpp) held against a tokenizer's vocabulary
// (token_bytes.hpp), one generated text at a time. Per step: mask() the logits (-inf where the
// token may not come next), sample, advance() by the token sampled.
//
// The state is a set of configurations (node, stack): the grammar may be ambiguous (anyOf, an
// optional property) and several parses go on together until the text tells them apart. The
// stacks are interned frames (parent, return node), so a configuration is two integers.
//
// The mask, as XGrammar computes it: the tokens allowed from a configuration (node, stack) are,
// for most tokens, a function of the node and the stack's depth alone: those the node's own rule
// accepts whole ("accepted") and those it refuses before the rule could end ("refused"). Only a
// token whose bytes run past the end of the rule (`",` after a string, `},` after an object)
// depends on the frames below, and is checked against them byte by byte ("uncertain"). The first
// two are found by one walk of the vocabulary's byte trie from (node, depth), pruning a subtree
// at the first byte no configuration takes, and kept for the matcher's life: a string's body,
// the common case, is walked once, and later steps there cost an OR of bit sets and the few
// uncertain tokens.
//
// End tokens are allowed exactly when complete(): a whole value has been produced; once done()
// (complete, and no byte can follow), only they are.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "grammar.hpp"
#include "token_bytes.hpp"

namespace infer::constrain {

class Matcher {
 public:
  // `end_tokens`: the model's ids that end a text (TextTokenizer's end_tokens()); each must be
  // below the logits' size. Throws ringattn::InvalidArgument for a negative id.
  Matcher(const Grammar& grammar, const TokenBytes& tokens, std::vector<std::int32_t> end_tokens);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // -inf into every logit whose id may not come next (ids past the vocabulary included).
  void mask(std::span<float> logits) const;
  // The same as one bit per id of [0, size): bit i of word i / 64.
  void allowed(std::vector<std::uint64_t>& bits, std::size_t size) const;
  // Whether `token` may come next, its bytes tried one by one (what mask() finds by the trie).
  bool allows(std::int32_t token) const;
  // Throws ringattn::InvalidArgument, naming the token, if it was not allowed; the state is then
  // as before.
  void advance(std::int32_t token);
  bool complete() const;  // a whole value: an end token may come
  bool done() const;      // complete, and nothing but an end token may come
  bool ended() const;     // an end token came: nothing more may

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace infer::constrain
