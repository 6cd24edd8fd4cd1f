// infer — reading and checking a tokenizer.json (tokenizer_json.hpp): every field that
// changes what encode or decode do is read here, checked against what the runtime can do
// exactly, and refused by name when it cannot.
#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../common/digest.hpp"
#include "../common/input_file.hpp"
#include "tokenizer_json_impl.hpp"

namespace infer {

namespace {

constexpr std::uint64_t kMaxFileBytes = 64ull << 20;  // Llama 3's is 9 MB, Qwen's 11 MB, Gemma 3's 33 MB
constexpr std::int64_t kMaxId = (1 << 24) - 1;

using Impl = TokenizerJson::Impl;

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const { throw ringattn::FileError("tokenizer " + where_ + ": " + what); }

  const JsonMap& field(const JsonMap& j, std::string_view key, std::string_view in) const {
    const JsonMap* f = json_field(j, key);
    if (f == nullptr) fail(std::string(in) + " has no \"" + std::string(key) + "\"");
    return *f;
  }
  std::string str(const JsonMap& j, std::string_view key, std::string_view in) const {
    const JsonMap& f = field(j, key, in);
    if (!f.is_string()) fail(std::string(in) + "." + std::string(key) + " is not a string");
    return f.get<std::string>();
  }
  // An optional boolean field that must be `want` when present (what the runtime does).
  void flag(const JsonMap& j, std::string_view key, bool want, std::string_view in) const {
    const JsonMap* f = json_field(j, key);
    if (f == nullptr || f->is_null()) return;
    if (!f->is_boolean()) fail(std::string(in) + "." + std::string(key) + " is not a boolean");
    if (f->get<bool>() != want)
      fail(std::string(in) + "." + std::string(key) + " is " + (want ? "false" : "true") +
           ", which this runtime does not implement (it would tokenize differently); refused");
  }
  bool boolean(const JsonMap& j, std::string_view key, std::string_view in) const {
    const JsonMap* f = json_field(j, key);
    if (f == nullptr || f->is_null()) return false;
    if (!f->is_boolean()) fail(std::string(in) + "." + std::string(key) + " is not a boolean");
    return f->get<bool>();
  }
  // An optional string field that must be absent, null or "" (a feature not implemented).
  void none(const JsonMap& j, std::string_view key, std::string_view in) const {
    const JsonMap* f = json_field(j, key);
    if (f == nullptr || f->is_null() || (f->is_string() && f->get<std::string>().empty())) return;
    fail(std::string(in) + "." + std::string(key) + " is set (" + f->dump().substr(0, 60) +
         "), which this runtime does not implement; refused");
  }
  std::string type(const JsonMap& j, std::string_view in) const {
    if (!j.is_object()) fail(std::string(in) + " is not an object");
    return str(j, "type", in);
  }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// The tables by id (pieces, present, is_special, is_added, scores) are sized by the largest
// id, so before any of them exists the largest id must be below twice the number of tokens
// the file gives (model.vocab's entries and added_tokens'): their memory then follows the
// file's size, not one id in it (a 4 KB file with the id 2^24 - 1 cost 580 MiB before its
// refusal). Holes stay allowed within that. Only well-formed ids are counted here; the rest
// are refused by name where they are read.
void check_id_span(const Reader& r, const JsonMap& j) {
  std::int64_t tokens = 0, top = -1;
  auto count = [&](const JsonMap& id) {
    if (!id.is_number_unsigned() && !id.is_number_integer()) return;
    if (id.is_number_integer() && !id.is_number_unsigned() && id.get<std::int64_t>() < 0) return;
    const std::uint64_t v = id.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(kMaxId)) return;
    ++tokens;
    top = std::max(top, static_cast<std::int64_t>(v));
  };
  const JsonMap* model = json_field(j, "model");
  const JsonMap* vocab = model != nullptr && model->is_object() ? json_field(*model, "vocab") : nullptr;
  if (vocab == nullptr || !vocab->is_object()) return;  // refused by name where it is read
  for (const auto& [piece, id] : vocab->items()) count(id);
  if (const JsonMap* added = json_field(j, "added_tokens"); added != nullptr && added->is_array())
    for (const JsonMap& a : *added)
      if (const JsonMap* id = a.is_object() ? json_field(a, "id") : nullptr; id != nullptr) count(*id);
  if (top >= 2 * tokens)
    r.fail("an id of " + std::to_string(top) + " among " + std::to_string(tokens) +
           " tokens (model.vocab and added_tokens): ids must stay below twice the number of tokens given");
}

void read_vocab(const Reader& r, const JsonMap& model, Impl& t) {
  const JsonMap& vocab = r.field(model, "vocab", "model");
  if (!vocab.is_object() || vocab.empty()) r.fail("model.vocab is not a non-empty object of piece: id");
  std::int64_t top = -1;
  for (const auto& [piece, id] : vocab.items()) {
    // An id in range as the parser holds it; anything else is refused by json_int, named.
    const bool in_range = id.is_number_unsigned() && id.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxId);
    top = std::max(top, in_range ? id.get<std::int64_t>() : json_int(id, "model.vocab[\"" + piece.substr(0, 40) + "\"]", 0, kMaxId));
  }
  t.pieces.resize(static_cast<std::size_t>(top + 1));
  t.ids.reserve(vocab.size());
  t.present.assign(t.pieces.size(), 0);
  for (const auto& [piece, id_json] : vocab.items()) {
    const auto id = static_cast<std::size_t>(id_json.get<std::int64_t>());
    if (t.present[id]) r.fail("model.vocab gives id " + std::to_string(id) + " to both \"" + t.pieces[id] + "\" and \"" + piece + "\"");
    t.pieces[id] = piece;
    t.present[id] = 1;
    t.ids.emplace(piece, static_cast<int>(id));
  }
}

