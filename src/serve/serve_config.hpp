// ringattn serve — the daemon's configuration: a TOML file, RINGATTN_* variables (and the
// launchers' own: Slurm, Open MPI, PMI, torchrun) and flags, in rising precedence. Every
// value is checked once, and an error names where the bad value came from
// ("--threads", "RINGATTN_THREADS" or "ring.toml: threads").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ringattn/linear.hpp"
#include "ringattn/ring.hpp"
#include "../cli/args.hpp"

namespace ringattn::serve {

enum class LogFormat { text, json };

struct ServeConfig {
  RingOptions ring;                 // rank, world, peers or master, token, limits, timeouts...
  std::string control = "0.0.0.0:7700";   // where clients submit jobs and ask for status
  // HTTP /metrics and /healthz; "off": none. The default is loopback only, and a second
  // daemon on the host whose default port is taken serves on a free one (metrics_fallback).
  std::string metrics = "127.0.0.1:9464";
  bool metrics_fallback = true;     // the address was not given: another port will do
  int daemons_here = 1;             // daemons of this ring on this host, as the addresses tell
  int cores = 1;                    // the cores this process may run on
  DType wire_dtype = DType::f32;    // the dtype of jobs that do not ask for one
  // A hosted model (each daemon's own path: a llama2.c checkpoint, a Hugging Face directory or
  // a GGUF file) and its tokenizer (empty: the model's own); empty model: none.
  std::string model, tokenizer;
  std::optional<DType> weights_dtype;  // the hosted model's matrices (unset: as the checkpoint holds them)
  Activations activations = Activations::int8;  // how its block-format matrices multiply
  int tp = 1;  // tensor parallelism: groups of tp consecutive daemons each hold one tp-th of the model (ring.group_size)
  std::string api = "off";          // rank 0: the OpenAI-style endpoint's HOST:PORT
  double cache_mib = 1024;    // KV-cache memory per daemon for the hosted model's requests and sessions
  double session_ttl = 600;         // seconds an idle session keeps its rows
  std::int64_t prefill_chunk = 256; // while replies stream, a newcomer's prompt goes in chunks this long (0: whole)
  std::string api_key_file;         // its bearer token; empty: the ring's token; "none": no token (loopback only)
  double grace = 30;                // seconds a running job may finish after SIGTERM
  LogFormat log_format = LogFormat::text;
  std::string log_level;            // empty: the default (info)
  std::string config_file;          // where the file values came from, if any
  std::map<std::string, std::string> sources;  // key -> where its value came from
};

// Declares serve's options (one per configuration key, plus --config).
void declare_serve_options(cli::Args& a);

// The configuration of this daemon: defaults < TOML file (--config or RINGATTN_CONFIG) <
// environment < flags. Throws InvalidArgument naming the source of a bad or missing value.
ServeConfig load_serve_config(const cli::Args& a);

// The configuration keys, in the order of `ringattn serve --help` (for docs and tests).
const std::vector<std::string>& serve_config_keys();

}  // namespace ringattn::serve
