// infer — parsing the command line.
#include "options.hpp"

#include "option_number.hpp"

#include <ringattn/error.hpp>

#include <string_view>

namespace infer {

const char* const kUsage = R"(usage: infer --prompts FILE [options]
Greedy batch inference of a small Llama-style decoder over a ring of processes (rank,
world size and rendezvous from the environment: RINGATTN_RANK/WORLD_SIZE/MASTER/TOKEN,
or mpirun's with RINGATTN_MASTER).
  --prompts FILE          JSON lines {"id": ..., "tokens": [ids]}, {"id": ..., "text": "..."}
                          or {"id": ..., "messages": [...]} (the model's chat template)
  --prompt TEXT           one prompt as text instead (needs a tokenizer): BOS, then its ids
  --llama2c FILE          a llama2.c checkpoint (version 0, float32, e.g. stories260K.bin):
                          the weights and the shape from its header (no --weights, no shape flags)
  --hf DIR                a Hugging Face model directory (config.json of a llama, mistral, qwen2
                          or qwen3 model; model.safetensors or its sharded index; F32, BF16,
                          F16): the shape from config.json (no --weights, no shape flags)
  --gguf FILE             a GGUF file (llama, qwen2, qwen3; F32, F16, BF16 tensors): the shape
                          from its metadata (no --weights, no shape flags)
  --tokenizer FILE        the model's tokenizer: a tokenizer.json, or llama2.c's tokenizer.bin
                          (default: the --hf directory's tokenizer.json, the --gguf file's
                          vocabulary); for --prompt and "text" in each result
  --tokens K              tokens generated per prompt (default 4)
  --temperature T         0 (default): greedy; above 0: llama2.c's sampler, logits / T
  --top-p P               nucleus sampling in (0, 1) (default 0.9), else every token
  --sample-seed S         prompt i's sampler starts from S + i (default 1): a run is repeatable,
                          and the same at every P
  --out DIR               write DIR/rank-R.jsonl: each owned prompt's tokens and logits
  --weights FILE          safetensors (F32, Hugging Face Llama names), else --seed
  --seed S                weights drawn from S (default 1; identical on every machine)
  --vocab N --dim N --layers N --heads N --kv-heads N --head-dim N --ffn N
                          the model (default 256, 128, 2, 4, 2, 32, 256)
  --untied                a separate output head (lm_head.weight)
  --rope-positions global|local
                          global (default): RoPE at each token's place in its prompt;
                          local: at the rank's row index (the positions trap, for tests)
  --threads N             kernel threads per process (default RINGATTN_THREADS, else all)
  --tp T                  tensor parallelism: the ring's groups of T consecutive ranks each
                          hold one T-th of every layer (default RINGATTN_GROUP_SIZE, else 1)
  --dtype fp32|bf16       attention's K/V on the wire and in the KV cache (default fp32)
  --weights-dtype fp32|bf16|fp16
                          the model's matrices as held and multiplied (default: as the
                          checkpoint holds them, fp32 for a seed and llama2.c; bf16:
                          rounded at load, half the memory; each matmul's
                          input rows rounded to bf16 too, sums fp32; fp16: rounded at
                          load, half the memory, widened in registers, inputs fp32)
  --layout L              balanced (default: whole prompts, long ones zigzag-cut), or the packed
                          batch cut as one sequence: contiguous, zigzag or striped
)";

namespace {

// Every number goes through the one grammar (option_number.hpp): range-checked as a 64-bit
// value before anything narrows it.
float real(std::string_view flag, std::string_view text, double lo, double hi) {
  return static_cast<float>(parse_real_in(text, flag, lo, hi));
}

}  // namespace

bool parse_args(int argc, char** argv, JobOptions& o) {
  std::string shape_flag;  // the first of --vocab ... --untied given, if any
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") return false;
    if (flag == "--untied") {
      o.model.tied = false;
      if (shape_flag.empty()) shape_flag = "--untied";
      continue;
    }
    if (i + 1 >= argc) throw ringattn::InvalidArgument(std::string(flag) + " needs a value (see --help)");
    const std::string_view v = argv[++i];
    for (const char* shape : {"--vocab", "--dim", "--layers", "--heads", "--kv-heads", "--head-dim", "--ffn"})
      if (flag == shape && shape_flag.empty()) shape_flag = shape;
    ModelConfig& m = o.model;
    if (flag == "--prompts") o.prompts = v;
    else if (flag == "--prompt") o.prompt_text = std::string(v);
    else if (flag == "--temperature") o.temperature = real(flag, v, 0, 100);
    else if (flag == "--top-p") o.top_p = real(flag, v, 0, 1);
    else if (flag == "--sample-seed") o.sample_seed = parse_integer_as<std::uint64_t>(v, flag, 0, INT64_MAX);
    else if (flag == "--llama2c") o.llama2c = v;
    else if (flag == "--hf") o.hf = v;
    else if (flag == "--gguf") o.gguf = v;
    else if (flag == "--tokenizer") o.tokenizer = v;
    else if (flag == "--out") o.out_dir = v;
    else if (flag == "--weights") o.weights = v;
    else if (flag == "--tokens") o.tokens = parse_integer_as<int>(v, flag, 1, 1 << 16);
    else if (flag == "--seed") o.seed = parse_integer_as<std::uint64_t>(v, flag, 0, INT64_MAX);
    else if (flag == "--threads") o.threads = parse_integer_as<int>(v, flag, 1, 1024);
    else if (flag == "--tp") o.tp.size = parse_integer_as<int>(v, flag, 1, 1024);
    else if (flag == "--vocab") m.vocab = parse_integer_in(v, flag, 2, 1 << 24);
    else if (flag == "--dim") m.dim = parse_integer_in(v, flag, 2, 65536);
    else if (flag == "--layers") m.layers = parse_integer_in(v, flag, 1, 1024);
    else if (flag == "--heads") m.heads = parse_integer_in(v, flag, 1, 1024);
    else if (flag == "--kv-heads") m.kv_heads = parse_integer_in(v, flag, 1, 1024);
    else if (flag == "--head-dim") m.head_dim = parse_integer_in(v, flag, 2, 256);
    else if (flag == "--ffn") m.ffn = parse_integer_in(v, flag, 1, 1 << 20);
    else if (flag == "--dtype") o.dtype = ringattn::parse_dtype(v);
    else if (flag == "--weights-dtype") o.weights_dtype = ringattn::parse_weights_dtype(v);
    else if (flag == "--layout") o.layout = v == "balanced" ? std::nullopt : std::optional(ringattn::parse_layout(v));
    else if (flag == "--rope-positions") {
      if (v == "global") o.rope = RopePositions::global;
      else if (v == "local") o.rope = RopePositions::local;
      else throw ringattn::InvalidArgument("--rope-positions takes global or local, got '" + std::string(v) + "'");
    } else {
      throw ringattn::InvalidArgument("unknown flag " + std::string(flag) + " (see --help)");
    }
  }
  if (o.prompts.empty() == !o.prompt_text.has_value())
    throw ringattn::InvalidArgument("give one of --prompts FILE and --prompt TEXT (see --help)");
  if (o.prompt_text && o.tokenizer.empty() && o.hf.empty() && o.gguf.empty())
    throw ringattn::InvalidArgument("--prompt TEXT needs --tokenizer FILE to turn it into token ids");
  if (!o.hf.empty() || !o.gguf.empty()) {
    const char* which = o.hf.empty() ? "--gguf" : "--hf";
    if (!o.weights.empty() + !o.llama2c.empty() + !o.hf.empty() + !o.gguf.empty() > 1)
      throw ringattn::InvalidArgument(std::string(which) + " with another model (--weights, --llama2c, --hf, --gguf): give one");
    if (!shape_flag.empty())
      throw ringattn::InvalidArgument(shape_flag + " with " + which + ": the checkpoint gives the model's shape");
    return true;  // checked when the checkpoint is read
  }
  if (!o.llama2c.empty()) {
    if (!o.weights.empty()) throw ringattn::InvalidArgument("--llama2c and --weights are two models: give one");
    if (!shape_flag.empty())
      throw ringattn::InvalidArgument(shape_flag + " with --llama2c: the checkpoint's header gives the model's shape");
    return true;  // checked when the header is read
  }
  o.model.check();
  return true;
}

}  // namespace infer
