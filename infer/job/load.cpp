// infer — loading a job's model, tokenizer and prompts (load.hpp).
#include "load.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <filesystem>

#include "agreement.hpp"
#include "fingerprint.hpp"
#include "job.hpp"
#include "model_files.hpp"

namespace infer {

namespace {

std::string describe(const JobOptions& opt, const Model& m) {
  std::string s = !opt.llama2c.empty()  ? "model " + opt.llama2c + " (llama2.c)"
                  : !opt.hf.empty()      ? "model " + opt.hf + " (Hugging Face " + m.config().architecture + ")"
                  : !opt.gguf.empty()    ? "model " + opt.gguf + " (GGUF " + m.config().architecture + ")"
                  : !opt.weights.empty() ? "model " + opt.weights + " (safetensors)"
                                         : "a model drawn from --seed " + std::to_string(opt.seed);
  if (m.matrices_dtype() != ringattn::DType::f32) s += " as " + std::string(ringattn::to_string(m.matrices_dtype()));
  if (m.parts().split())
    s += ", tensor-parallel part " + std::to_string(m.parts().shard.rank) + " of " + std::to_string(m.parts().shard.size);
  return s;
}

Model read_model(const JobOptions& opt, ModelFiles& files) {
  const ringattn::DType held = opt.weights_dtype.value_or(ringattn::DType::f32);
  if (!opt.hf.empty()) return Model::from_hf(files.hf_config().config, files.hf_weights(), opt.hf, opt.weights_dtype, opt.tp);
  if (!opt.gguf.empty()) return Model::from_gguf(files.gguf(), opt.weights_dtype, opt.tp);
  if (!opt.llama2c.empty()) return Model::from_llama2c(opt.llama2c, held, opt.tp);
  if (!opt.weights.empty()) return Model::from_safetensors(opt.model, opt.weights, held, opt.tp);
  return Model::from_seed(opt.model, opt.seed, held, opt.tp);
}

// BOS, then n ids in [3, vocab) (past BOS, EOS and llama2.c's <unk>), splitmix64 from seed.
std::vector<std::int32_t> random_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  if (vocab < 4) throw ringattn::InvalidArgument("a random prompt needs a vocabulary of at least 4 tokens");
  std::vector<std::int32_t> ids{1};  // llama2.c's BOS
  std::uint64_t x = seed;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    ids.push_back(static_cast<std::int32_t>(3 + z % static_cast<std::uint64_t>(vocab - 3)));
  }
  return ids;
}

}  // namespace

std::uint64_t LoadedJob::with_text(std::uint64_t weights) const {
  return weights ^ (tokenizer ? tokenizer->digest() * 31 : 0) ^ (chat.digest * 1099511628211ull);
}

std::uint64_t LoadedJob::digest() const { return with_text(model.digest()); }

std::uint64_t LoadedJob::whole_digest() const { return with_text(fingerprint); }

LoadedJob load_model(JobOptions& opt) {
  // Each file of the model opened and parsed once, handed to all that read it; unmapped at
  // the end of the load (the model holds its own packed weights).
  ModelFiles files(opt.gguf, opt.hf, opt.tokenizer);
  LoadedJob job{read_model(opt, files), nullptr, {}, {}, {}, {}};
  job.description = describe(opt, job.model);
  job.model.set_threads(opt.threads);  // the attention kernel's budget, for the matmuls around it
  job.model.set_activations(opt.activations);
  if (opt.activations != ringattn::Activations::int8 && job.model.quantized())
    job.description += " (" + std::string(ringattn::to_string(opt.activations)) + " activations)";
  opt.model = job.model.config();
  if (opt.tp.size > 1) job.fingerprint = model_fingerprint(opt, files, opt.model);
  opt.end_tokens = end_tokens(opt, files);
  LoadedTokenizer t = load_text_tokenizer(opt, files);
  job.tokenizer = std::move(t.tokenizer);
  job.tokenizer_missing = std::move(t.missing);
  if (job.tokenizer) job.description += ", " + job.tokenizer->describe();
  job.chat = load_chat(opt, files);
  return job;
}

LoadedJob load_job(JobOptions& opt, std::int64_t max_batch_tokens) {
  LoadedJob job = load_model(opt);
  const TextTokenizer* tok = job.tokenizer.get();
  if (opt.prompt_text && !tok) throw ringattn::InvalidArgument("a prompt as text needs the model's tokenizer: " + job.tokenizer_missing);
  auto one = [&](const char* id, std::vector<std::int32_t> tokens) {
    if (tokens.empty()) throw ringattn::InvalidArgument("--prompt encodes to no tokens (an empty text, and the tokenizer adds no BOS)");
    job.prompts.emplace_back();
    job.prompts.back().id = id;
    job.prompts.back().tokens = std::move(tokens);
  };
  if (opt.random_prompt > 0) {
    // Bounded before a token is drawn: by the model's context, and by the batch.
    const std::int64_t most = opt.model.context > 0 ? std::min(opt.model.context, max_batch_tokens) : max_batch_tokens;
    if (opt.random_prompt > most)
      throw ringattn::InvalidArgument("--random-prompt " + std::to_string(opt.random_prompt) + " is longer than " +
                                      (opt.model.context > 0 && opt.model.context <= max_batch_tokens
                                           ? "the model's trained context of " + std::to_string(opt.model.context) + " positions"
                                           : "the batch's " + std::to_string(max_batch_tokens) + " tokens"));
    one("\"random\"", random_tokens(opt.random_prompt, opt.model.vocab, opt.seed));
  }
  else if (opt.prompt_text && opt.chat) {  // one user message (after a system one) in the model's chat template
    Json messages = Json::array();
    if (opt.system) messages.push_back({{"role", "system"}, {"content", *opt.system}});
    messages.push_back({{"role", "user"}, {"content", *opt.prompt_text}});
    std::string text;
    try {
      text = job.chat.render(messages);
    } catch (const std::runtime_error& e) {
      throw ringattn::InvalidArgument(std::string("--chat: ") + e.what());
    }
    one("\"prompt\"", tok->encode(text, false));  // the template writes BOS itself
  } else if (opt.prompt_text)
    one("\"prompt\"", tok->encode(*opt.prompt_text, true));
  else
    job.prompts = read_prompts(opt.prompts, opt.model.vocab, max_batch_tokens, tok, job.tokenizer_missing, &job.chat);
  check_context(job.prompts, opt);
  return job;
}

std::int64_t place_in_ring(JobOptions& opt, const ringattn::RingOptions& ring) {
  const int group = std::max(1, ring.group_size);
  opt.tp = {ring.rank % group, group};
  return ring.limits.max_rows * (ring.world_size / group);
}

void agree_on_job(ringattn::Ring& ring, const LoadedJob& job) {
  const int parts = job.model.parts().shard.size;
  // The part's digest is a pass over every weight it holds: only where it is compared.
  agree_on_parts(ring, job.whole_digest(), ring.world_size() > parts ? job.digest() : 0, job.description, parts);
}

void set_model_path(JobOptions& o, const std::string& path, const std::string& flag) {
  if (std::filesystem::is_directory(path)) o.hf = path;
  else if (path.ends_with(".gguf")) o.gguf = path;
  else if (path.ends_with(".safetensors"))
    throw ringattn::InvalidArgument(flag + " " + path + ": a bare safetensors file does not say the model's shape; give its "
                                    "Hugging Face directory (config.json beside it), a .gguf file or a llama2.c checkpoint");
  else o.llama2c = path;
}

}  // namespace infer
