// Hugging Face model directories (Model::from_hf, infer/model/hf_config.hpp, hf_weights.hpp) on
// directories written here: the seed's tensors stored as F32, BF16 and F16, in one file or
// sharded, load into the very model from_seed builds (the same digest: configuration,
// packed bytes, norms); hostile config.json, safetensors headers and indexes are refused
// naming the file and what is wrong. The float64 PyTorch check of each architecture's
// logits is deploy/test_embedding.sh's (tools/hf_reference.py).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/half.hpp>

#include "common/json.hpp"
#include "job/load.hpp"
#include "model/model.hpp"
#include "tests/error_of.hpp"
#include "tests/model/file_opens.hpp"

namespace fs = std::filesystem;
using infer::Json;
using infer::Model;
using infer::ModelConfig;
using ringattn::DType;
using ringattn::test::error_of;

namespace {

// A safetensors file written from named tensors: F32 floats, or BF16 / F16 bit patterns.
struct Tensor {
  std::string dtype;  // "F32", "BF16", "F16" (or anything, for the hostile cases)
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// misalign: the header one byte longer than a multiple of 8, so every 2- and 4-byte tensor
// starts off its alignment.
std::string safetensors(const std::map<std::string, Tensor>& tensors, bool misalign = false) {
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';
  if (misalign) h += ' ';
  const std::uint64_t n = h.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
}

Tensor stored(const std::vector<float>& v, const std::vector<std::int64_t>& shape, DType d) {
  Tensor t{d == DType::f32 ? "F32" : d == DType::bf16 ? "BF16" : "F16", shape, {}};
  if (d == DType::f32) {
    t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    return t;
  }
  std::vector<std::uint16_t> bits(v.size());
  if (d == DType::bf16) ringattn::to_bf16(v.data(), bits.data(), static_cast<std::int64_t>(v.size()));
  else
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = ringattn::to_f16(v[i]);
  t.bytes.assign(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  return t;
}

ModelConfig small() {
  ModelConfig c;
  c.vocab = 64;
  c.dim = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.ffn = 48;
  c.tied = false;
  c.rope_theta = 10000;
  c.norm_eps = 1e-5f;
  c.context = 512;
  return c;
}

Json config_json(const ModelConfig& c) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", c.dim},
          {"intermediate_size", c.ffn}, {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
          {"num_key_value_heads", c.kv_heads}, {"head_dim", c.head_dim}, {"vocab_size", c.vocab},
          {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"max_position_embeddings", c.context},
          {"tie_word_embeddings", c.tied}, {"hidden_act", "silu"}, {"torch_dtype", "float32"}};
}

// The seed's tensors of c, by name, stored in `d`; each norm's gains less `norm_offset` (a
// Gemma checkpoint's w of (1 + w): g - 1 is exact in fp32 for g in [0.9, 1.1]).
std::map<std::string, Tensor> seeded(const ModelConfig& c, DType d, std::uint64_t seed = 5, float norm_offset = 0) {
  std::map<std::string, Tensor> out;
  const auto specs = infer::tensor_specs(c);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::vector<float> v = infer::generate_tensor(seed, static_cast<int>(i), specs[i]);
    if (specs[i].name.ends_with("norm.weight"))
      for (float& x : v) x -= norm_offset;
    out[specs[i].name] = stored(std::move(v), specs[i].shape, specs[i].shape.size() == 1 ? DType::f32 : d);
  }
  return out;
}

struct Dir {
  fs::path path;
  explicit Dir(const std::string& name)
      : path(fs::temp_directory_path() / ("ringattn-hf-" + std::to_string(::getpid()) + "-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& bytes) const {
    std::ofstream(path / file, std::ios::binary) << bytes;
  }
  std::string str() const { return path.string(); }
};

// A directory holding c's seeded tensors in one model.safetensors, with `edit` applied to
// config.json and the tensors first.
void write_model(const Dir& d, const ModelConfig& c, DType dtype, const std::function<void(Json&)>& edit_config = {},
                 const std::function<void(std::map<std::string, Tensor>&)>& edit_tensors = {}) {
  Json cfg = config_json(c);
  if (edit_config) edit_config(cfg);
  auto tensors = seeded(c, dtype);
  if (edit_tensors) edit_tensors(tensors);
  d.write("config.json", cfg.dump());
  d.write("model.safetensors", safetensors(tensors));
}

std::string load_error(const Dir& d) {
  return error_of([&] { Model::from_hf(d.str()); });
}

}  // namespace

TEST_CASE("hf: a directory of the seed's tensors loads as from_seed's model, in each stored and held dtype") {
  const ModelConfig c = small();
  for (DType stored_as : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(ringattn::to_string(stored_as));
    Dir d("same-" + std::string(ringattn::to_string(stored_as)));
    write_model(d, c, stored_as);
    const Model m = Model::from_hf(d.str());
    CHECK(m.matrices_dtype() == stored_as);  // held as stored
    // From fp32 floats rounded at load, from_seed holds the same bits (a bf16 or fp16 file's
    // tensors are those floats rounded the same way).
    CHECK(m.digest() == Model::from_seed(c, 5, stored_as).digest());
    // Held in another dtype on request: converted at load as from_seed converts.
    for (DType held : {DType::f32, DType::bf16, DType::f16})
      if (stored_as == DType::f32 || held == stored_as) {
        CAPTURE(ringattn::to_string(held));
        CHECK(Model::from_hf(d.str(), held).digest() == Model::from_seed(c, 5, held).digest());
      }
  }
}

TEST_CASE("hf: each tensor-parallel part of a directory is from_seed's part: rows and columns cut from the mapped file") {
  ModelConfig c = small();
  for (DType stored_as : {DType::f32, DType::bf16}) {
    CAPTURE(ringattn::to_string(stored_as));
    Dir d("parts-" + std::string(ringattn::to_string(stored_as)));
    write_model(d, c, stored_as);
    for (int T : {2, static_cast<int>(c.heads)})
      for (int r = 0; r < T; ++r) {
        CAPTURE(T);
        CAPTURE(r);
        const Model part = Model::from_hf(d.str(), std::nullopt, {r, T});
        CHECK(part.parts().shard.rank == r);
        CHECK(part.digest() == Model::from_seed(c, 5, stored_as, {r, T}).digest());
      }
  }
}

TEST_CASE("hf: sharded by model.safetensors.index.json, the same model as one file") {
  const ModelConfig c = small();
  const auto tensors = seeded(c, DType::bf16);
  Dir d("sharded");
  d.write("config.json", config_json(c).dump());
  std::map<std::string, Tensor> a, b;
  Json map = Json::object();
  int i = 0;
  for (const auto& [name, t] : tensors) {
    (i++ % 2 ? b : a)[name] = t;
    map[name] = i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  d.write("model-00001-of-00002.safetensors", safetensors(a));
  d.write("model-00002-of-00002.safetensors", safetensors(b));
  d.write("model.safetensors.index.json", Json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}}.dump());
  CHECK(Model::from_hf(d.str()).digest() == Model::from_seed(c, 5, DType::bf16).digest());

