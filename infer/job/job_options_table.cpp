// infer — the job options, once each (job_options_table.hpp). Where the programs spelled an
// option differently before this table (the batch job's --tokens and --sample-seed are
// generate's --max-tokens and --seed; serve's dtype is wire_dtype) each keeps its spelling;
// the grammar, the bounds and the errors are the option's. Bounds are the widest any program
// had (--threads 0..4096 and --tp 1..4096 as serve's, --tokens up to 2^20 as generate's).
#include "job_options_table.hpp"

#include <ringattn/error.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/types.hpp>

#include <limits>
#include <stdexcept>
#include <utility>

#include "load.hpp"

namespace infer {

namespace {

using P = OptionKind;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// A whole number into its field: the option's bounds must fit the field (a table error, not a user's).
template <class T>
T narrow(const OptionValue& v) {
  if (!std::in_range<T>(v.whole)) throw std::logic_error("job option " + v.source + ": its bounds exceed its field");
  return static_cast<T>(v.whole);
}

// The spellings of an option all programs taking it spell alike.
constexpr Spelling as(const char* flag, const char* def = nullptr, const char* note = nullptr) { return {flag, def, note, false}; }
constexpr Spelling kNot{};

constexpr JobOption kOptions[] = {
    {.name = "model", .value = "PATH",
     .help = "the model, each rank's own copy of the same: a Hugging Face directory ({hf-architectures}; "
             "config.json, model.safetensors or its sharded index; F32, BF16, F16), a .gguf file ({gguf-architectures}; "
             "F32, F16, BF16, Q8_0, Q4_K, Q6_K) or a llama2.c checkpoint (version 0, float32: stories260K.bin)",
     .kind = P::text, .env = "RINGATTN_MODEL",
     .in = {kNot, as("model", nullptr, "or seed:S: weights drawn from S in the shape --vocab ... --ffn give"), as("model")},
     .store = [](JobOptions& o, const OptionValue& v) { set_model_path(o, v.text, v.source); }},
    {.name = "llama2c", .value = "FILE",
     .help = "a llama2.c checkpoint (version 0, float32, e.g. stories260K.bin): the weights and the shape from its "
             "header (no --weights, no shape flags)",
     .kind = P::text, .in = {as("llama2c"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.llama2c = v.text; }},
    {.name = "hf", .value = "DIR",
     .help = "a Hugging Face model directory (config.json of a {hf-architectures} model; "
             "model.safetensors or its sharded index; F32, BF16, F16): the shape from config.json (no --weights, "
             "no shape flags)",
     .kind = P::text, .in = {as("hf"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.hf = v.text; }},
    {.name = "gguf", .value = "FILE",
     .help = "a GGUF file ({gguf-architectures}; F32, F16, BF16, Q8_0, Q4_K, Q6_K tensors): the shape from its "
             "metadata (no --weights, no shape flags)",
     .kind = P::text, .in = {as("gguf"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.gguf = v.text; }},
    {.name = "weights", .value = "FILE",
     .help = "safetensors (F32, Hugging Face Llama names) in the shape the flags give; else weights from --seed",
     .kind = P::text, .in = {as("weights"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.weights = v.text; }},
    {.name = "seed", .value = "S", .help = "weights drawn from S (identical on every machine)",
     .kind = P::whole, .lo = 0, .hi = kInt64Max, .in = {as("seed", "1"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.seed = narrow<std::uint64_t>(v); }},
    {.name = "tokenizer", .value = "FILE",
     .help = "the model's tokenizer: a tokenizer.json or llama2.c's tokenizer.bin (default: the Hugging Face "
             "directory's tokenizer.json, the GGUF file's vocabulary): prompts as text, and the text of what is generated",
     .kind = P::text, .env = "RINGATTN_TOKENIZER", .in = {as("tokenizer"), as("tokenizer"), as("tokenizer")},
     .store = [](JobOptions& o, const OptionValue& v) { o.tokenizer = v.text; }},
    {.name = "prompts", .value = "FILE",
     .help = "JSON lines {\"id\": ..., \"tokens\": [ids]}, {\"id\": ..., \"text\": \"...\"} or {\"id\": ..., "
             "\"messages\": [...]} (the model's chat template), packed into one batch",
     .kind = P::text, .in = {as("prompts"), as("prompts"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.prompts = v.text; }},
    {.name = "prompt", .value = "TEXT",
     .help = "one prompt as text (needs the model's tokenizer): its opening (BOS), then its tokens",
     .kind = P::text, .in = {as("prompt"), as("prompt"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.prompt_text = v.text; }},
    {.name = "chat", .value = "",
     .help = "--prompt is a user's message: the prompt is the model's chat template of it (tokenizer_config.json, "
             "chat_template.jinja, GGUF tokenizer.chat_template), the assistant's turn opened",
     .kind = P::flag, .in = {kNot, as("chat"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.chat = v.whole != 0; }},
    {.name = "system", .value = "TEXT", .help = "with --chat: a system message before the user's",
     .kind = P::text, .in = {kNot, as("system"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.system = v.text; }},
    {.name = "random_prompt", .value = "N", .help = "one prompt of N token ids drawn from the model's seed (benchmarks)",
     .kind = P::whole, .lo = 1, .hi = std::numeric_limits<std::int32_t>::max(), .in = {kNot, as("random-prompt"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.random_prompt = v.whole; }},
    {.name = "tokens", .value = "N", .help = "tokens generated per prompt",
     .kind = P::whole, .lo = 1, .hi = 1 << 20,
     .in = {as("tokens", "4"), as("max-tokens", "256", "a text ends earlier at the model's end token"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.tokens = narrow<int>(v); }},
    {.name = "temperature", .value = "T", .help = "0: greedy; above 0: llama2.c's sampler, from the logits / T",
     .kind = P::real, .real_lo = 0, .real_hi = 100, .in = {as("temperature", "0"), as("temperature", "0"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.temperature = static_cast<float>(v.real); }},
    {.name = "top_p", .value = "P", .help = "nucleus sampling's mass, in (0, 1); 0 or 1: every token",
     .kind = P::real, .real_lo = 0, .real_hi = 1, .in = {as("top-p", "0.9"), as("top-p", "0.9"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.top_p = static_cast<float>(v.real); }},
    {.name = "sample_seed", .value = "S",
     .help = "the sampler's seed: prompt i's starts from S + i, so a run is repeatable, and the same at every P",
     .kind = P::whole, .lo = 0, .hi = kInt64Max, .in = {as("sample-seed", "1"), as("seed", "1"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.sample_seed = narrow<std::uint64_t>(v); }},
    {.name = "out", .value = "DIR", .help = "write DIR/rank-R.jsonl: each owned prompt's tokens and logits",
     .kind = P::text, .in = {as("out"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.out_dir = v.text; }},
    {.name = "threads", .value = "N", .help = "kernel threads per rank; 0: all cores",
     .kind = P::whole, .lo = 0, .hi = ringattn::kMaxThreads, .env = "RINGATTN_THREADS",
     .in = {as("threads", nullptr, "default RINGATTN_THREADS, else all cores"),
            as("threads", nullptr, "default: the cores / P, at least 1"),
            as("threads", nullptr, "default: this host's cores / the ring's daemons on it, as --peers or a loopback --master tell")},
     .store = [](JobOptions& o, const OptionValue& v) { o.threads = narrow<int>(v); }},
    {.name = "tp", .value = "T",
     .help = "tensor parallelism: groups of T consecutive ranks each hold one T-th of every layer (Megatron's split: "
             "heads, MLP units, vocabulary) and the ring runs across the groups; T divides the ranks",
     .kind = P::whole, .lo = 1, .hi = 4096, .env = "RINGATTN_TP",
     .in = {as("tp", nullptr, "default RINGATTN_GROUP_SIZE, else 1"), as("tp", "1"), as("tp", "1", "needs the model")},
     .store = [](JobOptions& o, const OptionValue& v) { o.tp.size = narrow<int>(v); }},
    {.name = "dtype", .value = "DTYPE", .help = "attention's K/V on the wire and in the KV cache",
     .kind = P::word, .choices = "fp32 or bf16", .env = "RINGATTN_WIRE_DTYPE",
     .in = {as("dtype", "fp32"), as("dtype", "fp32"), as("wire-dtype", "fp32", "of jobs that do not ask for one")},
     .store = [](JobOptions& o, const OptionValue& v) { o.dtype = ringattn::parse_dtype(v.text); }},
    {.name = "weights_dtype", .value = "DTYPE",
     .help = "the model's matrices as held and multiplied, rounded at load, every rank the same (bf16 and fp16 halve "
             "the memory and the bytes a decode step reads; sums stay fp32)",
     .kind = P::word, .choices = "fp32, bf16, fp16 or q8_0", .env = "RINGATTN_WEIGHTS_DTYPE",
     .in = {as("weights-dtype", nullptr, "default: as the checkpoint holds them, fp32 for a seed and llama2.c"),
            as("weights-dtype", nullptr, "default: as the checkpoint holds them, fp32 for llama2.c and seed:S"),
            as("weights-dtype", nullptr, "default: as the checkpoint holds them; needs the model")},
     .store = [](JobOptions& o, const OptionValue& v) { o.weights_dtype = ringattn::parse_weights_dtype(v.text); }},
    {.name = "activations", .value = "A",
     .help = "how block-format matrices (GGUF Q8_0, Q4_K, Q6_K) multiply: int8 quantizes each row's activations per "
             "block and sums in integers (fast, within ~1e-2 relative); fp32 keeps them, for results equal to the "
             "dequantized weights'",
     .kind = P::word, .choices = "int8 or fp32", .env = "RINGATTN_ACTIVATIONS",
     .in = {as("activations", "int8"), as("activations", "int8"), as("activations", "int8", "needs the model")},
     .store = [](JobOptions& o, const OptionValue& v) { o.activations = ringattn::parse_activations(v.text); }},
    {.name = "layout", .value = "L",
     .help = "how the batch is cut over the ranks (balanced: whole prompts, long ones cut zigzag; the others cut "
             "the packed batch as one sequence)",
     .kind = P::word, .choices = "balanced, contiguous, zigzag or striped",
     .in = {as("layout", "balanced"), as("layout", "balanced"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) {
       o.layout = v.text == "balanced" ? std::nullopt : std::optional(ringattn::parse_layout(v.text));
     }},
    {.name = "rope_positions", .value = "global|local",
     .help = "global: RoPE at each token's place in its prompt; local: at the rank's row index (the positions trap, "
             "for the test that must catch it)",
     .kind = P::word, .choices = "global or local",
     .in = {as("rope-positions", "global"), Spelling{"rope-positions", "global", nullptr, true}, kNot},
     .store = [](JobOptions& o, const OptionValue& v) {
       if (v.text == "global") o.rope = RopePositions::global;
       else if (v.text == "local") o.rope = RopePositions::local;
       else throw ringattn::InvalidArgument("rope positions: expected global or local");
     }},
    // The model's sizes: a seed's model (infer's --seed or --weights, generate's seed:S).
    {.name = "vocab", .value = "N", .help = "the model's vocabulary", .kind = P::whole, .lo = 2, .hi = 1 << 24,
     .shape = true, .in = {as("vocab", "256"), as("vocab", "512", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.vocab = v.whole; }},
    {.name = "dim", .value = "N", .help = "the model's width", .kind = P::whole, .lo = 2, .hi = 65536,
     .shape = true, .in = {as("dim", "128"), as("dim", "4096", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.dim = v.whole; }},
    {.name = "layers", .value = "N", .help = "the model's layers", .kind = P::whole, .lo = 1, .hi = 1024,
     .shape = true, .in = {as("layers", "2"), as("layers", "2", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.layers = v.whole; }},
    {.name = "heads", .value = "N", .help = "the model's query heads", .kind = P::whole, .lo = 1, .hi = 1024,
     .shape = true, .in = {as("heads", "4"), as("heads", "32", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.heads = v.whole; }},
    {.name = "kv_heads", .value = "N", .help = "the model's key/value heads", .kind = P::whole, .lo = 1, .hi = 1024,
     .shape = true, .in = {as("kv-heads", "2"), as("kv-heads", "8", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.kv_heads = v.whole; }},
    {.name = "head_dim", .value = "N", .help = "the model's head dimension", .kind = P::whole, .lo = 2, .hi = 256,
     .shape = true, .in = {as("head-dim", "32"), as("head-dim", "128", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.head_dim = v.whole; }},
    {.name = "ffn", .value = "N", .help = "the model's MLP width", .kind = P::whole, .lo = 1, .hi = 1 << 20,
     .shape = true, .in = {as("ffn", "256"), as("ffn", "1024", "seed:S"), kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.ffn = v.whole; }},
    {.name = "untied", .value = "", .help = "a separate output head (lm_head.weight), not the embedding",
     .kind = P::flag, .shape = true, .in = {as("untied"), kNot, kNot},
     .store = [](JobOptions& o, const OptionValue& v) { o.model.tied = v.whole == 0; }},
};

}  // namespace

std::span<const JobOption> job_options() { return kOptions; }

const JobOption* find_job_option(Program p, std::string_view flag) {
  for (const JobOption& o : kOptions)
    if (o.taken_by(p) && flag == o.spelling(p).flag) return &o;
  return nullptr;
}

}  // namespace infer
