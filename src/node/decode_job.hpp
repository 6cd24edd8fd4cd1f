// ringattn — a `--decode K` job on one node: the prefill of its prompt rows through
// Ring::forward, kept in a KVCache, then K decode steps of the documents it owns through
// Ring::decode (src/node/job.hpp says which rows are which).
#pragma once

#include <span>

#include "ringattn/ring.hpp"
#include "job.hpp"

namespace ringattn::node {

// q, k, v: this rank's rows of the shard (in shard order); fills o and lse for all of
// them. Returns the prefill's stats with the decode calls' time, traffic and work added.
ForwardStats run_decode_job(Ring& ring, const JobSpec& job, const JobShard& shard, std::span<const float> q,
                            std::span<const float> k, std::span<const float> v, std::span<float> o, std::span<float> lse);

}  // namespace ringattn::node