// Returns a digest of the merges in their order.
std::uint64_t read_merges(const Reader& r, const JsonMap& model, Impl& t) {
  Fnv1a h;
  const JsonMap& merges = r.field(model, "merges", "model");
  if (!merges.is_array()) r.fail("model.merges is not an array");
  t.merges.reserve(merges.size());
  int rank = 0;
  for (const JsonMap& m : merges) {
    std::string a, b;
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail("model.merges[" + std::to_string(rank) + "] \"" + s.substr(0, 60) + "\" is not two pieces split by one space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["left", "right"]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(rank) + "] is neither \"left right\" nor [\"left\", \"right\"]");
    }
    const auto l = t.ids.find(a), rt = t.ids.find(b), j = t.ids.find(a + b);
    if (l == t.ids.end() || rt == t.ids.end() || j == t.ids.end())
      r.fail("model.merges[" + std::to_string(rank) + "] joins \"" + a + "\" and \"" + b + "\", but \"" +
             (l == t.ids.end() ? a : rt == t.ids.end() ? b : a + b) + "\" is not in model.vocab");
    t.merges.add(l->second, rt->second, j->second, rank);
    h.value(l->second);
    h.value(rt->second);
    ++rank;
  }
  return h.h;
}

// Returns read_merges' digest.
std::uint64_t read_model(const Reader& r, const JsonMap& j, Impl& t) {
  const JsonMap& model = r.field(j, "model", "the file");
  if (const std::string type = r.type(model, "model"); type != "BPE")
    r.fail("model.type is \"" + type + "\"; only BPE tokenizers (Llama, Mistral, Qwen) are implemented");
  r.none(model, "dropout", "model");
  r.none(model, "continuing_subword_prefix", "model");
  r.none(model, "end_of_word_suffix", "model");
  t.byte_fallback = r.boolean(model, "byte_fallback", "model");
  t.fuse_unk = r.boolean(model, "fuse_unk", "model");
  t.ignore_merges = r.boolean(model, "ignore_merges", "model");
  read_vocab(r, model, t);
  const std::uint64_t merges = read_merges(r, model, t);
  if (const JsonMap* unk = json_field(model, "unk_token"); unk != nullptr && !unk->is_null()) {
    if (!unk->is_string()) r.fail("model.unk_token is not a string");
    const auto it = t.ids.find(unk->get<std::string>());
    if (it == t.ids.end()) r.fail("model.unk_token \"" + unk->get<std::string>() + "\" is not in model.vocab");
    t.unk = it->second;
  }
  return merges;
}

