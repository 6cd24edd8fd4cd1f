// GGUF files (infer/formats/gguf.hpp, gguf_config.hpp) written here byte by byte: a well-formed one
// loads; hostile headers, metadata and tensor tables are refused naming the key or the
// tensor, nothing read past the end. (The seed's model as GGUF against the seed's own:
// deploy/test_embedding.sh; random inputs: tests/fuzz/fuzz_gguf.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include <ringattn/error.hpp>

#include "job/chat.hpp"
#include "formats/gguf.hpp"
#include "model/gguf_config.hpp"
#include "job/load.hpp"
#include "model/model.hpp"
#include "infer/job/model_files.hpp"
#include "job/options.hpp"
#include "tests/error_of.hpp"
#include "tests/model/file_opens.hpp"
#include "tokenizers/tokenizer_gguf.hpp"

namespace fs = std::filesystem;
using infer::GgufFile;
using ringattn::test::error_of;

namespace {

// A GGUF v3 file assembled from parts; each part may be edited by a test before writing.
struct Gguf {
  std::uint32_t version = 3;
  std::string meta;  // encoded key/value pairs
  std::uint64_t keys = 0;
  std::string infos, data;
  std::uint64_t tensors = 0;

  template <class T>
  static std::string le(T v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof v);
  }
  static std::string str(const std::string& s) { return le<std::uint64_t>(s.size()) + s; }
  void u32(const std::string& k, std::uint32_t v) { meta += str(k) + le<std::uint32_t>(4) + le(v), ++keys; }
  void f32(const std::string& k, float v) { meta += str(k) + le<std::uint32_t>(6) + le(v), ++keys; }
  void text(const std::string& k, const std::string& v) { meta += str(k) + le<std::uint32_t>(8) + str(v), ++keys; }
  void boolean(const std::string& k, bool v) { meta += str(k) + le<std::uint32_t>(7) + le<std::uint8_t>(v), ++keys; }
  void texts(const std::string& k, const std::vector<std::string>& v) {
    meta += str(k) + le<std::uint32_t>(9) + le<std::uint32_t>(8) + le<std::uint64_t>(v.size());
    for (const auto& x : v) meta += str(x);
    ++keys;
  }
  void f32s(const std::string& k, const std::vector<float>& v) {
    meta += str(k) + le<std::uint32_t>(9) + le<std::uint32_t>(6) + le<std::uint64_t>(v.size());
    for (const auto x : v) meta += le(x);
    ++keys;
  }
  void i32s(const std::string& k, const std::vector<std::int32_t>& v) {
    meta += str(k) + le<std::uint32_t>(9) + le<std::uint32_t>(5) + le<std::uint64_t>(v.size());
    for (const auto x : v) meta += le(x);
    ++keys;
  }
  // A tensor of ggml type `type` with dims innermost first and raw data (padded to 32).
  void tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, const std::string& bytes) {
    infos += str(name) + le<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (auto n : ne) infos += le(n);
    infos += le(type) + le<std::uint64_t>(data.size());
    data += bytes + std::string((32 - bytes.size() % 32) % 32, '\0');
    ++tensors;
  }
  void f32_tensor(const std::string& name, std::vector<std::uint64_t> ne, float value = 0.01f) {
    std::uint64_t n = 1;
    for (auto x : ne) n *= x;
    std::string b;
    for (std::uint64_t i = 0; i < n; ++i) b += le(value);
    tensor(name, ne, 0, b);
  }
  std::string bytes() const {
    std::string head = "GGUF" + le(version) + le(tensors) + le(keys) + meta + infos;
    head += std::string((32 - head.size() % 32) % 32, '\0');
    return head + data;
  }
};

