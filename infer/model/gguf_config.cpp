// infer — a GGUF file's configuration (gguf_config.hpp).
#include "gguf_config.hpp"

#include <ringattn/error.hpp>

#include <cmath>

#include "architecture.hpp"

namespace infer {

ModelConfig gguf_config(GgufFile& f) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + f.path() + ": " + what); };
  const std::optional<std::string> arch = f.string("general.architecture");
  if (!arch) throw fail("no general.architecture");
  const std::string& a = *arch;
  const Architecture* row = find_gguf_architecture(a);
  if (!row)
    throw fail("general.architecture \"" + a + "\" is not one this runtime implements (" + gguf_architecture_names() + ")");
  auto need = [&](const std::string& key, std::int64_t lo, std::int64_t hi) {
    const auto v = f.integer(a + "." + key, lo, hi);
    if (!v) throw fail("no " + a + "." + key);
    return *v;
  };
  ModelConfig c;
  c.architecture = std::string(row->name);
  c.dim = need("embedding_length", 2, 65536);
  c.layers = need("block_count", 1, 1024);
  c.ffn = need("feed_forward_length", 1, 1 << 20);
  c.heads = need("attention.head_count", 1, 1024);
  c.kv_heads = f.integer(a + ".attention.head_count_kv", 1, 1024).value_or(c.heads);
  if (c.heads % c.kv_heads != 0)
    throw fail(a + ".attention.head_count_kv " + std::to_string(c.kv_heads) + " does not divide head_count " +
               std::to_string(c.heads));
  const auto key_length = f.integer(a + ".attention.key_length", 2, 256);
  if (!key_length && c.dim % c.heads != 0) throw fail("no " + a + ".attention.key_length and heads do not divide the width");
  c.head_dim = key_length.value_or(c.dim / c.heads);
  if (const auto v = f.integer(a + ".attention.value_length", 1, 1024); v && *v != c.head_dim)
    throw fail(a + ".attention.value_length " + std::to_string(*v) + " differs from key_length: not implemented");
  if (const auto r = f.integer(a + ".rope.dimension_count", 1, 1024); r && *r != c.head_dim)
    throw fail(a + ".rope.dimension_count " + std::to_string(*r) + " is not the head dimension " +
               std::to_string(c.head_dim) + ": partial RoPE is not implemented");
  c.context = f.integer(a + ".context_length", 1, std::int64_t{1} << 24).value_or(0);
  const double eps = f.number(a + ".attention.layer_norm_rms_epsilon").value_or(1e-6);
  if (!(eps > 0 && eps < 0.1)) throw fail(a + ".attention.layer_norm_rms_epsilon is not in (0, 0.1)");
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = f.number(a + ".rope.freq_base").value_or(10000);
  if (!(c.rope_theta >= 1 && c.rope_theta <= 1e12)) throw fail(a + ".rope.freq_base is not in [1, 1e12]");
  if (const auto s = f.string(a + ".rope.scaling.type"); s && *s != "none")
    throw fail(a + ".rope.scaling.type \"" + *s + "\" is not implemented");
  c.rope_style = row->gguf_rope;
  c.qkv_bias = row->qkv_bias;
  c.qk_norm = row->qk_norm;
  // The vocabulary: the embedding's rows (its dimensions are checked against the rest when read).
  if (const auto v = f.integer(a + ".vocab_size", 2, 1 << 24)) c.vocab = *v;
  else if (const auto* t = f.strings("tokenizer.ggml.tokens")) c.vocab = static_cast<std::int64_t>(t->size());
  else throw fail("neither " + a + ".vocab_size nor tokenizer.ggml.tokens gives the vocabulary");
  c.tied = !f.has("output.weight");
  if (f.has("rope_freqs.weight")) {
    const std::vector<float> r = f.take("rope_freqs.weight", std::vector<std::int64_t>{c.head_dim / 2});
    for (float x : r)
      if (!(x > 0)) throw fail("rope_freqs.weight holds a factor that is not positive");
    c.rope_factors = r;
  }
  try {
    c.check();
  } catch (const ringattn::InvalidArgument& e) {
    throw fail(e.what());
  }
  return c;
}

}  // namespace infer