void read_added(const Reader& r, const JsonMap& j, Impl& t) {
  const JsonMap* added = json_field(j, "added_tokens");
  if (added == nullptr || added->is_null()) return;
  if (!added->is_array()) r.fail("added_tokens is not an array");
  for (std::size_t i = 0; i < added->size(); ++i) {
    const JsonMap& a = (*added)[i];
    const std::string in = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object()) r.fail(in + " is not an object");
    const auto id = static_cast<int>(json_int(r.field(a, "id", in), in + ".id", 0, kMaxId));
    const std::string content = r.str(a, "content", in);
    if (content.empty()) r.fail(in + ".content is empty");
    for (const char* f : {"single_word", "lstrip", "rstrip", "normalized"}) r.flag(a, f, false, in);
    if (static_cast<std::size_t>(id) >= t.pieces.size()) {
      t.pieces.resize(static_cast<std::size_t>(id) + 1);
      t.present.resize(t.pieces.size(), 0);
    }
    const auto u = static_cast<std::size_t>(id);
    if (t.present[u] && t.pieces[u] != content)
      r.fail(in + " gives id " + std::to_string(id) + " to \"" + content + "\", which model.vocab gives to \"" + t.pieces[u] + "\"");
    if (const auto it = t.ids.find(content); it != t.ids.end() && it->second != id)
      r.fail(in + " \"" + content + "\" has id " + std::to_string(id) + " but also id " + std::to_string(it->second));
    t.pieces[u] = content;
    t.present[u] = 1;
    t.ids[content] = id;
    const bool special = r.boolean(a, "special", in);
    t.is_special.resize(t.pieces.size(), 0);
    t.is_special[u] = special;
    t.added.add(content, id);
    t.is_added.resize(t.pieces.size(), 0);
    t.is_added[u] = 1;
  }
  t.is_special.resize(t.pieces.size(), 0);
  t.is_added.resize(t.pieces.size(), 0);
}

void read_normalizer(const Reader& r, const JsonMap& n, Impl& t, int depth) {
  if (n.is_null()) return;
  const std::string type = r.type(n, "normalizer");
  if (type == "Sequence" && depth == 0) {
    const JsonMap& list = r.field(n, "normalizers", "normalizer");
    if (!list.is_array()) r.fail("normalizer.normalizers is not an array");
    for (const JsonMap& m : list) read_normalizer(r, m, t, depth + 1);
  } else if (type == "NFC") {
    t.normalize.push_back({Impl::Normalize::Kind::nfc, "", ""});
  } else if (type == "Prepend") {
    t.normalize.push_back({Impl::Normalize::Kind::prepend, r.str(n, "prepend", "normalizer Prepend"), ""});
  } else if (type == "Replace") {
    const JsonMap& pattern = r.field(n, "pattern", "normalizer Replace");
    const JsonMap* s = json_field(pattern, "String");
    if (s == nullptr || !s->is_string() || s->get<std::string>().empty())
      r.fail("normalizer Replace has no non-empty pattern.String (a Regex pattern is not implemented)");
    t.normalize.push_back({Impl::Normalize::Kind::replace, s->get<std::string>(), r.str(n, "content", "normalizer Replace")});
  } else {
    r.fail("normalizer \"" + type + "\" is not implemented (NFC, Prepend, Replace and a Sequence of them are)");
  }
}