  // Hostile indexes: a path out of the directory, a file that does not hold the tensor,
  // a shard tensor the index does not list.
  Json bad = map;
  bad["model.norm.weight"] = "../model-00001-of-00002.safetensors";
  d.write("model.safetensors.index.json", Json{{"weight_map", bad}}.dump());
  CHECK(load_error(d).find("is not a .safetensors file name in the model's directory") != std::string::npos);
  bad = map;
  bad["model.norm.weight"] = map["model.norm.weight"] == "model-00001-of-00002.safetensors"
                                 ? "model-00002-of-00002.safetensors"
                                 : "model-00001-of-00002.safetensors";
  d.write("model.safetensors.index.json", Json{{"weight_map", bad}}.dump());
  CHECK(load_error(d).find("which does not hold it") != std::string::npos);
  bad = map;
  bad.erase("model.norm.weight");
  d.write("model.safetensors.index.json", Json{{"weight_map", bad}}.dump());
  CHECK(load_error(d).find("\"model.norm.weight\" of") != std::string::npos);
  CHECK(load_error(d).find("is not in the weight_map") != std::string::npos);
  d.write("model.safetensors.index.json", "{\"weight_map\": {}}");
  CHECK(load_error(d).find("no \"weight_map\"") != std::string::npos);
}

