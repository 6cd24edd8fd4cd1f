// infer — the ring's side of a batch (job.cpp): heads padded to the kernels' dims, where a
// batch runs in a tensor-parallel mesh, a model part's group collectives, and moving the
// prompts' last hidden rows to a decode rank.
#pragma once

#include <ringattn/block_attention.hpp>
#include <ringattn/error.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/packing.hpp>
#include <ringattn/ring.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "../model/model.hpp"
#include "job.hpp"

namespace infer {

// The ring's kernels take the head dims in ringattn::kSupportedHeadDims (multiples of 16
// from 32). A model with another (stories260K: 8) runs each head zero-padded to the next
// supported one: zero lanes change neither q·k nor p·v, and the scale stays 1/sqrt(d), so
// attention is exact; it costs padded/d times attention's bytes and FLOPs.
struct HeadPadding {
  std::int64_t d = 0, padded = 0;

  explicit HeadPadding(std::int64_t head_dim) : d(head_dim) {
    const auto* s = std::lower_bound(std::begin(ringattn::kSupportedHeadDims), std::end(ringattn::kSupportedHeadDims), head_dim);
    if (s == std::end(ringattn::kSupportedHeadDims))
      throw ringattn::InvalidArgument("head_dim " + std::to_string(head_dim) + " is above the ring's largest");
    padded = *s;  // the smallest supported one that holds head_dim
  }
  bool on() const { return padded != d; }
  // in [n, d] -> out [n, padded] (n = rows * heads), zeros after each head's d values.
  const std::vector<float>& pad(const std::vector<float>& in, std::vector<float>& out) const {
    if (!on()) return in;
    const std::size_t n = in.size() / static_cast<std::size_t>(d);
    out.assign(n * static_cast<std::size_t>(padded), 0.0f);
    for (std::size_t i = 0; i < n; ++i)
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(i * d), d, out.begin() + static_cast<std::ptrdiff_t>(i * padded));
    return out;
  }
  // in [n, padded] -> out [n, d].
  void unpad(const std::vector<float>& in, std::vector<float>& out) const {
    if (!on()) return;
    const std::size_t n = in.size() / static_cast<std::size_t>(padded);
    out.resize(n * static_cast<std::size_t>(d));
    for (std::size_t i = 0; i < n; ++i)
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(i * padded), d, out.begin() + static_cast<std::ptrdiff_t>(i * d));
  }
};

// One attention call's buffers at the ring's head dim: q, k, v padded, o as it comes.
struct PaddedCall {
  std::vector<float> q, k, v, o;
};

// Where the batch runs: the whole ring, or (a tensor-parallel model) the ring across the
// mesh's groups, each group one rank of the batch's plan and every rank of it alike.
struct Place {
  ringattn::Scope scope;
  int rank, world;   // in the scope
  int group_size;    // ranks per group (1: no mesh)
  int group_rank;    // this rank's place in its group
  // The ring's rank of the scope's rank r (the one at this rank's place in r's group).
  int ring_rank(int r) const { return r * group_size + group_rank; }
};

// This rank's place for `model` (its part's group checked against the ring's groups).
Place place_of(ringattn::Ring& ring, const Model& model);

// A tensor-parallel model's group: the ring's collectives in its group scope.
class RingGroup : public TpGroup {
 public:
  explicit RingGroup(ringattn::Ring& ring) : ring_(ring) {}
  void sum(std::span<float> data) override {
    if (!data.empty()) ring_.all_reduce(data, ringattn::Scope::group);
  }
  void gather(std::span<float> data, std::span<const std::size_t> counts) override {
    ring_.all_gather(data, counts, ringattn::Scope::group);
  }

 private:
  ringattn::Ring& ring_;
};

// After the prefill: every prompt's last hidden row goes to rank `to` (of the place's
// scope), which then owns every prompt (in prompt order); the others own none. Each holder
// sends its rows in one message, in its row order (= prompt order); `to` knows from the
// shards what comes from whom.
void move_last_rows(ringattn::Ring& ring, const Place& at, int to, const std::vector<ringattn::PackedShard>& shards,
                    const std::vector<std::int64_t>& cu, std::int64_t dim, std::vector<SequenceResult>& owned,
                    std::vector<float>& last_h);

// After the prefill: the follow-ups' last hidden rows (follow-up f's on rank last[f]) to
// rank `to`. `mine`: this rank's, in follow-up order. Returns, on `to`, every follow-up's
// row in order; on the others nothing. Each holder sends its rows in one message.
std::vector<float> gather_follow_rows(ringattn::Ring& ring, const Place& at, int to, const std::vector<int>& last, std::int64_t dim,
                                      const std::vector<float>& mine);

}  // namespace infer