// A Split pre-tokenizer: on a literal with any of the library's behaviors (split_delimiter.hpp),
// or on the Llama 3 or Qwen regex, Isolated and then ByteLevel (pretokenize.hpp). Nothing may
// follow ByteLevel: its byte characters are no longer the text a Split would look at.
void read_split(const Reader& r, const JsonMap& p, Impl& t) {
  if (t.byte_level) r.fail("pre_tokenizer Split after a ByteLevel pre-tokenizer is not implemented (it must come before)");
  const JsonMap& pattern = r.field(p, "pattern", "pre_tokenizer Split");
  const std::string behavior = r.str(p, "behavior", "pre_tokenizer Split");
  Impl::Split s;
  if (const JsonMap* literal = json_field(pattern, "String")) {
    if (!literal->is_string() || literal->get<std::string>().empty()) r.fail("pre_tokenizer Split's pattern.String is not a non-empty string");
    s.literal = literal->get<std::string>();
    const auto b = split_behavior(behavior);
    if (!b)
      r.fail("pre_tokenizer Split's behavior \"" + behavior.substr(0, 40) +
             "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    s.behavior = *b;
    s.invert = r.boolean(p, "invert", "pre_tokenizer Split");
  } else {
    const JsonMap* regex = json_field(pattern, "Regex");
    if (regex == nullptr || !regex->is_string()) r.fail("pre_tokenizer Split has neither pattern.String nor pattern.Regex");
    s.regex = split_pattern(regex->get<std::string>());
    if (!s.regex)
      r.fail("pre_tokenizer Split's regex " + regex->get<std::string>().substr(0, 200) +
             " is not one this runtime implements (Llama 3's and Qwen's are)");
    if (behavior != "Isolated")
      r.fail("pre_tokenizer Split on a regex: behavior is not \"Isolated\" (\"" + behavior.substr(0, 40) +
             "\"), the only one implemented for a regex");
    r.flag(p, "invert", false, "pre_tokenizer Split");
  }
  t.splits.push_back(std::move(s));
}

void read_pre_tokenizer(const Reader& r, const JsonMap& p, Impl& t, int depth) {
  if (p.is_null()) return;
  const std::string type = r.type(p, "pre_tokenizer");
  if (type == "Sequence" && depth == 0) {
    const JsonMap& list = r.field(p, "pretokenizers", "pre_tokenizer");
    if (!list.is_array()) r.fail("pre_tokenizer.pretokenizers is not an array");
    for (const JsonMap& m : list) read_pre_tokenizer(r, m, t, depth + 1);
  } else if (type == "Split") {
    read_split(r, p, t);
  } else if (type == "ByteLevel") {
    r.flag(p, "add_prefix_space", false, "pre_tokenizer ByteLevel");
    r.flag(p, "use_regex", false, "pre_tokenizer ByteLevel");
    t.byte_level = true;
  } else {
    r.fail("pre_tokenizer \"" + type +
           "\" is not implemented (Split on a String, Split on the Llama 3 or Qwen regex then ByteLevel, and a Sequence of them are)");
  }
}

// The decoder must be the one that inverts the model's kind: ByteLevel for byte-level BPE,
// SentencePiece's Replace("▁", " "), ByteFallback, Fuse, Strip(" ", n, 0) for the other.
void read_decoder(const Reader& r, const JsonMap& j, Impl& t) {
  const JsonMap& d = r.field(j, "decoder", "the file");
  const std::string type = r.type(d, "decoder");
  if (t.byte_level) {
    if (type != "ByteLevel") r.fail("decoder is \"" + type + "\" for a byte-level BPE model (ByteLevel expected)");
    return;
  }
  const JsonMap* list = json_field(d, "decoders");
  if (type != "Sequence" || list == nullptr || !list->is_array())
    r.fail("decoder is \"" + type + "\"; a SentencePiece BPE model needs the Sequence Replace, ByteFallback, Fuse, Strip");
  std::vector<std::string> kinds;
  for (const JsonMap& s : *list) {
    kinds.push_back(r.type(s, "decoder"));
    if (kinds.back() == "Replace") {
      const JsonMap* from = json_field(r.field(s, "pattern", "decoder Replace"), "String");
      if (from == nullptr || !from->is_string() || from->get<std::string>() != "\u2581" || r.str(s, "content", "decoder Replace") != " ")
        r.fail("decoder Replace is not \"\u2581\" -> \" \"");
    } else if (kinds.back() == "Strip") {
      if (r.str(s, "content", "decoder Strip") != " " || json_int(r.field(s, "stop", "decoder Strip"), "decoder Strip.stop", 0, 0) != 0)
        r.fail("decoder Strip is not of leading spaces");
      t.strip_start = static_cast<int>(json_int(r.field(s, "start", "decoder Strip"), "decoder Strip.start", 0, 16));
    }
  }
  const bool with_strip = kinds.size() == 4 && kinds[3] == "Strip";
  if (kinds.size() < 3 || kinds.size() > 4 || kinds[0] != "Replace" || kinds[1] != "ByteFallback" || kinds[2] != "Fuse" ||
      (kinds.size() == 4 && !with_strip))
    r.fail("decoder Sequence is not Replace, ByteFallback, Fuse[, Strip]");
}

std::vector<int> special_ids(const Reader& r, const JsonMap& tp, const std::string& name, const Impl& t) {
  const JsonMap* st = json_field(r.field(tp, "special_tokens", "post_processor"), name);
  if (st == nullptr) r.fail("post_processor names special token \"" + name + "\" but special_tokens has no entry for it");
  const JsonMap& ids = r.field(*st, "ids", "post_processor.special_tokens." + name);
  if (!ids.is_array() || ids.empty()) r.fail("post_processor.special_tokens." + name + ".ids is not a non-empty array");
  std::vector<int> out;
  for (const JsonMap& id : ids) {
    const auto v = static_cast<int>(json_int(id, "post_processor.special_tokens." + name + ".ids[]", 0, kMaxId));
    if (static_cast<std::size_t>(v) >= t.present.size() || !t.present[static_cast<std::size_t>(v)])
      r.fail("post_processor's special token \"" + name + "\" has id " + std::to_string(v) + ", which is no token");
    out.push_back(v);
  }
  return out;
}

void read_post_processor(const Reader& r, const JsonMap& p, Impl& t, int depth) {
  if (p.is_null()) return;
  const std::string type = r.type(p, "post_processor");
  if (type == "Sequence" && depth == 0) {
    const JsonMap& list = r.field(p, "processors", "post_processor");
    if (!list.is_array()) r.fail("post_processor.processors is not an array");
    for (const JsonMap& m : list) read_post_processor(r, m, t, depth + 1);
  } else if (type == "ByteLevel") {  // offsets only: no ids added
  } else if (type == "TemplateProcessing") {
    const JsonMap& single = r.field(p, "single", "post_processor");
    if (!single.is_array()) r.fail("post_processor.single is not an array");
    bool seen_text = false;
    for (const JsonMap& piece : single) {
      if (const JsonMap* s = json_field(piece, "SpecialToken")) {
        for (int id : special_ids(r, p, r.str(*s, "id", "post_processor.single[].SpecialToken"), t))
          (seen_text ? t.suffix : t.prefix).push_back(id);
      } else if (const JsonMap* q = json_field(piece, "Sequence")) {
        if (seen_text || r.str(*q, "id", "post_processor.single[].Sequence") != "A") r.fail("post_processor.single has a Sequence other than one A");
        seen_text = true;
      } else {
        r.fail("post_processor.single has an entry that is neither SpecialToken nor Sequence");
      }
    }
    if (!seen_text) r.fail("post_processor.single has no Sequence A (the text)");
  } else {
    r.fail("post_processor \"" + type + "\" is not implemented (TemplateProcessing, ByteLevel and a Sequence of them are)");
  }
}

void check_bytes(const Reader& r, Impl& t) {
  t.byte_token.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char fallback[8];
    std::snprintf(fallback, sizeof fallback, "<0x%02X>", b);
    const std::string want = t.byte_level ? byte_char(static_cast<unsigned char>(b)) : std::string(fallback);
    if (!t.byte_level && !t.byte_fallback) continue;
    const auto it = t.ids.find(want);
    if (it == t.ids.end())
      r.fail(std::string(t.byte_level ? "a byte-level BPE vocabulary" : "a vocabulary with byte_fallback") + " lacks the piece \"" + want +
             "\" of byte " + std::to_string(b));
    t.byte_token[static_cast<std::size_t>(b)] = it->second;
  }
  if (!t.byte_level && !t.byte_fallback && !t.unk)
    r.fail("model has neither byte_fallback nor unk_token: a character outside the vocabulary would have no token");
}