TEST_CASE("hf: hostile or unsupported config.json is refused naming the key") {
  const ModelConfig c = small();
  struct Case {
    std::function<void(Json&)> edit;
    const char* want;
  };
  const Case cases[] = {
      {[](Json& j) { j["model_type"] = "gpt2"; }, "model_type \"gpt2\" is not one this runtime implements"},
      {[](Json& j) { j.erase("model_type"); }, "no \"model_type\" string"},
      {[](Json& j) { j.erase("hidden_size"); }, "no \"hidden_size\""},
      {[](Json& j) { j["hidden_size"] = 32.5; }, "hidden_size must be an integer"},
      {[](Json& j) { j["num_hidden_layers"] = 0; }, "num_hidden_layers must be an integer in [1, 1024], got 0"},
      {[](Json& j) { j["vocab_size"] = "64"; }, "vocab_size must be an integer"},
      {[](Json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads 3 does not divide num_attention_heads 4"},
      {[](Json& j) { j["head_dim"] = 7; }, "--head-dim must be even"},
      {[](Json& j) { j["hidden_act"] = "gelu"; }, "hidden_act \"gelu\""},
      {[](Json& j) { j["attention_bias"] = true; }, "attention_bias true"},
      {[](Json& j) { j["mlp_bias"] = true; }, "mlp_bias true"},
      {[](Json& j) { j["rms_norm_eps"] = -1; }, "\"rms_norm_eps\" = -1 is outside"},
      {[](Json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}}; },
       "rope_scaling of rope_type \"yarn\" is not implemented"},
      {[](Json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}}; },
       "rope_scaling llama3 needs factor, low_freq_factor, high_freq_factor"},
      {[](Json& j) { j["quantization_config"] = {{"quant_method", "gptq"}}; }, "a quantization_config"},
      {[](Json& j) { j["model_type"] = "qwen2"; j["use_sliding_window"] = true; }, "use_sliding_window true"},
      {[](Json& j) { j = Json::array(); }, "not a JSON object"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.want);
    Dir d("config");
    write_model(d, c, DType::f32, k.edit);
    const std::string e = load_error(d);
    CHECK(e.find(k.want) != std::string::npos);
    CHECK(e.find("config.json") != std::string::npos);
  }
  Dir d("config-syntax");
  write_model(d, c, DType::f32);
  d.write("config.json", "{\"model_type\": \"llama\",");
  CHECK(load_error(d).find("config.json") != std::string::npos);
  fs::remove(d.path / "config.json");
  CHECK(load_error(d).find("config.json: cannot open") != std::string::npos);
}

TEST_CASE("hf: a Mistral sliding window bounds the context; llama3 rope scaling loads") {
  const ModelConfig c = small();
  Dir d("window");
  write_model(d, c, DType::f32, [](Json& j) {
    j["model_type"] = "mistral";
    j["sliding_window"] = 100;
  });
  const Model m = Model::from_hf(d.str());
  CHECK(m.config().context == 100);
  CHECK(m.config().architecture == "mistral");
  write_model(d, c, DType::f32, [](Json& j) {
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  });
  const Model s = Model::from_hf(d.str());
  CHECK(s.config().rope_scaling.factor == 8.0);
  CHECK(s.digest() != Model::from_seed(c, 5).digest());  // the scaling is part of the model
}

