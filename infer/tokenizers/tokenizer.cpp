// infer — llama2.c's tokenizer (tokenizer.hpp).
#include "tokenizer.hpp"

#include <ringattn/error.hpp>

#include <cctype>
#include <cmath>
#include <cstring>
#include <queue>
#include <stdexcept>

#include "../common/digest.hpp"
#include "../common/input_file.hpp"

namespace infer {

namespace {

constexpr int kMaxTokenLength = 1024;          // llama2.c's files have 7..~30
constexpr std::uint64_t kMaxFileBytes = 64 << 20;  // 64 MiB: far above any llama2.c vocabulary

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

Tokenizer Tokenizer::load(const std::string& path, std::int64_t vocab) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("tokenizer " + path + ": " + what); };
  if (vocab < 3 + 256 || vocab > (1 << 24))
    throw fail("a model vocabulary of " + std::to_string(vocab) +
               " tokens cannot hold <unk>, BOS, EOS and the 256 byte pieces (or is over 16M)");
  const std::vector<char> bytes = read_input_file(path, kMaxFileBytes, "tokenizer");
  std::size_t at = 0;
  auto take = [&](void* out, std::size_t n, const char* what) {
    if (bytes.size() - at < n)
      throw fail("ends at byte " + std::to_string(bytes.size()) + " inside " + what + " (a truncated file, or a " +
                 "tokenizer for a smaller vocabulary than the model's " + std::to_string(vocab) + ")");
    std::memcpy(out, bytes.data() + at, n);
    at += n;
  };
  std::int32_t max_len = 0;
  take(&max_len, 4, "max_token_length");
  if (max_len < 1 || max_len > kMaxTokenLength)
    throw fail("max_token_length = " + std::to_string(max_len) + " must be in 1.." + std::to_string(kMaxTokenLength));
  Tokenizer t;
  t.pieces_.reserve(static_cast<std::size_t>(std::min<std::int64_t>(vocab, bytes.size() / 8)));
  for (std::int64_t id = 0; id < vocab; ++id) {
    const std::string rec = "token " + std::to_string(id);
    float score = 0;
    std::int32_t len = 0;
    take(&score, 4, (rec + "'s score").c_str());
    take(&len, 4, (rec + "'s length").c_str());
    if (!std::isfinite(score)) throw fail(rec + " has a score that is not finite");
    if (len < 0 || len > max_len)
      throw fail(rec + " has length " + std::to_string(len) + ", outside 0..max_token_length " + std::to_string(max_len));
    std::string piece(static_cast<std::size_t>(len), '\0');
    take(piece.data(), piece.size(), (rec + "'s bytes").c_str());
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
  }
  if (at != bytes.size())
    throw fail(std::to_string(bytes.size() - at) + " bytes after the " + std::to_string(vocab) +
               " tokens of the model's vocabulary (a tokenizer for another model?)");
  for (int b = 0; b < 256; ++b) {
    char want[8];
    std::snprintf(want, sizeof want, "<0x%02X>", b);
    if (t.pieces_[static_cast<std::size_t>(b + 3)] != want)
      throw fail("token " + std::to_string(b + 3) + " is '" + t.pieces_[static_cast<std::size_t>(b + 3)] +
                 "', not the byte piece " + want + " (not a llama2.c tokenizer with byte fallback)");
    t.byte_pieces_[2 * b] = static_cast<char>(b);
  }
  for (std::size_t id = 0; id < t.pieces_.size(); ++id) t.ids_.emplace(t.pieces_[id], static_cast<int>(id));  // first wins
  return t;
}

int Tokenizer::id_of(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::characters(std::string_view text, bool bos) const {
  std::vector<int> out;
  out.reserve(text.size() + 2);
  if (bos) out.push_back(kBos);
  if (!text.empty()) {
    const int space = id_of(" ");
    out.push_back(space >= 0 ? space : ' ' + 3);
  }
  // llama2.c's walk: a character is a lead byte and up to three continuation bytes; one
  // that is no piece becomes its bytes' fallback ids.
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!is_continuation(c)) start = i;
    const std::size_t len = i - start + 1;
    if (i + 1 < text.size() && is_continuation(static_cast<unsigned char>(text[i + 1])) && len < 4) continue;
    const std::string_view ch = text.substr(start, len);
    if (const int id = id_of(ch); id >= 0) out.push_back(id);
    else
      for (const char b : ch) out.push_back(static_cast<unsigned char>(b) + 3);
    start = i + 1;
  }
  return out;
}