// llama.cpp's SentencePiece vocabulary (tokenizer_json_impl.hpp): a byte-fallback model
// without merges, pre-tokenizer or normalizer, and a finite score per id.
void read_spm(const Reader& r, const JsonMap& s, Impl& t) {
  if (t.byte_level || !t.byte_fallback || !t.splits.empty() || !t.normalize.empty() || t.merges.size() != 0)
    r.fail("llama_cpp_spm needs a byte-fallback BPE model without merges, normalizer or pre-tokenizer");
  const JsonMap& scores = r.field(s, "scores", "llama_cpp_spm");
  if (!scores.is_array() || scores.size() != t.pieces.size())
    r.fail("llama_cpp_spm.scores is not an array of " + std::to_string(t.pieces.size()) + " numbers (one per id)");
  Fnv1a h;
  for (const JsonMap& v : scores) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) r.fail("llama_cpp_spm.scores has an entry that is not a finite number");
    t.scores.push_back(v.get<float>());
  }
  h.floats(t.scores);
  t.space_prefix = r.boolean(s, "add_space_prefix", "llama_cpp_spm");
  t.spm = true;
  h.value(t.space_prefix ? 2 : 1);
  t.digest = (t.digest ^ h.h) * 1099511628211ull;
}

// Everything encode and decode depend on, as the runtime holds it (not the file's bytes,
// whose spacing and key order may differ between two copies of one tokenizer).
std::uint64_t digest_of(const Impl& t, std::uint64_t merges) {
  Fnv1a h;
  h.value(merges);
  auto text = [&](const std::string& s) {
    h.value(s.size());
    h.bytes(s.data(), s.size());
  };
  for (std::size_t id = 0; id < t.pieces.size(); ++id) {
    h.value(static_cast<int>(t.present[id]) + 2 * static_cast<int>(t.is_special[id]) + 4 * static_cast<int>(t.is_added[id]));
    text(t.pieces[id]);
  }
  for (const Impl::Normalize& n : t.normalize) {
    h.value(static_cast<int>(n.kind));
    text(n.text);
    text(n.with);
  }
  h.value(t.splits.size());
  for (const Impl::Split& s : t.splits) {
    h.value(s.regex ? static_cast<int>(*s.regex) : -1);
    text(s.literal);
    h.value(static_cast<int>(s.behavior) * 2 + s.invert);
  }
  for (const bool b : {t.byte_level, t.ignore_merges, t.byte_fallback, t.fuse_unk}) h.value(b);
  h.value(t.unk.value_or(-1));
  for (const int id : t.prefix) h.value(id);
  h.value(-1);
  for (const int id : t.suffix) h.value(id);
  h.value(t.strip_start);
  return h.h;
}

}  // namespace

