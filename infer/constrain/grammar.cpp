// infer — the byte-level pushdown automaton (grammar.hpp): edges gathered by the builder, then
// per node its byte ranges, its closure and need().
#include "grammar.hpp"

#include "mask_memo.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

namespace infer::constrain {

struct Grammar::Data {
  std::string name;
  std::uint32_t start = 0;
  std::vector<std::uint32_t> range_at;  // node n's ranges: ranges[range_at[n], range_at[n + 1])
  std::vector<Range> ranges;
  std::vector<std::uint32_t> item_at;   // node n's closure: items[item_at[n], item_at[n + 1])
  std::vector<Item> items;
  std::vector<Push> pushes;
  std::vector<std::uint8_t> pops, plain;
  std::vector<std::uint32_t> need;
  std::shared_ptr<MaskMemo> memo = std::make_shared<MaskMemo>();
};

std::uint32_t Grammar::start() const { return d_->start; }
std::span<const Grammar::Range> Grammar::ranges(std::uint32_t n) const {
  return std::span<const Range>(d_->ranges).subspan(d_->range_at[n], d_->range_at[n + 1] - d_->range_at[n]);
}
std::span<const Grammar::Item> Grammar::closure(std::uint32_t n) const {
  return std::span<const Item>(d_->items).subspan(d_->item_at[n], d_->item_at[n + 1] - d_->item_at[n]);
}
std::span<const Grammar::Push> Grammar::pushes(const Item& item) const {
  return std::span<const Push>(d_->pushes).subspan(item.push_begin, item.push_end - item.push_begin);
}
bool Grammar::pops(std::uint32_t n) const { return d_->pops[n] != 0; }
bool Grammar::plain(std::uint32_t n) const { return d_->plain[n] != 0; }
std::uint32_t Grammar::need(std::uint32_t n) const { return d_->need[n]; }
std::size_t Grammar::states() const { return d_->need.size(); }
MaskMemo& Grammar::memo() const { return *d_->memo; }
std::string Grammar::describe() const { return d_->name + " grammar (" + std::to_string(states()) + " states)"; }

std::uint32_t GrammarBuilder::node() {
  if (nodes_ >= limits_.states)
    throw GrammarLimit{"the grammar needs more than " + std::to_string(limits_.states) + " states"};
  return nodes_++;
}

void GrammarBuilder::bytes(std::uint32_t from, std::uint8_t lo, std::uint8_t hi, std::uint32_t to) {
  edges_.push_back({from, to, lo, hi, 0});
}

void GrammarBuilder::eps(std::uint32_t from, std::uint32_t to) { edges_.push_back({from, to, 0, 0, 1}); }

void GrammarBuilder::call(std::uint32_t from, std::uint32_t entry, std::uint32_t ret, std::uint32_t weight, std::string what) {
  if (weight > 1) throw GrammarLimit{"a call's weight is 0 or 1"};
  std::uint32_t w = 0;
  if (!what.empty()) {
    w = static_cast<std::uint32_t>(whats_.size());
    whats_.push_back(std::move(what));
  }
  edges_.push_back({from, entry, 0, 0, 2, ret, weight, w});
}

void GrammarBuilder::end(std::uint32_t n) { ends_.push_back(n); }

namespace {

// The epsilons, calls and ends of the nodes, as the closures walk them.
struct Moves {
  std::vector<std::uint32_t> eps_at, eps;  // node n's epsilon targets: eps[eps_at[n], eps_at[n + 1])
  std::vector<std::uint32_t> call_at;      // node n's calls: calls[call_at[n], call_at[n + 1])
  struct Call {
    std::uint32_t entry, ret, weight, what;
  };
  std::vector<Call> calls;
  std::vector<std::uint8_t> is_end;
};

// The closure of one node: a depth-first walk over epsilons, calls (pushing their frames) and
// ends (popping them again, or, with nothing pushed, ending the node's own rule).
class ClosureWalk {
 public:
  ClosureWalk(const Moves& m, const std::vector<std::uint32_t>& range_at, const std::vector<std::string>& whats, std::size_t max_steps)
      : m_(m), range_at_(range_at), whats_(whats), on_path_(m.is_end.size(), 0), entered_(m.is_end.size(), 0), steps_left_(max_steps), max_steps_(max_steps) {}

  struct Result {
    std::vector<std::pair<std::uint32_t, std::vector<Grammar::Push>>> items;
    bool pops = false;
  };

