// infer — config.json of a Hugging Face model directory (hf_config.hpp).
#include "hf_config.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "../common/input_file.hpp"
#include "architecture.hpp"

namespace infer {

namespace {

ringattn::FileError bad(const std::string& path, const std::string& what) {
  return ringattn::FileError("model " + path + ": " + what);
}

// The window an integer key gives (null or absent: none).
std::int64_t window_of(const Json& j, const std::string& path, const char* key) {
  const Json* w = json_field(j, key);
  if (!w || w->is_null()) return 0;
  try {
    return json_int(*w, key, 1, std::int64_t{1} << 24);
  } catch (const std::runtime_error& e) {
    throw bad(path, e.what());
  }
}

// The configuration's sliding windows, as the architecture's row takes them
// (architecture.hpp's SlidingWindow).
void hf_window(const Json& j, const std::string& path, const Architecture& arch, ModelConfig& c) {
  switch (arch.window) {
    case SlidingWindow::refused:
      if (const Json* f = json_field(j, "use_sliding_window"); f && f->is_boolean() && f->get<bool>())
        throw bad(path, "use_sliding_window true: " + std::string(arch.name) +
                            "'s sliding-window layers are not implemented in the model runtime");
      return;
    case SlidingWindow::none:
    case SlidingWindow::bounds_context:  // Mistral's (and a llama config's): the context is exact up to W
      if (const std::int64_t w = window_of(j, path, "sliding_window"))
        c.context = c.context > 0 ? std::min(c.context, w) : w;
      return;
    case SlidingWindow::every_layer:  // Phi-3's: every layer slides
      if ((c.window = window_of(j, path, "sliding_window")) > 0) c.sliding.assign(static_cast<std::size_t>(c.layers), 1);
      return;
    case SlidingWindow::pattern: {  // Gemma 3's: layer_types, else every layer but each pattern-th
      c.window = window_of(j, path, "sliding_window");
      if (c.window == 0) return;
      c.sliding.assign(static_cast<std::size_t>(c.layers), 0);
      if (const Json* types = json_field(j, "layer_types"); types && !types->is_null()) {
        if (!types->is_array() || types->size() != static_cast<std::size_t>(c.layers))
          throw bad(path, "layer_types is not a list of one type per layer (" + std::to_string(c.layers) + ")");
        for (std::size_t l = 0; l < types->size(); ++l) {
          const Json& t = (*types)[l];
          const bool sliding = t.is_string() && t.get<std::string>() == "sliding_attention";
          if (!sliding && !(t.is_string() && t.get<std::string>() == "full_attention"))
            throw bad(path, "layer_types[" + std::to_string(l) + "] = " + t.dump() +
                                ": \"sliding_attention\" and \"full_attention\" are implemented");
          c.sliding[l] = sliding;
        }
      } else {
        const std::int64_t every = window_of(j, path, "sliding_window_pattern");
        for (std::int64_t l = 0; l < c.layers; ++l) c.sliding[static_cast<std::size_t>(l)] = (l + 1) % (every ? every : 6) != 0;
      }
      const Json* base = json_field(j, "rope_local_base_freq");
      c.rope_theta_local = base && base->is_number() ? base->get<double>() : 10000;
      if (!(c.rope_theta_local >= 1 && c.rope_theta_local <= 1e12))
        throw bad(path, "rope_local_base_freq is not in [1, 1e12]");
      return;
    }
  }
}

}  // namespace

ModelConfig hf_config(const Json& j, const std::string& path) {
  auto fail = [&](const std::string& what) { return ringattn::FileError("model " + path + ": " + what); };
  if (!j.is_object()) throw fail("not a JSON object");
  auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi) -> std::int64_t {
    const Json* f = json_field(j, key);
    if (!f) throw fail("no \"" + std::string(key) + "\"");
    try {
      return json_int(*f, key, lo, hi);
    } catch (const std::runtime_error& e) {
      throw fail(e.what());
    }
  };
  auto optional_integer = [&](const char* key, std::int64_t lo, std::int64_t hi, std::int64_t fallback) {
    const Json* f = json_field(j, key);
    return f && !f->is_null() ? integer(key, lo, hi) : fallback;
  };
  auto number = [&](const Json& obj, const char* key, double lo, double hi, double fallback) {
    const Json* f = json_field(obj, key);
    if (!f || f->is_null()) return fallback;
    if (!f->is_number()) throw fail("\"" + std::string(key) + "\" is not a number");
    const double x = f->get<double>();
    if (!(x >= lo && x <= hi))
      throw fail("\"" + std::string(key) + "\" = " + f->dump() + " is outside [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]");
    return x;
  };
  auto flag = [&](const char* key, bool fallback) {
    const Json* f = json_field(j, key);
    if (!f || f->is_null()) return fallback;
    if (!f->is_boolean()) throw fail("\"" + std::string(key) + "\" is not true or false");
    return f->get<bool>();
  };

  const std::string* type = json_string(j, "model_type");
  if (!type) throw fail("no \"model_type\" string: not a Hugging Face model's config.json");
  const Architecture* arch = find_hf_architecture(*type);
  if (!arch)
    throw fail("model_type \"" + *type + "\" is not one this runtime implements (" + hf_architecture_names() + ")");
  if (json_field(j, "quantization_config"))
    throw fail("a quantization_config (GPTQ, AWQ, ...): only bf16, fp16 and fp32 weights load; a GGUF file holds "
               "quantized weights");
  for (const char* key : {"hidden_act", "hidden_activation"})  // (Gemma's config names it the second way)
    if (const std::string* act = json_string(j, key); act && *act != arch->hf_activation)
      throw fail(std::string(key) + " \"" + *act + "\": the runtime runs " + std::string(arch->name) + "'s MLP with " +
                 std::string(arch->hf_activation));

