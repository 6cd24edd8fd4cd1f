// infer — constrained decoding: the trie walks a grammar has cost, kept for every matcher of it
// (matcher.hpp). A walk from (node, depth) against a vocabulary depends on nothing else, so
// the requests that share a grammar (json_object's, or a schema's grammar the server keeps)
// share its walks: the first request to reach a string's body pays for its walk, the others
// find it. Thread-safe; entries are immutable once kept. At most kMaxMemoBytes are kept per
// grammar; past that a matcher keeps its walks to itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace infer::constrain {

inline constexpr std::size_t kMaxMemoBytes = std::size_t{256} << 20;

// What the tokens do from (node, depth): allowed whatever the frames below (a bit per id, or,
// where they are few, their ids), or to be checked against them; the rest never.
struct MaskEntry {
  std::vector<std::uint64_t> accepted;
  std::vector<std::int32_t> accepted_ids;  // instead of `accepted` where that is smaller
  std::vector<std::int32_t> uncertain;
  std::size_t bytes() const { return accepted.size() * 8 + (accepted_ids.size() + uncertain.size()) * 4 + sizeof(MaskEntry); }
};

class MaskMemo {
 public:
  // Key: the vocabulary's TokenBytes::serial(), the node and the depth (matcher.cpp).
  std::shared_ptr<const MaskEntry> find(std::uint64_t key) const {
    std::lock_guard lock(m_);
    const auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  // Keeps `e` if there is room; returns what is kept under `key` (another thread's, if it came
  // first), or `e` alone.
  std::shared_ptr<const MaskEntry> keep(std::uint64_t key, MaskEntry e) {
    auto mine = std::make_shared<const MaskEntry>(std::move(e));
    std::lock_guard lock(m_);
    if (const auto it = map_.find(key); it != map_.end()) return it->second;
    if (bytes_ + mine->bytes() > kMaxMemoBytes) return mine;
    bytes_ += mine->bytes();
    map_.emplace(key, mine);
    return mine;
  }

 private:
  mutable std::mutex m_;
  std::unordered_map<std::uint64_t, std::shared_ptr<const MaskEntry>> map_;
  std::size_t bytes_ = 0;
};

}  // namespace infer::constrain