std::vector<int> Tokenizer::encode_by_rescans(std::string_view text, bool bos, bool eos) const {
  std::vector<int> t = characters(text, bos);
  for (;;) {
    float best = -1e10f;
    int best_id = -1;
    std::size_t best_at = 0;
    for (std::size_t i = 0; i + 1 < t.size(); ++i) {
      const int id = id_of(pieces_[static_cast<std::size_t>(t[i])] + pieces_[static_cast<std::size_t>(t[i + 1])]);
      if (id >= 0 && scores_[static_cast<std::size_t>(id)] > best) {
        best = scores_[static_cast<std::size_t>(id)];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    t[best_at] = best_id;
    t.erase(t.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  if (eos) t.push_back(kEos);
  return t;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> tok = characters(text, bos);
  const std::size_t n = tok.size();
  // A doubly linked list over the tokens (a node keeps its original index, so list order
  // is index order), and a heap of candidate merges: highest score first, then leftmost,
  // as llama2.c's rescans pick. An entry is stale once either node changed; the version
  // counters say so.
  std::vector<std::size_t> prev(n), next(n);
  std::vector<std::uint32_t> version(n, 0);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i - 1;  // wraps to SIZE_MAX for the first: "none"
    next[i] = i + 1;  // n for the last: "none"
  }
  struct Candidate {
    float score;
    std::size_t left, right;
    std::uint32_t left_version, right_version;
    int id;
    bool operator<(const Candidate& o) const {  // the top of the heap is the best
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  auto consider = [&](std::size_t l, std::size_t r) {
    if (l >= n || r >= n) return;
    const int id = id_of(pieces_[static_cast<std::size_t>(tok[l])] + pieces_[static_cast<std::size_t>(tok[r])]);
    if (id >= 0) heap.push({scores_[static_cast<std::size_t>(id)], l, r, version[l], version[r], id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || version[c.left] != c.left_version ||
        version[c.right] != c.right_version || next[c.left] != c.right)
      continue;
    tok[c.left] = c.id;
    ++version[c.left];
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.right] < n) prev[next[c.right]] = c.left;
    consider(prev[c.left], c.left);
    consider(c.left, next[c.left]);
  }
  std::vector<int> out;
  out.reserve(n + 1);
  for (std::size_t i = 0; i < n; ++i)
    if (alive[i]) out.push_back(tok[i]);
  if (eos) out.push_back(kEos);
  return out;
}

std::string_view Tokenizer::decode(int prev, int token) const {
  if (token < 0 || token >= static_cast<int>(pieces_.size()))
    throw std::out_of_range("token id " + std::to_string(token) + " is outside the vocabulary of " +
                            std::to_string(pieces_.size()));
  std::string_view piece = pieces_[static_cast<std::size_t>(token)];
  if (prev == kBos && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
  if (piece.size() == 6 && piece.substr(0, 3) == "<0x" && piece.back() == '>' &&
      std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4])))
    return std::string_view(&byte_pieces_[2 * std::stoi(std::string(piece.substr(3, 2)), nullptr, 16)], 1);
  return piece;
}

bool Tokenizer::printable(std::string_view piece) {
  if (piece.empty()) return false;
  if (piece.size() == 1) {
    const auto c = static_cast<unsigned char>(piece[0]);
    return c >= 0x80 || std::isprint(c) || std::isspace(c);  // >= 0x80: part of a UTF-8 character
  }
  return true;
}

std::string Tokenizer::text(std::span<const int> tokens, int prev) const {
  std::string out;
  for (const int t : tokens) {
    const std::string_view p = decode(prev, t);
    if (printable(p)) out += p;
    prev = t;
  }
  return out;
}

std::string Tokenizer::sequence_text(std::span<const int> tokens) const {
  const bool bos = !tokens.empty() && tokens.front() == kBos;
  return text(tokens.subspan(bos ? 1 : 0), bos ? kBos : -1);
}

std::uint64_t Tokenizer::digest() const {
  Fnv1a f;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    f.value(static_cast<std::uint64_t>(pieces_[i].size()));
    f.bytes(pieces_[i].data(), pieces_[i].size());
    f.value(scores_[i]);
  }
  return f.h;
}

}  // namespace infer
