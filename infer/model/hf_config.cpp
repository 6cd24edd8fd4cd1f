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

// The keys of config.json (or of an object in it), each checked as it is read; every
// refusal names the file.
class Keys {
 public:
  explicit Keys(const std::string& path) : path_(path) {}
  ringattn::FileError fail(const std::string& what) const { return ringattn::FileError("model " + path_ + ": " + what); }
  std::int64_t integer(const Json& o, const char* key, std::int64_t lo, std::int64_t hi) const {
    const Json* f = json_field(o, key);
    if (!f) throw fail("no \"" + std::string(key) + "\"");
    try {
      return json_int(*f, key, lo, hi);
    } catch (const std::runtime_error& e) {
      throw fail(e.what());
    }
  }
  std::int64_t integer_or(const Json& o, const char* key, std::int64_t lo, std::int64_t hi, std::int64_t fallback) const {
    const Json* f = json_field(o, key);
    return f && !f->is_null() ? integer(o, key, lo, hi) : fallback;
  }
  double number(const Json& o, const char* key, double lo, double hi, double fallback) const {
    const Json* f = json_field(o, key);
    if (!f || f->is_null()) return fallback;
    if (!f->is_number()) throw fail("\"" + std::string(key) + "\" is not a number");
    const double x = f->get<double>();
    if (!(x >= lo && x <= hi))
      throw fail("\"" + std::string(key) + "\" = " + f->dump() + " is outside [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "]");
    return x;
  }
  bool flag(const Json& o, const char* key, bool fallback) const {
    const Json* f = json_field(o, key);
    if (!f || f->is_null()) return fallback;
    if (!f->is_boolean()) throw fail("\"" + std::string(key) + "\" is not true or false");
    return f->get<bool>();
  }

 private:
  const std::string& path_;
};

// A RoPE object: rope_scaling (its rope_type, or type) or one of transformers 5's
// rope_parameters (the same keys with rope_theta beside them). `what` names it in errors.
RopeScaling rope_of(const Keys& k, const Json& s, const std::string& what) {
  if (!s.is_object()) throw k.fail(what + " is not an object");
  const std::string* kind = json_string(s, "rope_type");
  if (!kind) kind = json_string(s, "type");
  if (!kind) throw k.fail(what + " has no rope_type");
  RopeScaling r;
  if (*kind == "llama3") {
    r.factor = k.number(s, "factor", 1, 1024, 0);
    r.low_freq_factor = k.number(s, "low_freq_factor", 1e-6, 1e6, 0);
    r.high_freq_factor = k.number(s, "high_freq_factor", 1e-6, 1e6, 0);
    const Json* o = json_field(s, "original_max_position_embeddings");
    if (!r.factor || !r.low_freq_factor || !r.high_freq_factor || !o)
      throw k.fail(what + " llama3 needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings");
    r.original_context = static_cast<double>(k.integer(s, "original_max_position_embeddings", 1, 1 << 24));
    if (!(r.high_freq_factor > r.low_freq_factor))
      throw k.fail(what + " llama3: high_freq_factor must be larger than low_freq_factor");
  } else if (*kind == "linear") {
    r.factor = k.number(s, "factor", 1e-3, 1e6, 0);
    r.linear = true;
    if (!r.factor) throw k.fail(what + " linear needs a factor");
  } else if (*kind != "default") {
    throw k.fail(what + " of rope_type \"" + *kind + "\" is not implemented (llama3 and linear are)");
  }
  return r;
}