TokenizerJson TokenizerJson::from_json(const JsonMap& j, const std::string& where, CleanUp clean_up, bool llama_cpp) {
  try {
    TokenizerJson t = read_tokenizer(j, where);
    if (const JsonMap* spm = json_field(j, "llama_cpp_spm"); spm != nullptr) {
      if (!llama_cpp) throw ringattn::FileError("tokenizer " + where + ": llama_cpp_spm is not a tokenizer.json field; refused");
      read_spm(Reader(where), *spm, *t.impl_);
    }
    t.impl_->clean_up = clean_up;
    t.impl_->spaces = llama_cpp ? Spaces::unicode : Spaces::javascript;
    t.impl_->digest = (t.impl_->digest ^ (static_cast<std::uint64_t>(clean_up) * 2 + llama_cpp)) * 1099511628211ull;
    return t;
  } catch (const ringattn::FileError&) {
    throw;
  } catch (const std::exception& e) {  // json_int's range errors, nlohmann's type errors
    throw ringattn::FileError("tokenizer " + where + ": " + e.what());
  }
}

TokenizerJson TokenizerJson::read_tokenizer(const JsonMap& j, const std::string& where) {
  const Reader r(where);
  if (!j.is_object()) r.fail("is not a JSON object");
  check_id_span(r, j);  // before any table by id is sized
  auto t = std::make_unique<Impl>();
  const std::uint64_t merges = read_model(r, j, *t);
  read_added(r, j, *t);
  t->is_special.resize(t->pieces.size(), 0);
  t->is_added.resize(t->pieces.size(), 0);
  if (const JsonMap* n = json_field(j, "normalizer")) read_normalizer(r, *n, *t, 0);
  if (const JsonMap* p = json_field(j, "pre_tokenizer")) read_pre_tokenizer(r, *p, *t, 0);
  if (std::any_of(t->splits.begin(), t->splits.end(), [](const Impl::Split& s) { return s.regex.has_value(); }) && !t->byte_level)
    r.fail("pre_tokenizer Split on a regex without ByteLevel after it is not implemented");
  check_bytes(r, *t);
  read_decoder(r, j, *t);
  if (const JsonMap* p = json_field(j, "post_processor")) read_post_processor(r, *p, *t, 0);
  t->digest = digest_of(*t, merges);
  return TokenizerJson(std::move(t));
}

