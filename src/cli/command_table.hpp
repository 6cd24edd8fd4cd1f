// The table of subcommands. Each module declares its entry function here and adds one
// row; keep rows in the order `ringattn --help` should list them.
#pragma once

#include "commands.hpp"

namespace ringattn::cli {

int version_main(const std::vector<std::string>& args);
int demo_main(const std::vector<std::string>& args);
int bench_kernel_main(const std::vector<std::string>& args);
int bench_linear_main(const std::vector<std::string>& args);
int bench_transport_main(const std::vector<std::string>& args);
int bench_ring_main(const std::vector<std::string>& args);
int bench_overlap_main(const std::vector<std::string>& args);
int bench_api_main(const std::vector<std::string>& args);
int bench_packed_main(const std::vector<std::string>& args);
int bench_decode_main(const std::vector<std::string>& args);
int plan_main(const std::vector<std::string>& args);
int run_main(const std::vector<std::string>& args);
int node_main(const std::vector<std::string>& args);
int verify_main(const std::vector<std::string>& args);
int serve_main(const std::vector<std::string>& args);
int submit_main(const std::vector<std::string>& args);
int status_main(const std::vector<std::string>& args);
int generate_main(const std::vector<std::string>& args);


inline constexpr Command kCommands[] = {
    {"generate", "text from a model on a ring of P processes, printed as it comes (llama2.c checkpoints)", generate_main},
    {"run", "exact attention on a ring of P processes: .npy in, O and lse out", run_main},
    {"verify", "generate inputs, run the ring, check against dense float64 attention", verify_main},
    {"node", "one ring member (started by run, or by hand/systemd/Slurm on a rack)", node_main},
    {"serve", "a ring-node daemon: keeps the ring up between jobs, metrics and /healthz (systemd, Slurm, k8s)", serve_main},
    {"submit", "send a job to the daemons: .npy in, O and lse out, with progress", submit_main},
    {"status", "every daemon's version, ISA, threads, state, uptime and last job", status_main},
    {"demo", "single-process kernel check against dense float64 attention", demo_main},
    {"plan", "cost model: memory, compute vs transfer, b* for overlap", plan_main},
    {"bench kernel", "block-attention kernel vs oneDNN roofline and naive (JSON lines)", bench_kernel_main},
    {"bench linear", "the model's weight matmul vs oneDNN's matmul and a read of the weights (JSON lines)", bench_linear_main},
    {"bench transport", "K/V block stream between two transports vs iperf3 (JSON lines)", bench_transport_main},
    {"bench ring", "ring forward on P processes vs one process with as many threads (JSON lines)", bench_ring_main},
    {"bench overlap", "ring step vs block size: compute, transfer, overlap, crossover b* (CSV, JSON, SVG)", bench_overlap_main},
    {"bench api", "the Ring as a library: per-call overhead on warm connections, 32 layers (JSON lines)", bench_api_main},
    {"bench packed", "packed batch of documents: work balance per rank and kernel speed vs one sequence (JSON lines)", bench_packed_main},
    {"bench decode", "decode on stationary KV shards: latency vs streaming the cache, bytes per token vs rotating it (JSON lines)", bench_decode_main},
    {"version", "print the version", version_main},
};

}  // namespace ringattn::cli