  Result of(std::uint32_t n) {
    out_ = {};
    visit(n, 0);
    std::sort(out_.items.begin(), out_.items.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return std::lexicographical_compare(a.second.begin(), a.second.end(), b.second.begin(), b.second.end(),
                                          [](const Grammar::Push& x, const Grammar::Push& y) {
                                            return std::pair(x.ret, x.weight) < std::pair(y.ret, y.weight);
                                          });
    });
    out_.items.erase(std::unique(out_.items.begin(), out_.items.end(),
                                 [](const auto& a, const auto& b) {
                                   return a.first == b.first && a.second.size() == b.second.size() &&
                                          std::equal(a.second.begin(), a.second.end(), b.second.begin(),
                                                     [](const Grammar::Push& x, const Grammar::Push& y) {
                                                       return x.ret == y.ret && x.weight == y.weight;
                                                     });
                                 }),
                     out_.items.end());
    return std::move(out_);
  }

 private:
  void visit(std::uint32_t n, std::uint32_t weight) {
    if (weight > kMaxNesting) return;  // never live: a matcher would drop it
    // Alternatives that branch again and again before a byte (anyOf over $refs over anyOf ...)
    // make paths without end in number: the walk is bounded, all closures together.
    if (steps_left_-- == 0) throw GrammarLimit{"its alternatives branch into more than " + std::to_string(max_steps_) + " paths before a byte"};
    // A node met again on the same path, nothing consumed in between: an empty loop. It can only
    // come from a rule that is entered again before it consumes a byte (calls are checked
    // below, naming the call), or from the compiler's own epsilons.
    if (on_path_[n]) throw GrammarLimit{"the grammar loops without consuming a byte (an empty rule)"};
    on_path_[n] = 1;
    if (range_at_[n + 1] > range_at_[n]) out_.items.emplace_back(n, pushes_);
    for (std::uint32_t i = m_.eps_at[n]; i < m_.eps_at[n + 1]; ++i) visit(m_.eps[i], weight);
    for (std::uint32_t i = m_.call_at[n]; i < m_.call_at[n + 1]; ++i) {
      const Moves::Call& c = m_.calls[i];
      if (entered_[c.entry])
        throw GrammarLimit{(c.what ? whats_[c.what] : std::string("a rule")) +
                           " recurses before the value has a byte (left recursion)"};
      entered_[c.entry] = 1;
      pushes_.push_back({c.ret, c.weight});
      visit(c.entry, weight + c.weight);
      pushes_.pop_back();
      entered_[c.entry] = 0;
    }
    if (m_.is_end[n]) {
      if (pushes_.empty()) {
        out_.pops = true;
      } else {  // the callee ends before it consumed a byte: back in the caller
        const Grammar::Push p = pushes_.back();
        pushes_.pop_back();
        visit(p.ret, weight - p.weight);
        pushes_.push_back(p);
      }
    }
    on_path_[n] = 0;
  }

  const Moves& m_;
  const std::vector<std::uint32_t>& range_at_;
  const std::vector<std::string>& whats_;
  std::vector<std::uint8_t> on_path_, entered_;
  std::vector<Grammar::Push> pushes_;
  Result out_;
  std::size_t steps_left_;
  const std::size_t max_steps_;
};

// need(n) for every node: a shortest-path fixpoint (Knuth's generalisation of Dijkstra: every
// rule, min over a byte or epsilon edge and max(weight + need(entry), need(ret)) over a call, is
// monotone and never below its arguments).
std::vector<std::uint32_t> needs(std::uint32_t nodes, const Moves& m, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& steps) {
  std::vector<std::uint32_t> need(nodes, kNever);
  // Who depends on a node's need: plain predecessors, and the calls that enter it or return to it.
  std::vector<std::vector<std::uint32_t>> preds(nodes), call_deps(nodes);
  std::vector<std::uint32_t> call_from(m.calls.size());
  for (const auto& [from, to] : steps) preds[to].push_back(from);
  for (std::uint32_t n = 0; n < nodes; ++n)
    for (std::uint32_t i = m.call_at[n]; i < m.call_at[n + 1]; ++i) {
      call_from[i] = n;
      call_deps[m.calls[i].entry].push_back(i);
      call_deps[m.calls[i].ret].push_back(i);
    }
  using Entry = std::pair<std::uint32_t, std::uint32_t>;  // (need, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> q;
  for (std::uint32_t n = 0; n < nodes; ++n)
    if (m.is_end[n]) {
      need[n] = 0;
      q.push({0, n});
    }
  auto offer = [&](std::uint32_t n, std::uint32_t v) {
    if (v < need[n]) {
      need[n] = v;
      q.push({v, n});
    }
  };
  while (!q.empty()) {
    const auto [v, n] = q.top();
    q.pop();
    if (v != need[n]) continue;
    for (const std::uint32_t p : preds[n]) offer(p, v);
    for (const std::uint32_t i : call_deps[n]) {
      const Moves::Call& c = m.calls[i];
      if (need[c.entry] == kNever || need[c.ret] == kNever) continue;
      const std::uint32_t cost = std::max(c.weight + need[c.entry], need[c.ret]);
      if (cost <= kMaxNesting) offer(call_from[i], cost);
    }
  }
  return need;
}

}  // namespace