// A small llama: dim 8, 1 layer, 2 heads of 4 (1 KV head), MLP 8, vocab 16, tied.
Gguf llama(std::uint32_t vocab = 16) {
  Gguf g;
  g.text("general.architecture", "llama");
  g.u32("llama.embedding_length", 8);
  g.u32("llama.block_count", 1);
  g.u32("llama.feed_forward_length", 8);
  g.u32("llama.attention.head_count", 2);
  g.u32("llama.attention.head_count_kv", 1);
  g.u32("llama.vocab_size", vocab);
  g.u32("llama.context_length", 64);
  g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.f32("llama.rope.freq_base", 10000.0f);
  g.f32_tensor("token_embd.weight", {8, vocab});
  g.f32_tensor("blk.0.attn_norm.weight", {8}, 1.0f);
  g.f32_tensor("blk.0.attn_q.weight", {8, 8});
  g.f32_tensor("blk.0.attn_k.weight", {8, 4});
  g.f32_tensor("blk.0.attn_v.weight", {8, 4});
  g.f32_tensor("blk.0.attn_output.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_norm.weight", {8}, 1.0f);
  g.f32_tensor("blk.0.ffn_gate.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_up.weight", {8, 8});
  g.f32_tensor("blk.0.ffn_down.weight", {8, 8});
  g.f32_tensor("output_norm.weight", {8}, 1.0f);
  return g;
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& bytes)
      : path(fs::temp_directory_path() / ("ringattn-gguf-" + std::to_string(::getpid()) + ".gguf")) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { fs::remove(path); }
};

std::string load_error(const std::string& bytes) {
  TempFile f(bytes);
  return error_of([&] { infer::Model::from_gguf(f.path.string()); });
}

}  // namespace

TEST_CASE("gguf: a well-formed llama file loads, its configuration from the metadata") {
  TempFile f(llama().bytes());
  const infer::Model m = infer::Model::from_gguf(f.path.string());
  CHECK(m.config().architecture == "llama");
  CHECK(m.config().dim == 8);
  CHECK(m.config().head_dim == 4);
  CHECK(m.config().kv_heads == 1);
  CHECK(m.config().tied);
  CHECK(m.config().rope_style == infer::RopeStyle::interleaved);  // llama.cpp's q/k row order
  CHECK(m.matrices_dtype() == ringattn::DType::f32);
}

TEST_CASE("gguf: hostile headers, metadata and tensor tables are refused, naming what is wrong") {
  struct Case {
    std::function<void(Gguf&)> edit;
    const char* want;
  };
  const Case cases[] = {
      {[](Gguf& g) { g.version = 1; }, "GGUF version 1: versions 2 and 3 are read"},
      {[](Gguf& g) { g.keys = 1u << 30; }, "more than 2^24"},
      {[](Gguf& g) { g.meta += Gguf::str("big") + Gguf::le<std::uint32_t>(9) + Gguf::le<std::uint32_t>(4) +
                              Gguf::le<std::uint64_t>(1u << 20), ++g.keys; },
       "big runs past the end of the file"},
      {[](Gguf& g) { g.meta += Gguf::str("x") + Gguf::le<std::uint32_t>(8) + Gguf::le<std::uint64_t>(1ull << 40), ++g.keys; },
       "a string of 1099511627776 bytes"},
      {[](Gguf& g) { g.meta += Gguf::str("x") + Gguf::le<std::uint32_t>(77), ++g.keys; }, "x: unknown value type 77"},
      {[](Gguf& g) { g.u32("llama.block_count", 2); }, "metadata key llama.block_count appears twice"},
      {[](Gguf& g) { g.text("general.architecture", "gpt2"); }, "appears twice"},
      {[](Gguf& g) { g.tensor("bad", {0, 4}, 0, ""); }, "tensor \"bad\": dimension 0"},
      {[](Gguf& g) { g.tensor("bad", {4}, 99, std::string(16, '\0')); }, "ggml type 99 is not read"},
      {[](Gguf& g) { g.tensor("q", {16, 2}, 8, std::string(34, '\0')); }, "a row of 16 is not whole Q8_0 blocks"},
      {[](Gguf& g) { g.tensor("q", {32, 2}, 8, std::string(68, '\0')); }, "\"q\" is not part of the model"},
      {[](Gguf& g) { g.data.resize(g.data.size() - 64); }, "outside the file"},
      {[](Gguf& g) { g.u32("general.alignment", 3); }, "general.alignment 3 is not a power of two"},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.want));
    Gguf g = llama();
    k.edit(g);
    const std::string e = load_error(g.bytes());
    CAPTURE(e);
    CHECK(e.find(k.want) != std::string::npos);
  }
  CHECK(load_error("GGUX").find("no \"GGUF\" magic") != std::string::npos);
  CHECK(load_error("GG").find("runs past the end") != std::string::npos);
  CHECK(load_error(llama().bytes().substr(0, 300)).find("runs past the end of the file") != std::string::npos);
}

