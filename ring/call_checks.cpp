#include "ring/call_checks.hpp"

#include <string>

#include "ringattn/error.hpp"

namespace ringattn::ring {

// Whether the block can hold no pair this rank's queries see, from the ends of both
// sides' positions (increasing) and documents (non-decreasing): then the step is
// relayed and not folded.
bool step_hidden(const Mask& mask, std::span<const std::int64_t> qpos, std::span<const std::int32_t> qdocs,
                 const RingStep::View& blk) {
  if (qpos.empty() || blk.rows == 0) return true;
  if (!qdocs.empty() && (qdocs.back() < blk.documents.front() || blk.documents.back() < qdocs.front())) return true;
  const std::int64_t kmin = blk.positions->at(0);
  if (mask.kind != MaskKind::none && kmin > qpos.back()) return true;  // every key after every query
  return mask.kind == MaskKind::window && blk.positions->at(blk.rows - 1) <= qpos.front() - mask.window;
}


// Everything a call must satisfy, each checked once, before anything is sent: a bad call
// leaves the ring usable. Throws InvalidArgument naming the rank and what is wrong.
CheckedCall check_call(Ring::Impl& im, const char* call, const AttentionSpec& spec, std::span<const float> q,
                       std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> positions,
                       std::optional<std::span<const std::int32_t>> documents, std::span<const float> o,
                       std::span<const float> lse) {
  const auto rows = static_cast<std::int64_t>(positions.size());
  auto bad = [&](const std::string& what) {
    throw InvalidArgument("rank " + std::to_string(im.options.rank) + ": " + call + ": " + what);
  };
  if (rows < 1)
    bad("0 rows: every rank passes at least one row to every call (the wire carries no empty blocks); shard so "
        "that each rank has one, as the layouts and shard_documents do");
  im.check_limits(spec, rows, "rows", bad);
  BlockAttention& kernel = im.kernel_for(spec);  // validates heads, kv_heads, head_dim, mask, scale
  const std::int64_t H = spec.heads, KH = spec.kv_heads, D = spec.head_dim;
  auto size_is = [&](const char* name, std::size_t got, std::int64_t want) {
    if (static_cast<std::int64_t>(got) != want)
      bad(std::string(name) + " has " + std::to_string(got) + " elements, expected " + std::to_string(want) + " (" +
          std::to_string(rows) + " rows)");
  };
  size_is("q", q.size(), rows * H * D);
  size_is("k", k.size(), rows * KH * D);
  size_is("v", v.size(), rows * KH * D);
  size_is("o", o.size(), rows * H * D);
  if (!lse.empty()) size_is("lse", lse.size(), rows * H);
  CheckedCall fc{Positions::from_sorted(positions.data(), rows), {}, kernel};  // strictly increasing, or InvalidArgument
  if (documents) {
    fc.docs = *documents;
    size_is("documents", fc.docs.size(), rows);
    for (std::size_t i = 1; i < fc.docs.size(); ++i)
      if (fc.docs[i] < fc.docs[i - 1])
        bad("document ids decrease at row " + std::to_string(i) + " (" + std::to_string(fc.docs[i - 1]) + " then " +
            std::to_string(fc.docs[i]) + "): each document must be a contiguous run of positions, its rows in order");
  }
  return fc;
}

// Inside a catch: the call failed in the rotation. A network failure breaks the ring; a
// send that may still read the caller's K and V is ended, and the ring with it.
[[noreturn]] void fail_call(Ring::Impl& im) {
  try {
    throw;
  } catch (const NetworkError& e) {
    im.mark_broken(e.what());
    if (im.step->sending_borrowed()) im.transport->close();  // nothing may read the caller's K and V after we return
    throw;
  } catch (const std::exception& e) {
    if (im.step->sending_borrowed()) {
      im.mark_broken(std::string("a call failed while its block was being sent: ") + e.what());
      im.transport->close();
    }
    throw;
  }
}

}  // namespace ringattn::ring