Grammar GrammarBuilder::finish(std::uint32_t start, std::string name) && {
  const std::uint32_t n_nodes = nodes_;
  auto d = std::make_shared<Grammar::Data>();
  d->name = std::move(name);
  d->start = start;
  Moves m;
  m.is_end.assign(n_nodes, 0);
  for (const std::uint32_t e : ends_) m.is_end[e] = 1;

  std::stable_sort(edges_.begin(), edges_.end(), [](const Edge& a, const Edge& b) {
    return a.from != b.from ? a.from < b.from : a.kind != b.kind ? a.kind < b.kind : a.lo < b.lo;
  });
  d->range_at.assign(n_nodes + 1, 0);
  m.eps_at.assign(n_nodes + 1, 0);
  m.call_at.assign(n_nodes + 1, 0);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> steps;  // byte and epsilon edges, for need()
  std::vector<std::uint8_t> entered(n_nodes, 0);               // a closure is asked of it
  entered[start] = 1;
  for (const Edge& e : edges_) {
    if (e.kind == 0) {
      d->ranges.push_back({e.lo, e.hi, e.to});
      ++d->range_at[e.from + 1];
      entered[e.to] = 1;
    } else if (e.kind == 1) {
      m.eps.push_back(e.to);
      ++m.eps_at[e.from + 1];
    } else {
      m.calls.push_back({e.to, e.ret, e.weight, e.what});
      ++m.call_at[e.from + 1];
      entered[e.ret] = 1;
    }
    if (e.kind != 2) steps.emplace_back(e.from, e.to);
  }
  for (std::uint32_t n = 0; n < n_nodes; ++n) {
    d->range_at[n + 1] += d->range_at[n];
    m.eps_at[n + 1] += m.eps_at[n];
    m.call_at[n + 1] += m.call_at[n];
  }
  edges_ = {};

  d->item_at.assign(n_nodes + 1, 0);
  d->pops.assign(n_nodes, 0);
  d->plain.assign(n_nodes, 0);
  ClosureWalk walk(m, d->range_at, whats_, 2 * limits_.closure_items);
  for (std::uint32_t n = 0; n < n_nodes; ++n) {
    d->item_at[n] = static_cast<std::uint32_t>(d->items.size());
    if (!entered[n]) continue;
    ClosureWalk::Result r = walk.of(n);
    d->pops[n] = r.pops ? 1 : 0;
    d->plain[n] = !r.pops && r.items.size() == 1 && r.items[0].first == n && r.items[0].second.empty();
    if (d->items.size() + r.items.size() > limits_.closure_items)
      throw GrammarLimit{"the grammar's closures need more than " + std::to_string(limits_.closure_items) + " entries"};
    for (auto& [node, pushes] : r.items) {
      const auto begin = static_cast<std::uint32_t>(d->pushes.size());
      d->pushes.insert(d->pushes.end(), pushes.begin(), pushes.end());
      d->items.push_back({node, begin, static_cast<std::uint32_t>(d->pushes.size())});
    }
  }
  d->item_at[n_nodes] = static_cast<std::uint32_t>(d->items.size());

  d->need = needs(n_nodes, m, steps);
  if (d->need[start] == kNever)
    throw GrammarLimit{"no JSON text satisfies it within " + std::to_string(kMaxNesting) + " levels of recursion"};
  return Grammar(std::move(d));
}

}  // namespace infer::constrain