TokenizerJson TokenizerJson::load(const std::filesystem::path& file) {
  const std::vector<char> bytes = read_input_file(file.string(), kMaxFileBytes, "tokenizer.json");
  JsonMap j;
  try {
    j = parse_json_map(std::string_view(bytes.data(), bytes.size()));
  } catch (const std::exception& e) {
    throw ringattn::FileError("tokenizer " + file.string() + ": not valid JSON: " + e.what());
  }
  return from_json(j, file.string());
}

}  // namespace infer

namespace infer {

JsonMap read_tokenizer_config(const std::filesystem::path& path) {
  const std::vector<char> bytes = read_input_file(path.string(), kMaxFileBytes, "tokenizer config");
  try {
    return parse_json_map(std::string_view(bytes.data(), bytes.size()));
  } catch (const std::exception& e) {
    throw ringattn::FileError("tokenizer config " + path.string() + ": not valid JSON: " + e.what());
  }
}

TokenizerJson TokenizerJson::load(const std::filesystem::path& file, const std::filesystem::path& config) {
  if (!std::filesystem::exists(config)) return load(file, nullptr, config.string());
  const JsonMap j = read_tokenizer_config(config);
  return load(file, &j, config.string());
}

TokenizerJson TokenizerJson::load(const std::filesystem::path& file, const JsonMap* config, const std::string& config_path) {
  TokenizerJson t = load(file);
  t.impl_->clean_up = CleanUp::transformers;
  if (config == nullptr) return t;
  if (!config->is_object()) throw ringattn::FileError("tokenizer config " + config_path + ": is not a JSON object");
  if (const JsonMap* c = json_field(*config, "clean_up_tokenization_spaces"); c != nullptr && !c->is_null()) {
    if (!c->is_boolean()) throw ringattn::FileError("tokenizer config " + config_path + ": clean_up_tokenization_spaces is not a boolean");
    t.impl_->clean_up = c->get<bool>() ? CleanUp::transformers : CleanUp::none;
  }
  return t;
}

}  // namespace infer
