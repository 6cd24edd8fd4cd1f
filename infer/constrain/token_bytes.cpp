// infer — the bytes of a vocabulary and its trie (token_bytes.hpp).
#include "token_bytes.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "../job/text_tokenizer.hpp"

namespace infer::constrain {

struct TokenBytes::Data {
  std::string bytes;                  // every id's bytes, one after the other
  std::vector<std::uint32_t> at;      // id's bytes: bytes[at[id], at[id + 1])
  std::vector<std::uint8_t> is_text;
  std::size_t longest = 0;
  TokenTrie trie;
  std::uint64_t serial = 0;
};

namespace {

// Sorted by bytes, the ids are the trie's preorder: each id adds the nodes past the prefix it
// shares with the one before, and closes the subtrees it leaves.
TokenTrie build_trie(const std::string& bytes, const std::vector<std::uint32_t>& at, const std::vector<std::uint8_t>& is_text) {
  auto view = [&](std::int32_t id) {
    return std::string_view(bytes).substr(at[static_cast<std::size_t>(id)], at[static_cast<std::size_t>(id) + 1] - at[static_cast<std::size_t>(id)]);
  };
  std::vector<std::int32_t> order;
  for (std::size_t id = 0; id < is_text.size(); ++id)
    if (is_text[id]) order.push_back(static_cast<std::int32_t>(id));
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const std::string_view x = view(a), y = view(b);
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end(),
                                        [](char p, char q) { return static_cast<unsigned char>(p) < static_cast<unsigned char>(q); });
  });
  TokenTrie t;
  t.byte.push_back(0);
  t.depth.push_back(0);
  t.end.push_back(0);
  t.id_at.push_back(0);
  std::vector<std::uint32_t> parent{0};
  std::vector<std::uint32_t> path{0};  // the nodes of the last id's bytes, root first
  std::string_view prev;
  auto close_to = [&](std::size_t keep) {
    while (path.size() > keep) {
      t.end[path.back()] = static_cast<std::uint32_t>(t.byte.size());
      path.pop_back();
    }
  };
  for (const std::int32_t id : order) {
    const std::string_view b = view(id);
    std::size_t common = 0;
    while (common < b.size() && common < prev.size() && b[common] == prev[common]) ++common;
    close_to(common + 1);
    for (std::size_t k = common; k < b.size(); ++k) {
      parent.push_back(path.back());
      path.push_back(static_cast<std::uint32_t>(t.byte.size()));
      t.byte.push_back(static_cast<std::uint8_t>(b[k]));
      t.depth.push_back(static_cast<std::uint16_t>(k + 1));
      t.end.push_back(0);
      t.id_at.push_back(static_cast<std::uint32_t>(t.ids.size()));
    }
    t.ids.push_back(id);  // at path.back(), the node created last or (same bytes) the one before
    prev = b;
  }
  close_to(0);
  t.id_at.push_back(static_cast<std::uint32_t>(t.ids.size()));
  t.classes.assign(t.byte.size(), 0);
  t.height.assign(t.byte.size(), 1);
  for (std::size_t i = t.byte.size(); i-- > 1;) {
    t.classes[i] |= TokenTrie::byte_class(t.byte[i]);
    t.classes[parent[i]] |= t.classes[i];
    t.height[parent[i]] = std::max<std::uint16_t>(t.height[parent[i]], static_cast<std::uint16_t>(t.height[i] + 1));
  }
  return t;
}

}  // namespace

std::uint16_t TokenTrie::byte_class(std::uint8_t b) {
  int c;
  if (b < 0x20) c = 0;
  else if (b == ' ') c = 1;
  else if (b == '"') c = 2;
  else if (b == '\\') c = 3;
  else if (b >= '0' && b <= '9') c = 4;
  else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) c = 5;
  else if (b < 0x30) c = 6;  // ! # $ % & ' ( ) * + , - . /
  else if (b < 0x41) c = 7;  // : ; < = > ? @
  else if (b < 0x61) c = 8;  // [ ] ^ _ `
  else if (b < 0x80) c = 9;  // { | } ~ DEL
  else if (b < 0xC0) c = 10;
  else if (b < 0xE0) c = 11;
  else if (b < 0xF0) c = 12;
  else c = 13;
  return static_cast<std::uint16_t>(1u << c);
}

TokenBytes::TokenBytes(std::vector<std::optional<std::string>> bytes) {
  auto d = std::make_shared<Data>();
  d->at.push_back(0);
  for (const auto& b : bytes) {
    const bool text = b && !b->empty();
    if (text) {
      if (b->size() > 0xFFFF) throw ringattn::InvalidArgument("a token of " + std::to_string(b->size()) + " bytes (at most 65535)");
      d->bytes += *b;
      d->longest = std::max(d->longest, b->size());
    }
    d->is_text.push_back(text ? 1 : 0);
    if (d->bytes.size() > 0xFFFFFFFFu) throw ringattn::InvalidArgument("a vocabulary of more than 4 GiB of bytes");
    d->at.push_back(static_cast<std::uint32_t>(d->bytes.size()));
  }
  d->trie = build_trie(d->bytes, d->at, d->is_text);
  static std::atomic<std::uint64_t> serials{0};
  d->serial = ++serials;
  d_ = std::move(d);
}

std::int32_t TokenBytes::vocab() const { return static_cast<std::int32_t>(d_->is_text.size()); }
bool TokenBytes::text(std::int32_t id) const { return id >= 0 && id < vocab() && d_->is_text[static_cast<std::size_t>(id)]; }
std::string_view TokenBytes::bytes(std::int32_t id) const {
  if (!text(id)) return {};
  const auto i = static_cast<std::size_t>(id);
  return std::string_view(d_->bytes).substr(d_->at[i], d_->at[i + 1] - d_->at[i]);
}
std::size_t TokenBytes::longest() const { return d_->longest; }
const TokenTrie& TokenBytes::trie() const { return d_->trie; }
std::uint64_t TokenBytes::serial() const { return d_->serial; }

TokenBytes token_bytes(const TextTokenizer& tok) {
  std::vector<std::optional<std::string>> bytes(static_cast<std::size_t>(tok.vocab()));
  for (std::size_t id = 0; id < bytes.size(); ++id) bytes[id] = tok.text_bytes(static_cast<int>(id));
  return TokenBytes(std::move(bytes));
}

std::string BytesStream::next(std::int32_t id) {
  held_ += tokens_.bytes(id);
  // Where the last character begins, and whether its bytes are all here.
  std::size_t start = held_.size();
  while (start > 0 && held_.size() - start < 4 && (static_cast<unsigned char>(held_[start - 1]) & 0xC0) == 0x80) --start;
  if (start == 0) return finish();  // no lead byte in reach: nothing to wait for
  const auto lead = static_cast<unsigned char>(held_[start - 1]);
  const std::size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  const std::size_t cut = held_.size() - (start - 1) < want ? start - 1 : held_.size();
  std::string out = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string BytesStream::finish() { return std::exchange(held_, std::string()); }

}  // namespace infer::constrain