TEST_CASE("gguf: metadata the runtime does not implement, or that does not fit the tensors, is refused") {
  struct Case {
    std::function<void(Gguf&)> edit;
    const char* want;
  };
  const auto replace = [](Gguf& g, const std::string& key, const std::string& encoded_value) {
    const std::string k = Gguf::str(key);
    const auto at = g.meta.find(k);
    REQUIRE(at != std::string::npos);
    const std::size_t value_at = at + k.size();
    std::uint64_t n = 0;
    if (g.meta[value_at] == 8) std::memcpy(&n, &g.meta[value_at + 4], 8);
    const std::size_t len = g.meta[value_at] == 8 ? 4 + 8 + n : 8;  // (u32 and f32 values: type + 4 bytes)
    g.meta.replace(value_at, len, encoded_value);
  };
  const Case cases[] = {
      {[&](Gguf& g) { replace(g, "general.architecture", Gguf::le<std::uint32_t>(8) + Gguf::str("gpt2")); },
       "general.architecture \"gpt2\" is not one this runtime implements"},
      {[&](Gguf& g) { replace(g, "llama.embedding_length", Gguf::le<std::uint32_t>(8) + Gguf::str("8")); },
       "metadata llama.embedding_length must be an integer"},
      {[&](Gguf& g) { replace(g, "llama.attention.head_count_kv", Gguf::le<std::uint32_t>(4) + Gguf::le<std::uint32_t>(3)); },
       "head_count_kv 3 does not divide head_count 2"},
      {[&](Gguf& g) { g.u32("llama.rope.dimension_count", 2); }, "partial RoPE is not implemented"},
      {[&](Gguf& g) { g.text("llama.rope.scaling.type", "yarn"); }, "rope.scaling.type \"yarn\" is not implemented"},
      {[&](Gguf& g) { replace(g, "llama.vocab_size", Gguf::le<std::uint32_t>(4) + Gguf::le<std::uint32_t>(17)); },
       "tensor \"token_embd.weight\" has shape [16, 8], the model's configuration needs [17, 8]"},
      {[&](Gguf& g) { g.f32_tensor("blk.0.attn_q.bias", {8}); }, "\"blk.0.attn_q.bias\" is not part of the model"},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.want));
    Gguf g = llama();
    k.edit(g);
    CHECK(load_error(g.bytes()).find(k.want) != std::string::npos);
  }
  Gguf g = llama();
  g.f32_tensor("output.weight", {8, 16}, NAN);
  CHECK(load_error(g.bytes()).find("tensor \"output.weight\" holds NaN or inf") != std::string::npos);
}

namespace {

// GPT-2's byte characters (bytes that are printable Latin-1 stand for themselves).
std::string byte_char(int b) {
  static std::vector<std::string> m = [] {
    std::vector<std::string> out(256);
    int extra = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      const unsigned u = printable ? static_cast<unsigned>(c) : 256u + static_cast<unsigned>(extra++);
      out[static_cast<std::size_t>(c)] = u < 0x80 ? std::string(1, static_cast<char>(u))
                                                  : std::string{static_cast<char>(0xC0 | (u >> 6)), static_cast<char>(0x80 | (u & 0x3F))};
    }
    return out;
  }();
  return m[static_cast<std::size_t>(b)];
}

// A byte-level vocabulary: the 256 byte characters, "Ġt", "he", "Ġthe", "<|end|>" (control),
// "</s>" (normal in the file: llama.cpp makes it control), as `edit` leaves it.
void add_byte_vocab(Gguf& g, const std::function<void(std::vector<std::string>&, std::vector<std::int32_t>&, Gguf&)>& edit = {}) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(b));
  const std::string G = byte_char(' ');
  for (const std::string& t : {G + "t", std::string("he"), G + "the", std::string("<|end|>"), std::string("</s>")}) tokens.push_back(t);
  std::vector<std::int32_t> types(tokens.size(), 1);
  types[259] = 3;
  g.text("tokenizer.ggml.model", "gpt2");
  g.text("tokenizer.ggml.pre", "llama-bpe");
  if (edit) edit(tokens, types, g);
  g.texts("tokenizer.ggml.tokens", tokens);
  g.i32s("tokenizer.ggml.token_type", types);
  if (g.meta.find("tokenizer.ggml.merges") == std::string::npos) g.texts("tokenizer.ggml.merges", {G + " t", "h e", G + "t he"});
}