// RoPE's base and scaling: rope_theta and rope_scaling, or transformers 5's rope_parameters
// (one object, or one per layer type: "full_attention" and "sliding_attention", whose base
// is the sliding layers' and which takes no scaling).
void hf_rope(const Keys& k, const Json& j, ModelConfig& c) {
  c.rope_theta = k.number(j, "rope_theta", 1, 1e12, 10000);
  if (const Json* s = json_field(j, "rope_scaling"); s && !s->is_null()) c.rope_scaling = rope_of(k, *s, "rope_scaling");
  const Json* p = json_field(j, "rope_parameters");
  if (!p || p->is_null()) return;
  const Json* full = json_field(*p, "full_attention");
  const Json& global = full ? *full : *p;
  c.rope_scaling = rope_of(k, global, full ? "rope_parameters.full_attention" : "rope_parameters");
  c.rope_theta = k.number(global, "rope_theta", 1, 1e12, c.rope_theta);
  if (const Json* local = json_field(*p, "sliding_attention")) {
    if (rope_of(k, *local, "rope_parameters.sliding_attention").factor != 0)
      throw k.fail("rope_parameters.sliding_attention: a scaling of the sliding layers' RoPE is not implemented");
    c.rope_theta_local = k.number(*local, "rope_theta", 1, 1e12, c.rope_theta_local);
  }
}

// The configuration's sliding windows, as the architecture's row takes them
// (architecture.hpp's SlidingWindow). Before hf_rope: rope_parameters may set the local base.
void hf_window(const Keys& k, const Json& j, const Architecture& arch, ModelConfig& c) {
  auto window = [&] { return k.integer_or(j, "sliding_window", 1, std::int64_t{1} << 24, 0); };
  switch (arch.window) {
    case SlidingWindow::refused:
      if (k.flag(j, "use_sliding_window", false))
        throw k.fail("use_sliding_window true: " + std::string(arch.name) +
                     "'s sliding-window layers are not implemented in the model runtime");
      return;
    case SlidingWindow::none:
    case SlidingWindow::bounds_context:  // Mistral's (and a llama config's): the context is exact up to W
      if (const std::int64_t w = window()) c.context = c.context > 0 ? std::min(c.context, w) : w;
      return;
    case SlidingWindow::every_layer:  // Phi-3's: every layer slides
      if ((c.window = window()) > 0) c.sliding.assign(static_cast<std::size_t>(c.layers), 1);
      return;
    case SlidingWindow::pattern:  // Gemma 3's: layer_types, else every layer but each pattern-th
      if ((c.window = window()) == 0) return;
      c.sliding.assign(static_cast<std::size_t>(c.layers), 0);
      if (const Json* types = json_field(j, "layer_types"); types && !types->is_null()) {
        if (!types->is_array() || types->size() != static_cast<std::size_t>(c.layers))
          throw k.fail("layer_types is not a list of one type per layer (" + std::to_string(c.layers) + ")");
        for (std::size_t l = 0; l < types->size(); ++l) {
          const Json& t = (*types)[l];
          const std::string kind = t.is_string() ? t.get<std::string>() : t.dump();
          if (kind != "sliding_attention" && kind != "full_attention")
            throw k.fail("layer_types[" + std::to_string(l) + "] = \"" + kind +
                         "\": \"sliding_attention\" and \"full_attention\" are implemented");
          c.sliding[l] = kind == "sliding_attention";
        }
      } else {
        const std::int64_t every = k.integer_or(j, "sliding_window_pattern", 1, 1 << 20, 6);
        for (std::int64_t l = 0; l < c.layers; ++l) c.sliding[static_cast<std::size_t>(l)] = (l + 1) % every != 0;
      }
      c.rope_theta_local = k.number(j, "rope_local_base_freq", 1, 1e12, 10000);
      return;
  }
}