  ModelConfig c;
  c.architecture = std::string(arch->name);
  c.dim = integer("hidden_size", 2, 65536);
  c.ffn = integer("intermediate_size", 1, 1 << 20);
  c.layers = integer("num_hidden_layers", 1, 1024);
  c.heads = integer("num_attention_heads", 1, 1024);
  c.kv_heads = optional_integer("num_key_value_heads", 1, 1024, c.heads);
  c.vocab = integer("vocab_size", 2, 1 << 24);
  if (c.heads % c.kv_heads != 0)
    throw fail("num_key_value_heads " + std::to_string(c.kv_heads) + " does not divide num_attention_heads " +
               std::to_string(c.heads));
  if (!json_field(j, "head_dim") || json_field(j, "head_dim")->is_null()) {
    if (c.dim % c.heads != 0)
      throw fail("hidden_size " + std::to_string(c.dim) + " is not a multiple of num_attention_heads " +
                 std::to_string(c.heads) + " and no head_dim is given");
    c.head_dim = c.dim / c.heads;
  } else {
    c.head_dim = integer("head_dim", 2, 256);
  }
  c.context = optional_integer("max_position_embeddings", 1, std::int64_t{1} << 24, 0);
  c.norm_eps = static_cast<float>(number(j, "rms_norm_eps", 1e-12, 1e-1, 1e-6));
  c.rope_theta = number(j, "rope_theta", 1, 1e12, 10000);
  c.rope_style = RopeStyle::rotate_half;
  c.tied = flag("tie_word_embeddings", false);
  // Biases: an architecture's q, k and v ones are its row's (qwen2: always, its config has
  // no switch); llama's attention_bias would put them on o too, which this runtime does not add.
  c.qkv_bias = arch->qkv_bias;
  if (flag("attention_bias", false))
    throw fail("attention_bias true: biases on q, k, v and o are not implemented (qwen2's q/k/v biases are)");
  if (flag("mlp_bias", false)) throw fail("mlp_bias true: MLP biases are not implemented");
  c.qk_norm = arch->qk_norm;
  hf_window(j, path, *arch, c);
  if (arch->query_scalar)  // gemma: scores scaled by query_pre_attn_scalar^-1/2
    c.attention_scale = 1.0 / std::sqrt(number(j, "query_pre_attn_scalar", 1, 1e6, static_cast<double>(c.head_dim)));
  c.logit_softcap = number(j, "final_logit_softcapping", 1e-3, 1e6, 0);
  if (const Json* s = json_field(j, "attn_logit_softcapping"); s && !s->is_null())
    throw fail("attn_logit_softcapping: capped attention scores are not implemented");
  if (number(j, "partial_rotary_factor", 1e-3, 1, 1) != 1)
    throw fail("partial_rotary_factor " + json_field(j, "partial_rotary_factor")->dump() +
               ": RoPE over part of a head is not implemented");
  if (const Json* s = json_field(j, "rope_scaling"); s && !s->is_null()) {
    if (!s->is_object()) throw fail("rope_scaling is not an object");
    const std::string* kind = json_string(*s, "rope_type");
    if (!kind) kind = json_string(*s, "type");
    if (!kind) throw fail("rope_scaling has no rope_type");
    if (*kind == "llama3") {
      c.rope_scaling.factor = number(*s, "factor", 1, 1024, 0);
      c.rope_scaling.low_freq_factor = number(*s, "low_freq_factor", 1e-6, 1e6, 0);
      c.rope_scaling.high_freq_factor = number(*s, "high_freq_factor", 1e-6, 1e6, 0);
      const Json* o = json_field(*s, "original_max_position_embeddings");
      if (!c.rope_scaling.factor || !c.rope_scaling.low_freq_factor || !c.rope_scaling.high_freq_factor || !o)
        throw fail("rope_scaling llama3 needs factor, low_freq_factor, high_freq_factor and "
                   "original_max_position_embeddings");
      try {
        c.rope_scaling.original_context = static_cast<double>(json_int(*o, "original_max_position_embeddings", 1, 1 << 24));
      } catch (const std::runtime_error& e) {
        throw fail(std::string("rope_scaling ") + e.what());
      }
      if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
        throw fail("rope_scaling llama3: high_freq_factor must be larger than low_freq_factor");
    } else if (*kind == "linear") {
      c.rope_scaling.factor = number(*s, "factor", 1e-3, 1e6, 0);
      c.rope_scaling.linear = true;
      if (!c.rope_scaling.factor) throw fail("rope_scaling linear needs a factor");
    } else if (*kind != "default") {
      throw fail("rope_scaling of rope_type \"" + *kind + "\" is not implemented (llama3 and linear are)");
    }
  }
  try {
    c.check();
  } catch (const ringattn::InvalidArgument& e) {
    throw fail(e.what());
  }
  return c;
}

Json read_hf_json(const std::string& path, std::vector<char>& bytes) {
  constexpr std::uint64_t kMaxBytes = 1u << 20;
  bytes = read_input_file(path, kMaxBytes, "model");
  try {
    return parse_json(std::string_view(bytes.data(), bytes.size()));
  } catch (const std::runtime_error& e) {
    throw ringattn::FileError("model " + path + ": " + e.what());
  }
}

HfConfigFile read_hf_config(const std::string& dir) {
  HfConfigFile f;
  f.path = dir + "/config.json";
  f.json = read_hf_json(f.path, f.bytes);
  f.config = hf_config(f.json, f.path);
  return f;
}

}  // namespace infer
