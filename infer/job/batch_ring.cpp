// infer — the ring's side of a batch (batch_ring.hpp).
#include "batch_ring.hpp"

#include <ringattn/error.hpp>
#include <ringattn/packing.hpp>

#include <algorithm>

namespace infer {

namespace {

constexpr std::uint32_t kLastRows = 0x4C48;  // a holder's last hidden rows, to the decode rank
constexpr std::uint32_t kFollowRows = 0x4C46;  // a follow-up's last hidden rows, to the decode rank

}  // namespace

Place place_of(ringattn::Ring& ring, const Model& model) {
  const TpParts& tp = model.parts();
  if (!tp.split()) return {ringattn::Scope::ring, ring.rank(), ring.world_size(), 1, 0};
  const int T = ring.scope_size(ringattn::Scope::group), t = ring.scope_rank(ringattn::Scope::group);
  if (T != tp.shard.size || t != tp.shard.rank)
    throw ringattn::InvalidArgument("rank " + std::to_string(ring.rank()) + " holds tensor-parallel part " +
                                    std::to_string(tp.shard.rank) + " of " + std::to_string(tp.shard.size) +
                                    " of the model, but its place in the ring's groups is " + std::to_string(t) + " of " +
                                    std::to_string(T) + " (RingOptions::group_size must be the --tp, the part rank % tp)");
  return {ringattn::Scope::across, ring.scope_rank(ringattn::Scope::across), ring.scope_size(ringattn::Scope::across), T, t};
}

void move_last_rows(ringattn::Ring& ring, const Place& at, int to, const std::vector<ringattn::PackedShard>& shards,
                    const std::vector<std::int64_t>& cu, std::int64_t dim, std::vector<SequenceResult>& owned,
                    std::vector<float>& last_h) {
  const int world = at.world, rank = at.rank;
  if (to < 0 || to >= world)
    throw ringattn::InvalidArgument("decode rank " + std::to_string(to) + " is not a rank of a ring of " + std::to_string(world));
  if (rank != to) {
    if (!owned.empty()) {
      ringattn::MessageRequest s = ring.send_message(at.ring_rank(to), kLastRows, owned.size(), std::as_bytes(std::span(last_h)));
      ring.wait(s);
    }
    owned.clear();
    last_h.clear();
    return;
  }
  const std::size_t prompts = cu.size() - 1, row = static_cast<std::size_t>(dim);
  std::vector<float> all(prompts * row);
  for (std::size_t i = 0; i < owned.size(); ++i)
    std::copy_n(last_h.begin() + static_cast<std::ptrdiff_t>(i * row), row, all.begin() + static_cast<std::ptrdiff_t>(owned[i].prompt * row));
  for (int r = 0; r < world; ++r) {
    if (r == to) continue;
    std::vector<std::int32_t> held;  // the prompts whose last token rank r holds, in its row order
    for (std::size_t i = 0; i < shards[r].positions.size(); ++i) {
      const std::int32_t d = shards[r].documents[i];
      if (shards[r].positions[i] == cu[d + 1] - 1) held.push_back(d);
    }
    if (held.empty()) continue;
    std::vector<float> got(held.size() * row);
    ringattn::MessageRequest q = ring.receive_message(at.ring_rank(r), kLastRows, [&](const ringattn::MessageHeader& h) {
      if (h.bytes != got.size() * sizeof(float) || h.job != held.size()) return std::span<std::byte>();  // the ring fails
      return std::as_writable_bytes(std::span(got));
    });
    ring.wait(q);
    for (std::size_t i = 0; i < held.size(); ++i)
      std::copy_n(got.begin() + static_cast<std::ptrdiff_t>(i * row), row, all.begin() + static_cast<std::ptrdiff_t>(held[i] * row));
  }
  owned.clear();
  for (std::size_t d = 0; d < prompts; ++d) owned.push_back({static_cast<std::int32_t>(d), {}, {}, {}});
  last_h = std::move(all);
}


std::vector<float> gather_follow_rows(ringattn::Ring& ring, const Place& at, int to, const std::vector<int>& last, std::int64_t dim,
                                      const std::vector<float>& mine) {
  const auto row = static_cast<std::size_t>(dim);
  if (at.rank != to) {
    if (!mine.empty()) {
      ringattn::MessageRequest s = ring.send_message(at.ring_rank(to), kFollowRows, mine.size() / row, std::as_bytes(std::span(mine)));
      ring.wait(s);
    }
    return {};
  }
  std::vector<float> all(last.size() * row);
  std::vector<std::size_t> next(static_cast<std::size_t>(at.world), 0);  // each rank's next row in `got`
  std::vector<std::vector<float>> got(static_cast<std::size_t>(at.world));
  for (int r = 0; r < at.world; ++r) {
    const auto held = static_cast<std::size_t>(std::count(last.begin(), last.end(), r));
    if (held == 0) continue;
    if (r == to) {
      got[static_cast<std::size_t>(r)] = mine;
      continue;
    }
    std::vector<float>& g = got[static_cast<std::size_t>(r)];
    g.resize(held * row);
    ringattn::MessageRequest q = ring.receive_message(at.ring_rank(r), kFollowRows, [&](const ringattn::MessageHeader& h) {
      if (h.bytes != g.size() * sizeof(float) || h.job != held) return std::span<std::byte>();  // the ring fails
      return std::as_writable_bytes(std::span(g));
    });
    ring.wait(q);
  }
  for (std::size_t f = 0; f < last.size(); ++f) {
    const auto r = static_cast<std::size_t>(last[f]);
    std::copy_n(got[r].begin() + static_cast<std::ptrdiff_t>(next[r]++ * row), row, all.begin() + static_cast<std::ptrdiff_t>(f * row));
  }
  return all;
}

}  // namespace infer