GgufFile vocab_file(std::string& keep, const std::function<void(std::vector<std::string>&, std::vector<std::int32_t>&, Gguf&)>& edit = {}) {
  Gguf g;
  g.text("general.architecture", "llama");
  add_byte_vocab(g, edit);
  keep = g.bytes();
  return GgufFile(std::as_bytes(std::span(keep.data(), keep.size())), "vocab.gguf");
}

// A SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then pieces
// with scores, as hello_pieces lists them.
GgufFile spm_file(std::string& keep, const std::function<void(std::vector<std::string>&, std::vector<std::int32_t>&, std::vector<float>&, Gguf&)>& edit = {}) {
  Gguf g;
  g.text("general.architecture", "llama");
  g.text("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types = {2, 3, 3};
  char hex[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    tokens.push_back(hex);
    types.push_back(6);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  const std::string sp = "\u2581";
  for (const auto& [piece, score] : std::vector<std::pair<std::string, float>>{
           {sp, -1}, {"h", -1}, {"e", -1}, {"l", -1}, {"o", -1}, {sp + "h", -5}, {"he", -3}, {"ll", -2}, {"llo", -4},
           {"hello", -10}, {sp + "hello", -6}}) {
    tokens.push_back(piece);
    types.push_back(1);
    scores.push_back(score);
  }
  if (edit) edit(tokens, types, scores, g);
  g.texts("tokenizer.ggml.tokens", tokens);
  g.i32s("tokenizer.ggml.token_type", types);
  g.f32s("tokenizer.ggml.scores", scores);
  keep = g.bytes();
  return GgufFile(std::as_bytes(std::span(keep.data(), keep.size())), "vocab.gguf");
}

}  // namespace

// A model file's chat template is as untrusted as a request: one in tokenizer.chat_template
// that copies a 16 MB string into a list of lists (it peaked at 3.3 GB; 10 x 10 x 10 died of
// std::bad_alloc naming nothing) is refused while rendering, naming the file and line, within
// the render's memory bound.
TEST_CASE("gguf: a hostile tokenizer.chat_template is refused when rendered, naming the file and line, within the render's bounds") {
  Gguf g = llama();
  g.text("tokenizer.chat_template",
         "{% set s = 'x' * 16000000 %}{% set a = [s,s,s,s,s,s,s,s,s,s] %}\n{% set b = [a,a,a,a,a,a,a,a,a,a] %}"
         "{% set c = [b,b,b,b,b,b,b,b,b,b] %}{{ c|length }}");
  const TempFile f(g.bytes());
  infer::JobOptions opt;
  opt.gguf = f.path.string();
  infer::ModelFiles files(opt.gguf, opt.hf, opt.tokenizer);
  const infer::ModelChat chat = infer::load_chat(opt, files);
  REQUIRE_MESSAGE(chat.tmpl.has_value(), chat.refused);
  infer::RenderStats stats;
  const std::string e = error_of([&] {
    (void)chat.tmpl->render(infer::Json{{"messages", infer::Json::array({{{"role", "user"}, {"content", "hi"}}})}}, {}, &stats);
  });
  CHECK(e.find(f.path.string() + " (tokenizer.chat_template): line 2: makes more than 256 MiB") != std::string::npos);
  CHECK(stats.made_bytes <= infer::RenderLimits{}.made_bytes + (16u << 20));
  CHECK(error_of([&] { (void)chat.render(infer::Json::array({{{"role", "user"}, {"content", "hi"}}})); }).find("line 2") != std::string::npos);
}

TEST_CASE("gguf: a SentencePiece vocabulary runs as llama.cpp runs it: merges by score, the space prefix, bytes, BOS") {
  std::string keep;
  const GgufFile f = spm_file(keep);
  const infer::TokenizerJson t = infer::gguf_tokenizer(f);
  const int hello = 259 + 10, sp_h = 259 + 5;
  // "▁hello": ll (-2), then he (-3), llo (-4), hello (-10), ▁hello (-6): one token.
  CHECK(t.encode("hello", false) == std::vector<int>{hello});
  CHECK(t.encode("hello", true) == std::vector<int>{1, hello});  // llama.cpp adds BOS by default for this kind
  // A character without a token becomes its bytes; "▁h" merges first.
  CHECK(t.encode("h\xc3\xa9", false) == std::vector<int>{sp_h, 3 + 0xC3, 3 + 0xA9});
  // After a special token the text gets its space prefix again.
  CHECK(t.encode("hello<s>hello", false) == std::vector<int>{hello, 1, hello});
  // Decode: one space off the first token's text; special tokens as text unless skipped;
  // byte runs as lossy UTF-8.
  CHECK(t.decode(std::vector<int>{hello, hello}) == "hello hello");
  CHECK(t.decode(std::vector<int>{1, hello}) == "<s> hello");
  CHECK(t.decode(std::vector<int>{1, hello}, true) == " hello");
  CHECK(t.decode(t.encode("h\xc3\xa9", false)) == "h\xc3\xa9");
  CHECK(t.decode(std::vector<int>{3 + 0xC3, hello}) == "\xef\xbf\xbd hello");
  {
    std::string k2;
    const GgufFile g = spm_file(k2, [](auto&, auto&, auto&, Gguf& x) { x.boolean("tokenizer.ggml.add_space_prefix", false); });
    const infer::TokenizerJson u = infer::gguf_tokenizer(g);
    CHECK(u.encode("hello", false) == std::vector<int>{259 + 9});  // "hello" without "▁"
    CHECK(u.decode(std::vector<int>{hello}) == " hello");          // nothing stripped
  }
  // Hostile: a byte token that is not <0xNN>, a <0xNN> that is not of the byte type, scores
  // of another length.
  struct Case {
    const char* what;
    std::function<void(std::vector<std::string>&, std::vector<std::int32_t>&, std::vector<float>&, Gguf&)> edit;
    const char* says;
  };
  const Case cases[] = {
      {"a byte token that is not <0xNN>", [](auto& tk, auto&, auto&, Gguf&) { tk[3] = "<0xZZ>"; }, "is of the byte type (6) but is not a <0xNN>"},
      {"a <0xNN> of another type", [](auto&, auto& ty, auto&, Gguf&) { ty[3] = 1; }, "is not of the byte type (6) but is a <0xNN>"},
      {"scores of another length", [](auto&, auto&, auto& sc, Gguf&) { sc.pop_back(); }, "tokenizer.ggml.scores is missing or not one number per token"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    std::string k3;
    const std::string m = error_of([&] { (void)infer::gguf_tokenizer(spm_file(k3, c.edit)); });
    CHECK(m.find("vocab.gguf") != std::string::npos);
    CHECK(m.find(c.says) != std::string::npos);
  }
}

TEST_CASE("gguf: a byte-level vocabulary runs as llama.cpp runs it; a hostile or unknown one is refused naming the key") {
  std::string bytes;
  {
    const GgufFile f = vocab_file(bytes);
    const infer::TokenizerJson t = infer::gguf_tokenizer(f);
    // " the" merges to one token; <|end|> (control) and </s> (made control) are found in text.
    CHECK(t.encode(" the<|end|></s>", false) == std::vector<int>{258, 259, 260});
    CHECK(t.decode(std::vector<int>{258, 259}) == " the<|end|>");
    CHECK(t.decode(t.encode("a , b 's", false)) == "a, b's");  // llama-bpe: llama.cpp's clean_spaces
    CHECK(t.encode("x\xef\xbb\xbfy", false).size() == 5);  // U+FEFF is not a space to llama.cpp: x, EF BB BF, y    // llama.cpp ends generation at <|end|> and </s> (its end-of-generation spellings, control
    // tokens here), and at the ids the metadata names.
    CHECK(infer::gguf_end_tokens(f) == std::vector<std::int32_t>{259, 260});
  }
  {
    std::string keep;
    const GgufFile f = vocab_file(keep, [](std::vector<std::string>& t, std::vector<std::int32_t>& ty, Gguf& g) {
      g.u32("tokenizer.ggml.eos_token_id", 3);
      t.push_back("<|fim_pad|>");
      t.push_back("<|end_of_text|>");
      ty.push_back(1);
      ty.push_back(1);  // made control by llama.cpp at load: an end token all the same
      t[259] = "<|endoftext|>";
      ty[259] = 1;
    });
    CHECK(infer::gguf_end_tokens(f) == std::vector<std::int32_t>{3, 259, 260, 261, 262});
    std::string bad;
    CHECK(error_of([&] { (void)infer::gguf_end_tokens(vocab_file(bad, [](auto&, auto&, Gguf& g) { g.u32("tokenizer.ggml.eot_token_id", 999); })); })
              .find("tokenizer.ggml.eot_token_id must be an integer in [0, 260], got 999") != std::string::npos);
  }
  struct Case {
    const char* what;
    std::function<void(std::vector<std::string>&, std::vector<std::int32_t>&, Gguf&)> edit;
    const char* says;
  };
  const Case cases[] = {
      {"another kind", [](auto&, auto&, Gguf& g) { g = Gguf(); g.text("tokenizer.ggml.model", "bert"); }, "only GGUF's byte-level"},
      {"a SentencePiece vocabulary without scores", [](auto&, auto&, Gguf& g) { g = Gguf(); g.text("tokenizer.ggml.model", "llama"); },
       "tokenizer.ggml.scores is missing"},
      {"another pre-tokenizer", [](auto&, auto&, Gguf& g) { g = Gguf(); g.text("tokenizer.ggml.model", "gpt2"); g.text("tokenizer.ggml.pre", "gpt-4o"); },
       "tokenizer.ggml.pre is \"gpt-4o\""},
      {"token types of another length", [](auto&, std::vector<std::int32_t>& ty, Gguf&) { ty.pop_back(); }, "token_type has 260 entries for 261"},
      {"a token type out of range", [](auto&, std::vector<std::int32_t>& ty, Gguf&) { ty[5] = 9; }, "token_type[5] = 9"},
      {"merges of another type", [](auto&, auto&, Gguf& g) { g.u32("tokenizer.ggml.merges", 1); }, "needs them"},
      {"a token twice", [](std::vector<std::string>& t, auto&, Gguf&) { t[258] = t[257]; }, "twice"},
      {"a merge of tokens not in it", [](auto&, auto&, Gguf& g) { g.texts("tokenizer.ggml.merges", {"q z"}); }, "is not in model.vocab"},
      {"BOS asked for but not named", [](auto&, auto&, Gguf& g) { g.boolean("tokenizer.ggml.add_bos_token", true); }, "bos_token_id is missing"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    std::string keep;
    const std::string m = error_of([&] {
      const GgufFile f = vocab_file(keep, c.edit);
      (void)infer::gguf_tokenizer(f);
    });
    CHECK(m.find("vocab.gguf") != std::string::npos);
    CHECK(m.find(c.says) != std::string::npos);
  }
}

// One load reads a GGUF file once (issue 46): the weights, the configuration, the vocabulary,
// the end tokens, the chat template and the fingerprint all from one mapping and one parse of
// its metadata. Before, the file was opened five times (model_load, the tokenizer, the end
// tokens, the chat template, the fingerprint), its 150k-entry vocabulary parsed four times.
// Counted by the kernel: an inotify watch on the file sees every open.
TEST_CASE("gguf: one load opens the file once, for the weights, the vocabulary, the end tokens, the chat template and the fingerprint") {
  Gguf g = llama(261);
  add_byte_vocab(g);
  g.u32("tokenizer.ggml.eos_token_id", 259);
  g.text("tokenizer.chat_template", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}");
  const TempFile f(g.bytes());
  ringattn::test::FileOpens opens;
  opens.watch(f.path.string());
  infer::JobOptions opt;
  opt.gguf = f.path.string();
  opt.tp = {0, 2};  // a tensor-parallel part: the fingerprint is taken too
  opt.progress = false;
  const infer::LoadedJob job = infer::load_model(opt);
  CHECK(opens.counts().at(f.path.string()) == 1);
  REQUIRE_MESSAGE(job.tokenizer != nullptr, job.tokenizer_missing);
  CHECK(job.tokenizer->vocab() == 261);
  REQUIRE_MESSAGE(job.chat.tmpl.has_value(), job.chat.refused);
  CHECK(job.chat.render(infer::Json::array({{{"role", "user"}, {"content", "hi"}}})) == "<user>hi<|end|>");
  CHECK(job.fingerprint != 0);
  CHECK(std::binary_search(opt.end_tokens.begin(), opt.end_tokens.end(), 259));  // the file's EOS
  CHECK(job.model.parts().shard.size == 2);
}

namespace {

// A llama of dim 32 (2 heads of 16, 2 K/V heads), MLP `ffn`, vocab 16, untied, its
// ffn_down of ggml type `down_type` holding `down_bytes`; every other tensor F32.
Gguf quant_llama(std::uint64_t ffn, std::uint32_t down_type, const std::string& down_bytes) {
  Gguf g;
  g.text("general.architecture", "llama");
  g.u32("llama.embedding_length", 32);
  g.u32("llama.block_count", 1);
  g.u32("llama.feed_forward_length", static_cast<std::uint32_t>(ffn));
  g.u32("llama.attention.head_count", 2);
  g.u32("llama.attention.head_count_kv", 2);
  g.u32("llama.vocab_size", 16);
  g.u32("llama.context_length", 64);
  g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  g.f32("llama.rope.freq_base", 10000.0f);
  g.f32_tensor("token_embd.weight", {32, 16});
  g.f32_tensor("blk.0.attn_norm.weight", {32}, 1.0f);
  for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) g.f32_tensor("blk.0." + std::string(m) + ".weight", {32, 32});
  g.f32_tensor("blk.0.ffn_norm.weight", {32}, 1.0f);
  g.f32_tensor("blk.0.ffn_gate.weight", {32, ffn});
  g.f32_tensor("blk.0.ffn_up.weight", {32, ffn});
  g.tensor("blk.0.ffn_down.weight", {ffn, 32}, down_type, down_bytes);
  g.f32_tensor("output_norm.weight", {32}, 1.0f);
  g.f32_tensor("output.weight", {32, 16});
  return g;
}

// ffn_down as Q8_0 (ggml type 8): 32 rows of ffn / 32 blocks of 34 bytes, d = 0.
Gguf q8_0_llama(std::uint64_t ffn) { return quant_llama(ffn, 8, std::string(32 * ffn / 32 * 34, '\0')); }

}  // namespace

TEST_CASE("gguf: a tensor of a ggml type the table of tensor types has no row for is refused, naming the type and the tensor") {
  // Q4_0 (2) and Q5_K (13) are ggml's, not read here; 31 and 99 are no type of ggml's.
  struct Case {
    std::uint32_t type;
    const char* want;
  };
  const Case cases[] = {{2, "ggml type 2 (Q4_0) is not read (F32, BF16, F16, Q8_0, Q4_K, Q6_K)"},
                        {13, "ggml type 13 (Q5_K) is not read (F32, BF16, F16, Q8_0, Q4_K, Q6_K)"},
                        {10, "ggml type 10 (Q2_K) is not read"},
                        {31, "ggml type 31 is not read"},
                        {99, "ggml type 99 is not read"}};
  for (const Case& k : cases) {
    CAPTURE(k.type);
    TempFile f(quant_llama(256, k.type, std::string(32 * 176, '\0')).bytes());
    const std::string e = error_of([&] { infer::Model::from_gguf(f.path.string()); });
    CAPTURE(e);
    CHECK(e.find("model " + f.path.string() + ": tensor \"blk.0.ffn_down.weight\": " + k.want) != std::string::npos);
  }
  // The same file with a type the table has (Q8_0) loads, its down held in blocks.
  TempFile ok(q8_0_llama(256).bytes());
  CHECK(infer::Model::from_gguf(ok.path.string()).config().ffn == 256);
}

TEST_CASE("gguf: a tensor-parallel part of a Q8_0 matrix whose columns do not fall on whole blocks is refused, naming the tensor") {
  // down's columns are the MLP's units: ffn 96 in 2 parts cuts at 48, inside a block of 32.
  {
    TempFile f(q8_0_llama(96).bytes());
    for (int rank : {0, 1}) {
      CAPTURE(rank);
      const std::string e = error_of([&] { infer::Model::from_gguf(f.path.string(), std::nullopt, {rank, 2}); });
      CAPTURE(e);
      const std::string cols = rank == 0 ? "[0, 48)" : "[48, 96)";
      CHECK(e.find("model " + f.path.string() + ": tensor blk.0.ffn_down.weight: this rank's tensor-parallel part holds its columns " +
                   cols + ", which do not start and end on the q8_0 blocks of 32 values along a row") != std::string::npos);
    }
    CHECK(infer::Model::from_gguf(f.path.string()).config().ffn == 96);  // one rank holds whole rows
  }
  // Whole blocks (ffn 128: parts of 64) split.
  TempFile whole(q8_0_llama(128).bytes());
  CHECK(infer::Model::from_gguf(whole.path.string(), std::nullopt, {1, 2}).parts().ffn.count == 64);
}
