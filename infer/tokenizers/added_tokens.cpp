// infer — finding a tokenizer's added tokens in a text (added_tokens.hpp).
#include "added_tokens.hpp"

namespace infer {

std::uint32_t AddedTokenTrie::child(std::uint32_t node, unsigned char byte) const {
  for (const auto& [b, n] : nodes_[node].next)
    if (b == byte) return n;
  return 0;
}

void AddedTokenTrie::add(std::string_view text, int id) {
  std::uint32_t node = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    std::uint32_t n = child(node, byte);
    if (n == 0) {
      n = static_cast<std::uint32_t>(nodes_.size());
      nodes_[node].next.emplace_back(byte, n);
      nodes_.emplace_back();
    }
    node = n;
  }
  if (node != 0 && nodes_[node].id < 0) nodes_[node].id = id;
}

std::pair<int, std::size_t> AddedTokenTrie::longest_at(std::string_view text, std::size_t at) const {
  std::pair<int, std::size_t> best{-1, 0};
  std::uint32_t node = 0;
  for (std::size_t i = at; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node == 0) break;
    if (nodes_[node].id >= 0) best = {nodes_[node].id, i + 1 - at};
  }
  return best;
}

}  // namespace infer