// Gemma 3's and Phi-3's config.json over the seed's tensors of c (c.architecture's names).
Json gemma3_json(const ModelConfig& c) {
  Json j = config_json(c);
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["model_type"] = "gemma3_text";
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["sliding_window"] = 4;
  j["layer_types"] = {"sliding_attention", "full_attention"};
  j["rope_local_base_freq"] = 10000.0;
  j["query_pre_attn_scalar"] = 16;
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
  return j;
}

TEST_CASE("hf: Gemma 3 and Phi-3 directories load as from_seed's model of their configuration") {
  ModelConfig g = small();
  g.architecture = "gemma3";
  g.qk_norm = true;
  g.tied = true;
  g.window = 4;
  g.sliding = {1, 0};
  g.rope_theta_local = 10000;
  g.attention_scale = 1.0 / 4;  // query_pre_attn_scalar 16
  Dir d("gemma3");
  d.write("config.json", gemma3_json(g).dump());
  d.write("model.safetensors", safetensors(seeded(g, DType::f32, 5, 1.0f)));  // the norms' w of (1 + w)
  const Model m = Model::from_hf(d.str());
  CHECK(m.config().architecture == "gemma3");
  CHECK(m.config().layer_window(0) == 4);
  CHECK(m.config().layer_window(1) == 0);
  CHECK(m.digest() == Model::from_seed(g, 5).digest());

  // transformers 5's rope_parameters, one object per layer type, read as the older keys.
  Json older = gemma3_json(g), newer = gemma3_json(g);
  older["rope_theta"] = 500000.0;
  older["rope_local_base_freq"] = 20000.0;
  older["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  newer.erase("rope_theta");
  newer.erase("rope_local_base_freq");
  newer["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 500000.0}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}};
  d.write("config.json", older.dump());
  const Model old_form = Model::from_hf(d.str());
  CHECK(old_form.config().rope_scaling.linear);
  CHECK(old_form.config().rope_theta_local == 20000.0);
  d.write("config.json", newer.dump());
  CHECK(Model::from_hf(d.str()).digest() == old_form.digest());
  CHECK(old_form.digest() != m.digest());
  newer["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  d.write("config.json", newer.dump());
  CHECK(load_error(d).find("rope_parameters.sliding_attention: a scaling of the sliding layers' RoPE is not implemented") !=
        std::string::npos);

  // Without layer_types: every layer but each sliding_window_pattern-th slides.
  Json j = gemma3_json(g);
  j.erase("layer_types");
  j["sliding_window_pattern"] = 2;
  d.write("config.json", j.dump());
  CHECK(Model::from_hf(d.str()).digest() == m.digest());
  struct Case {
    std::function<void(Json&)> edit;
    const char* want;
  };
  const Case refused[] = {
      {[](Json& k) { k["layer_types"] = {"sliding_attention"}; }, "layer_types is not a list of one type per layer (2)"},
      {[](Json& k) { k["layer_types"] = {"sliding_attention", "chunked_attention"}; },
       "layer_types[1] = \"chunked_attention\""},
      {[](Json& k) { k["hidden_activation"] = "silu"; }, "hidden_activation \"silu\": the runtime runs gemma3's MLP with gelu_pytorch_tanh"},
      {[](Json& k) { k["attn_logit_softcapping"] = 50.0; }, "attn_logit_softcapping"},
      {[](Json& k) { k["sliding_window"] = 0; }, "sliding_window must be an integer in [1, 16777216], got 0"},
      {[](Json& k) { k["rope_scaling"] = {{"rope_type", "linear"}}; }, "rope_scaling linear needs a factor"},
  };
  for (const Case& k : refused) {
    CAPTURE(k.want);
    Json bad = gemma3_json(g);
    k.edit(bad);
    d.write("config.json", bad.dump());
    const std::string e = load_error(d);
    CHECK(e.find(k.want) != std::string::npos);
    CHECK(e.find("config.json") != std::string::npos);
  }

  ModelConfig p = small();  // heads x head_dim = dim, as Phi-3's config has no head_dim
  p.architecture = "phi3";
  p.window = 6;
  p.sliding = {1, 1};
  Dir f("phi3");
  Json pj = config_json(p);
  pj["model_type"] = "phi3";
  pj.erase("head_dim");
  pj["sliding_window"] = 6;
  pj["partial_rotary_factor"] = 1.0;
  f.write("config.json", pj.dump());
  const auto tensors = seeded(p, DType::bf16);
  CHECK(tensors.count("model.layers.0.self_attn.qkv_proj.weight") == 1);
  CHECK(tensors.count("model.layers.1.mlp.gate_up_proj.weight") == 1);
  f.write("model.safetensors", safetensors(tensors));
  const Model ph = Model::from_hf(f.str());
  CHECK(ph.config().layer_window(1) == 6);
  CHECK(ph.digest() == Model::from_seed(p, 5, DType::bf16).digest());
  pj["partial_rotary_factor"] = 0.75;
  f.write("config.json", pj.dump());
  CHECK(load_error(f).find("partial_rotary_factor 0.75: RoPE over part of a head is not implemented") != std::string::npos);
  pj["partial_rotary_factor"] = 1.0;
  pj["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  f.write("config.json", pj.dump());
  CHECK(load_error(f).find("rope_scaling of rope_type \"longrope\" is not implemented") != std::string::npos);
}

TEST_CASE("hf: transformers 5's rope_parameters read as rope_theta and rope_scaling") {
  const ModelConfig c = small();
  Dir d("rope-parameters");
  const Json scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 64}};
  write_model(d, c, DType::f32, [&](Json& j) {
    j["rope_theta"] = 500000.0;
    j["rope_scaling"] = scaling;
  });
  const std::uint64_t older = Model::from_hf(d.str()).digest();
  write_model(d, c, DType::f32, [&](Json& j) {
    j.erase("rope_theta");
    j["rope_parameters"] = scaling;
    j["rope_parameters"]["rope_theta"] = 500000.0;
  });
  CHECK(Model::from_hf(d.str()).digest() == older);
  write_model(d, c, DType::f32, [&](Json& j) { j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  CHECK(load_error(d).find("rope_parameters of rope_type \"yarn\" is not implemented") != std::string::npos);
}

TEST_CASE("hf: hostile or mismatched tensors are refused naming the file and the tensor") {
  const ModelConfig c = small();
  Dir d("tensors");
  auto error_with = [&](const std::function<void(std::map<std::string, Tensor>&)>& edit) {
    write_model(d, c, DType::bf16, {}, edit);
    return load_error(d);
  };
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  std::string e = error_with([&](auto& t) { t.erase(q); });
  CHECK(e.find("no tensor \"" + q + "\"") != std::string::npos);
  e = error_with([&](auto& t) { t[q].shape = {16, 64}; });
  CHECK(e.find("tensor \"" + q + "\" has shape [16, 64], the model's configuration needs [32, 32]") != std::string::npos);
  e = error_with([&](auto& t) { t[q].dtype = "I8"; });
  CHECK(e.find("tensor \"" + q + "\": dtype I8: only F32, BF16 and F16 are read") != std::string::npos);
  e = error_with([&](auto& t) { t[q].bytes.resize(10); });
  CHECK(e.find("holds 10 bytes") != std::string::npos);
  e = error_with([&](auto& t) { std::memset(t[q].bytes.data() + 6, 0xFF, 2); });  // a bf16 NaN
  CHECK(e.find("tensor \"" + q + "\" holds NaN or inf") != std::string::npos);
  e = error_with([&](auto& t) { t["model.layers.2.mlp.up_proj.weight"] = t[q]; });
  CHECK(e.find("\"model.layers.2.mlp.up_proj.weight\" is not part of the model") != std::string::npos);
  CHECK(e.find("model.safetensors") != std::string::npos);
  // A header padded to an odd length puts every 2-byte tensor off its alignment.
  write_model(d, c, DType::bf16);
  d.write("model.safetensors", safetensors(seeded(c, DType::bf16), /*misalign=*/true));
  CHECK(load_error(d).find("not a multiple of 2") != std::string::npos);
  d.write("model.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  CHECK(load_error(d).find("header length 16 exceeds the file") != std::string::npos);
  fs::remove(d.path / "model.safetensors");
  CHECK(load_error(d).find("neither model.safetensors nor model.safetensors.index.json") != std::string::npos);
}

// One load reads each file of a Hugging Face directory once (issue 46): config.json (the
// configuration, the end tokens, the fingerprint), tokenizer_config.json (the tokenizer's
// decode setting, the chat template and its tokens), generation_config.json, the
// safetensors (the weights, the fingerprint) and tokenizer.json, each handed on from one
// read. Before, config.json, tokenizer_config.json and model.safetensors were opened twice.
TEST_CASE("hf: one load opens each file of the directory once") {
  ModelConfig c = small();
  c.vocab = 300;  // the byte-level tokenizer's 264 ids fit
  const Dir d("once");
  write_model(d, c, DType::f32);
  fs::copy_file(RINGATTN_SOURCE_ROOT "/tests/fuzz/corpus/tokenizer_json/tiny-byte-level.json", d.path / "tokenizer.json");
  d.write("tokenizer_config.json", R"({"clean_up_tokenization_spaces": false, "eos_token": "</s>",)"
                                   R"( "chat_template": "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"})");
  d.write("generation_config.json", R"({"eos_token_id": [7, 2]})");
  ringattn::test::FileOpens opens;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    opens.watch((d.path / f).string());
  infer::JobOptions opt;
  opt.hf = d.str();
  opt.tp = {1, 2};  // a tensor-parallel part: the fingerprint is taken too
  opt.progress = false;
  const infer::LoadedJob job = infer::load_model(opt);
  for (const auto& [file, n] : opens.counts()) CHECK_MESSAGE(n == 1, file << " opened " << n << " times");
  REQUIRE_MESSAGE(job.tokenizer != nullptr, job.tokenizer_missing);
  REQUIRE_MESSAGE(job.chat.tmpl.has_value(), job.chat.refused);
  CHECK(job.chat.render(Json::array({{{"role", "user"}, {"content", "hi"}}})) == "hi</s>");
  CHECK(opt.end_tokens == std::vector<std::int32_t>{2, 7});
  CHECK(job.fingerprint != 0);
}

TEST_CASE("hf: a safetensors dtype the table of tensor types has no row for is refused by its name, naming the file and the tensor") {
  // Safetensors' own dtypes not read here, and names the table has only for other formats
  // (GGUF's Q8_0, ringattn's bf16): each refused by name, never read as another type.
  const ModelConfig c = small();
  Dir d("dtypes");
  const std::string q = "model.layers.0.mlp.down_proj.weight";
  for (const char* dt : {"F64", "I8", "U8", "BOOL", "F8_E4M3", "Q8_0", "bf16", "f32"}) {
    CAPTURE(dt);
    write_model(d, c, DType::bf16, {}, [&](auto& t) { t[q].dtype = dt; });
    const std::string e = load_error(d);
    CAPTURE(e);
    CHECK(e.find("weights " + (d.path / "model.safetensors").string() + ": tensor \"" + q + "\": dtype " + dt +
                 ": only F32, BF16 and F16 are read") != std::string::npos);
  }
  // The same tensor in a dtype with a row (F16, half the bytes of F32) loads.
  write_model(d, c, DType::bf16, {}, [&](auto& t) { t[q].dtype = "F16"; });
  CHECK(load_error(d).empty());
}
