// infer — a GGUF file's configuration (gguf_config.hpp).
#include "gguf_config.hpp"

#include <ringattn/error.hpp>

#include <cmath>

#include "architecture.hpp"

namespace infer {

namespace {

// The file's sliding windows, as the architecture's row takes them (architecture.hpp's
// SlidingWindow; the keys llama.cpp's loader reads).
void gguf_window(GgufFile& f, const std::string& a, const Architecture& row, ModelConfig& c) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + f.path() + ": " + what); };
  if (row.window != SlidingWindow::every_layer && row.window != SlidingWindow::pattern) return;
  c.window = f.integer(a + ".attention.sliding_window", 0, std::int64_t{1} << 24).value_or(0);
  if (c.window == 0) return;  // none (llama.cpp: no window either)
  c.sliding.assign(static_cast<std::size_t>(c.layers), 1);
  if (row.window == SlidingWindow::every_layer) return;
  // pattern: a bool per layer, or every layer but each n-th (6 unless the key says)
  const std::string key = a + ".attention.sliding_window_pattern";
  if (const std::vector<double>* each = f.numbers(key)) {
    if (each->size() != c.sliding.size())
      throw fail(key + " has " + std::to_string(each->size()) + " entries for " + std::to_string(c.layers) + " layers");
    for (std::size_t l = 0; l < each->size(); ++l) c.sliding[l] = (*each)[l] != 0;
  } else {
    const std::int64_t n = f.integer(key, 0, 1 << 20).value_or(6);
    for (std::int64_t l = 0; l < c.layers; ++l) c.sliding[static_cast<std::size_t>(l)] = n == 0 || l % n < n - 1;
  }
  c.rope_theta_local = f.number(a + ".rope.freq_base_swa").value_or(10000);
  if (!(c.rope_theta_local >= 1 && c.rope_theta_local <= 1e12)) throw fail(a + ".rope.freq_base_swa is not in [1, 1e12]");
}

}  // namespace

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
  if (const auto s = f.string(a + ".rope.scaling.type"); s && *s == "linear") {
    c.rope_scaling.factor = f.number(a + ".rope.scaling.factor").value_or(0);
    c.rope_scaling.linear = true;
    if (!(c.rope_scaling.factor >= 1e-3 && c.rope_scaling.factor <= 1e6))
      throw fail(a + ".rope.scaling.factor is not in [1e-3, 1e6] (linear scaling needs one)");
  } else if (s && *s != "none") {
    throw fail(a + ".rope.scaling.type \"" + *s + "\" is not implemented (linear is)");
  }
  c.rope_style = row->gguf_rope;
  c.qkv_bias = row->qkv_bias;
  c.qk_norm = row->qk_norm;
  gguf_window(f, a, *row, c);
  // gemma: llama.cpp's scale of the scores (src/models/gemma3.cpp): 1/sqrt(head_dim), but
  // 1/sqrt(dim / heads) for the 62-layer (27B) model, whose query_pre_attn_scalar is that.
  if (row->query_scalar && c.layers == 62) c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.dim / c.heads));
  c.logit_softcap = f.number(a + ".final_logit_softcapping").value_or(0);
  if (!(c.logit_softcap >= 0 && c.logit_softcap <= 1e6)) throw fail(a + ".final_logit_softcapping is not in [0, 1e6]");
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
