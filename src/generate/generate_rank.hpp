// ringattn generate — one rank's part: load the model, tokenizer and prompts (each rank
// from its own files: infer/job/load.hpp), join the ring, prove every rank holds the same
// model, prefill the packed prompts through Ring::forward and decode on the stationary KV
// shards through Ring::decode (infer/job/job.hpp). Each token of a prompt this rank owns goes
// to `sink` the moment it is chosen.
#pragma once

#include <functional>

#include <ringattn/ring.hpp>

#include "../../infer/job/options.hpp"
#include "generate_output.hpp"

namespace ringattn::generate {

using TokenSink = std::function<void(const TokenEvent&)>;

// Throws ringattn::Error (files, options, the ring) naming what failed. `heartbeat`: ALIVE
// lines to the launcher that started this rank (node/heartbeat.hpp) while the ring is up.
RankFigures run_rank(infer::JobOptions job, const RingOptions& ring_options, const TokenSink& sink, bool heartbeat = false);

}  // namespace ringattn::generate