// What the architecture's row says config.json may not change: its activation, biases,
// capped scores, partial RoPE, bidirectional attention, quantization.
void hf_refusals(const Keys& k, const Json& j, const Architecture& arch) {
  if (json_field(j, "quantization_config"))
    throw k.fail("a quantization_config (GPTQ, AWQ, ...): only bf16, fp16 and fp32 weights load; a GGUF file holds "
                 "quantized weights");
  for (const char* key : {"hidden_act", "hidden_activation"})  // (Gemma's config names it the second way)
    if (const std::string* act = json_string(j, key); act && *act != arch.hf_activation)
      throw k.fail(std::string(key) + " \"" + *act + "\": the runtime runs " + std::string(arch.name) + "'s MLP with " +
                   std::string(arch.hf_activation));
  // Biases: an architecture's q, k and v ones are its row's (qwen2: always, its config has
  // no switch); llama's attention_bias would put them on o too, which this runtime does not add.
  if (k.flag(j, "attention_bias", false))
    throw k.fail("attention_bias true: biases on q, k, v and o are not implemented (qwen2's q/k/v biases are)");
  if (k.flag(j, "mlp_bias", false)) throw k.fail("mlp_bias true: MLP biases are not implemented");
  if (const Json* s = json_field(j, "attn_logit_softcapping"); s && !s->is_null())
    throw k.fail("attn_logit_softcapping: capped attention scores are not implemented");
  if (k.flag(j, "use_bidirectional_attention", false))
    throw k.fail("use_bidirectional_attention true: the runtime's attention is causal");
  if (k.number(j, "partial_rotary_factor", 1e-3, 1, 1) != 1)
    throw k.fail("partial_rotary_factor " + json_field(j, "partial_rotary_factor")->dump() +
                 ": RoPE over part of a head is not implemented");
}

// The shape: widths, counts, heads (head_dim, else hidden_size / heads).
void hf_shape(const Keys& k, const Json& j, ModelConfig& c) {
  c.dim = k.integer(j, "hidden_size", 2, 65536);
  c.ffn = k.integer(j, "intermediate_size", 1, 1 << 20);
  c.layers = k.integer(j, "num_hidden_layers", 1, 1024);
  c.heads = k.integer(j, "num_attention_heads", 1, 1024);
  c.kv_heads = k.integer_or(j, "num_key_value_heads", 1, 1024, c.heads);
  c.vocab = k.integer(j, "vocab_size", 2, 1 << 24);
  if (c.heads % c.kv_heads != 0)
    throw k.fail("num_key_value_heads " + std::to_string(c.kv_heads) + " does not divide num_attention_heads " +
                 std::to_string(c.heads));
  if (!json_field(j, "head_dim") || json_field(j, "head_dim")->is_null()) {
    if (c.dim % c.heads != 0)
      throw k.fail("hidden_size " + std::to_string(c.dim) + " is not a multiple of num_attention_heads " +
                   std::to_string(c.heads) + " and no head_dim is given");
    c.head_dim = c.dim / c.heads;
  } else {
    c.head_dim = k.integer(j, "head_dim", 2, 256);
  }
}

}  // namespace

ModelConfig hf_config(const Json& j, const std::string& path) {
  const Keys k(path);
  if (!j.is_object()) throw k.fail("not a JSON object");
  const std::string* type = json_string(j, "model_type");
  if (!type) throw k.fail("no \"model_type\" string: not a Hugging Face model's config.json");
  const Architecture* arch = find_hf_architecture(*type);
  if (!arch)
    throw k.fail("model_type \"" + *type + "\" is not one this runtime implements (" + hf_architecture_names() + ")");
  hf_refusals(k, j, *arch);

  ModelConfig c;
  c.architecture = std::string(arch->name);
  hf_shape(k, j, c);
  c.context = k.integer_or(j, "max_position_embeddings", 1, std::int64_t{1} << 24, 0);
  c.norm_eps = static_cast<float>(k.number(j, "rms_norm_eps", 1e-12, 1e-1, 1e-6));
  c.rope_style = RopeStyle::rotate_half;
  c.tied = k.flag(j, "tie_word_embeddings", false);
  c.qkv_bias = arch->qkv_bias;
  c.qk_norm = arch->qk_norm;
  hf_window(k, j, *arch, c);
  hf_rope(k, j, c);
  if (arch->query_scalar)  // gemma: scores scaled by query_pre_attn_scalar^-1/2
    c.attention_scale = 1.0 / std::sqrt(k.number(j, "query_pre_attn_scalar", 1, 1e6, static_cast<double>(c.head_dim)));
  c.logit_softcap = k.number(j, "final_logit_softcapping", 1e-3, 1e6, 0);
  try {
    c.check();
  } catch (const ringattn::InvalidArgument& e) {
    throw k.fail(e.what());
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
