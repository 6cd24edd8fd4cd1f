// infer — constrained decoding: the byte-level pushdown automaton a response format compiles to
// (json_schema.hpp makes one; matcher.hpp runs one against a tokenizer's vocabulary).
//
// A grammar is a set of nodes joined by edges of three kinds: a byte range (consume one byte in
// [lo, hi]), an epsilon (consume nothing), and a call (enter a rule at its entry node, to come
// back to a return node when the rule ends). A node marked `end` ends the rule it is in: the
// caller's frame is popped, or, for the outermost rule, the text is complete. A rule is simply
// the nodes reachable from an entry; rules may call each other and themselves (a schema's $ref),
// but never before consuming a byte (left recursion is refused when the grammar is finished).
//
// Each call carries a weight, the nesting it adds (1 for a $ref and for the containers of a
// free-form value, 0 for the helper rules: a string, a number, an array's item). A stack's
// depth is the sum of its weights, and no configuration deeper than kMaxNesting is ever made.
// For every node the grammar knows need(n): the least depth the rest of its rule takes to end.
// A configuration (node, stack) lives only if depth(stack) + need(node) <= kMaxNesting, and a
// call is taken only if its return node can still end at the caller's depth: so every live
// configuration can still reach the end of the text, and a matcher never paints itself into a
// corner where no byte is allowed.
//
// Closures are computed once, when the grammar is finished: for a node entered by a byte, the
// byte-consuming nodes it reaches through epsilons and calls (with the frames those calls push),
// and whether it reaches the end of its rule. The matcher then never follows an epsilon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace infer::constrain {

class MaskMemo;

inline constexpr std::uint32_t kMaxNesting = 32;  // recursion levels: see the weights above
inline constexpr std::uint32_t kNever = 0xFFFFFFFFu;  // need() of a node whose rule cannot end

class GrammarBuilder;

// Immutable once built; copies share it (requests may share one grammar across threads).
class Grammar {
 public:
  struct Range {
    std::uint8_t lo, hi;
    std::uint32_t to;
  };
  struct Push {  // a frame a call pushes: where to go on when the callee ends, and its weight
    std::uint32_t ret;
    std::uint32_t weight;
  };
  struct Item {  // one entry of a closure: a byte-consuming node, after pushing pushes[begin, end)
    std::uint32_t node;
    std::uint32_t push_begin, push_end;
  };

  std::uint32_t start() const;                        // the outermost rule's entry
  std::span<const Range> ranges(std::uint32_t node) const;  // sorted by lo, disjoint
  std::span<const Item> closure(std::uint32_t node) const;  // of a node entered by a byte, a return, the start
  std::span<const Push> pushes(const Item& item) const;
  bool pops(std::uint32_t node) const;                // its closure reaches the end of its rule
  bool plain(std::uint32_t node) const;               // its closure is itself alone (the common case)
  std::uint32_t need(std::uint32_t node) const;       // kNever: it cannot end within kMaxNesting
  std::size_t states() const;
  std::string describe() const;                       // "json_schema grammar (123 states)", for logs
  MaskMemo& memo() const;  // the trie walks its matchers made, for the next ones (mask_memo.hpp)

 private:
  friend class GrammarBuilder;
  struct Data;
  explicit Grammar(std::shared_ptr<const Data> d) : d_(std::move(d)) {}
  std::shared_ptr<const Data> d_;
};

// Refused while a grammar is built: too many states or closure entries, left recursion, or a
// start that cannot reach the end. The schema compiler turns it into its own refusal.
struct GrammarLimit {
  std::string what;
};

class GrammarBuilder {
 public:
  struct Limits {
    std::size_t states = 1 << 18;          // nodes
    std::size_t closure_items = 1 << 21;   // entries of all closures together
  };
  GrammarBuilder() : GrammarBuilder(Limits{}) {}
  explicit GrammarBuilder(Limits limits) : limits_(limits) {}

  std::uint32_t node();  // throws GrammarLimit past limits.states
  void bytes(std::uint32_t from, std::uint8_t lo, std::uint8_t hi, std::uint32_t to);
  void byte(std::uint32_t from, char c, std::uint32_t to) { bytes(from, static_cast<std::uint8_t>(c), static_cast<std::uint8_t>(c), to); }
  void eps(std::uint32_t from, std::uint32_t to);
  // `weight`: 0 or 1. `what` names the call in a refusal (a $ref's path); empty for helper rules.
  void call(std::uint32_t from, std::uint32_t entry, std::uint32_t ret, std::uint32_t weight, std::string what = {});
  void end(std::uint32_t node);
  std::size_t states() const { return nodes_; }
  std::size_t room() const { return limits_.states - nodes_; }  // nodes still allowed

  // Throws GrammarLimit (closures too large, left recursion naming the call, a start that
  // cannot end within kMaxNesting).
  Grammar finish(std::uint32_t start, std::string name) &&;

 private:
  struct Edge {
    std::uint32_t from, to;
    std::uint8_t lo, hi;
    std::uint8_t kind;  // 0 byte range, 1 epsilon, 2 call (to = entry; ret, weight, what below)
    std::uint32_t ret = 0, weight = 0, what = 0;
  };
  Limits limits_;
  std::uint32_t nodes_ = 0;
  std::vector<Edge> edges_;
  std::vector<std::uint32_t> ends_;
  std::vector<std::string> whats_{""};
};

}  // namespace infer::constrain
