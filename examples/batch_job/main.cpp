// infer — a batch inference job that embeds libringattn as a user's job would: only the
// installed <ringattn/...> headers and -lringattn (pkg-config ringattn).
//
// Every rank runs this program with the same arguments; the launcher's environment says
// who it is (RingOptions::from_env). Each rank reads and checks the prompts and the
// weights itself, connects the ring, proves every rank holds the same model (agreement.hpp), prefills its rows of the packed batch, greedy-decodes
// --tokens tokens per prompt it owns, writes those results, and prints one JSON line of
// throughput on stdout. Progress goes to stderr, one line per layer and per step.
//
//   export RINGATTN_MASTER=127.0.0.1:29500 RINGATTN_TOKEN=$(openssl rand -hex 16)
//   mpirun -n 2 -x RINGATTN_MASTER -x RINGATTN_TOKEN ./infer --prompts p.jsonl --out out
#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/ring.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "../../infer/job/job.hpp"
#include "../../infer/job/load.hpp"
#include "../../infer/job/options.hpp"
#include "../../infer/job/output.hpp"

namespace {


int g_rank = -1;  // for error messages, once known

std::string who() { return g_rank < 0 ? std::string() : "rank " + std::to_string(g_rank) + ": "; }

int run(int argc, char** argv) {
  infer::JobOptions opt;
  if (!infer::parse_args(argc, argv, opt)) {
    std::fputs(infer::usage().c_str(), stdout);
    return 0;
  }
  ringattn::RingOptions ring_options = ringattn::RingOptions::from_env();
  if (opt.threads > 0) ring_options.threads = opt.threads;
  const int rank = g_rank = ring_options.rank;
  // Tensor parallelism: --tp, else the environment's group size; this rank's part by its place.
  if (opt.tp.size > 1) ring_options.group_size = opt.tp.size;

  // Inputs first (load.hpp): a bad file fails every rank before any of them waits on the
  // network. A batch holds at most max_rows tokens per group (the job checks each one's share).
  const std::int64_t max_batch_tokens = infer::place_in_ring(opt, ring_options);
  const int group = opt.tp.size;
  infer::LoadedJob job = infer::load_job(opt, max_batch_tokens);
  const infer::Model& model = job.model;
  const std::vector<infer::Prompt>& prompts = job.prompts;
  const infer::TextTokenizer* tokenizer = job.tokenizer.get();

  ringattn::Ring ring = ringattn::Ring::connect(ring_options);
  infer::agree_on_job(ring, job);
  infer::JobStats st;
  const std::vector<infer::SequenceResult> results = infer::run_batch(ring, model, prompts, opt, st);
  ring.close();
  if (!opt.out_dir.empty() && opt.tp.rank == 0)  // a group's ranks hold the same results: its first writes them
    infer::write_results(opt.out_dir, rank, prompts, results, opt, tokenizer);

  const std::int64_t prompt_tokens = infer::cu_seqlens(prompts).back();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // all threads: the kernel's and the ring's I/O
  const double cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                             1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  const double decoded = static_cast<double>(prompts.size()) * static_cast<double>(st.decode_steps);
  nlohmann::ordered_json o;
  o["bench"] = "infer";
  o["rank"] = rank;
  o["world"] = ring_options.world_size;
  o["tp"] = group;
  o["weight_bytes"] = model.weight_bytes();
  o["threads"] = ring_options.threads;
  o["prompts"] = prompts.size();
  o["prompt_tokens"] = prompt_tokens;
  o["rows"] = st.rows;
  o["generated_per_prompt"] = opt.tokens;
  o["layers"] = opt.model.layers;
  o["dim"] = opt.model.dim;
  o["heads"] = opt.model.heads;
  o["kv_heads"] = opt.model.kv_heads;
  o["head_dim"] = opt.model.head_dim;
  o["ffn"] = opt.model.ffn;
  o["rope_positions"] = opt.rope == infer::RopePositions::global ? "global" : "local";
  o["dtype"] = std::string(ringattn::to_string(opt.dtype));
  o["isa"] = std::string(ringattn::to_string(ringattn::default_isa()));
  o["matmul"] = ringattn::matmul_implementation(opt.dtype);
  o["prefill_seconds"] = st.prefill_seconds;
  o["prefill_attention_seconds"] = st.prefill_attention_seconds;
  o["prefill_tokens_per_s"] = static_cast<double>(prompt_tokens) / st.prefill_seconds;
  o["decode_steps"] = st.decode_steps;
  o["decode_seconds"] = st.decode_seconds;
  o["decode_attention_seconds"] = st.decode_attention_seconds;
  o["decode_tokens_per_s"] = st.decode_seconds > 0 ? decoded / st.decode_seconds : 0.0;
  o["cpu_seconds"] = cpu_seconds;
  std::printf("%s\n", o.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ringattn::NetworkError& e) {  // a peer died, stalled or disagreed
    std::fprintf(stderr, "infer: %sring failed: %s\n", who().c_str(), e.what());
    return 2;
  } catch (const ringattn::Error& e) {  // bad options, arguments or files
    std::fprintf(stderr, "infer: %serror: %s\n", who().c_str(), e.what());
    return 3;
  }
}
