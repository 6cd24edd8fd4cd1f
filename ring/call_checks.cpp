#include "ring/call_checks.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

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

void check_scope(const Ring::Impl& im, Scope scope, const char* call) {
  if (scope != Scope::ring && scope != Scope::group && scope != Scope::across)
    throw InvalidArgument("rank " + std::to_string(im.options.rank) + ": " + call + ": scope " +
                          std::to_string(static_cast<int>(scope)) +
                          " is not Scope::ring, Scope::group or Scope::across");
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
void check_backward_inputs(const std::string& who, const AttentionSpec& spec, std::int64_t rows,
                           std::span<const float> q, std::span<const float> k, std::span<const float> v,
                           std::span<const float> o, std::span<const float> lse, std::span<const float> d_o,
                           std::span<float> dq, std::span<float> dk, std::span<float> dv) {
  auto bad = [&](const std::string& what) { throw InvalidArgument(who + what); };
  const std::int64_t H = spec.heads, KH = spec.kv_heads, D = spec.head_dim;
  auto size_is = [&](const char* name, std::size_t got, std::int64_t want) {
    if (static_cast<std::int64_t>(got) != want)
      bad(std::string(name) + " has " + std::to_string(got) + " elements, expected " + std::to_string(want) + " (" +
          std::to_string(rows) + " rows)");
  };
  if (lse.empty()) bad("lse is required: pass the lse that forward() returned for these rows");
  size_is("d_o", d_o.size(), rows * H * D);
  size_is("dq", dq.size(), rows * H * D);
  size_is("dk", dk.size(), rows * KH * D);
  size_is("dv", dv.size(), rows * KH * D);
  auto finite = [&](const char* name, std::span<const float> x, std::int64_t per_row) {
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!std::isfinite(x[i]))
        bad(std::string(name) + " holds " + std::to_string(x[i]) + " at row " +
            std::to_string(static_cast<std::int64_t>(i) / per_row) + "; the backward takes finite inputs only");
  };
  // dq accumulates and dk, dv hold accumulators while q, k, v, o, lse and d_o are still
  // read: an output sharing memory with any of them would corrupt the result silently.
  auto overlap = [](auto a, auto b) {  // as addresses: < on pointers into different arrays is unspecified
    const auto a0 = reinterpret_cast<std::uintptr_t>(a.data()), b0 = reinterpret_cast<std::uintptr_t>(b.data());
    return !a.empty() && !b.empty() && a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes();
  };
  const std::pair<const char*, std::span<const float>> ins[] = {{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse},
                                                               {"d_o", d_o}};
  const std::pair<const char*, std::span<float>> outs[] = {{"dq", dq}, {"dk", dk}, {"dv", dv}};
  for (std::size_t i = 0; i < 3; ++i) {
    for (const auto& [name, in] : ins)
      if (overlap(outs[i].second, in))
        bad(std::string(outs[i].first) + " shares memory with " + name + "; pass output arrays of their own");
    for (std::size_t j = i + 1; j < 3; ++j)
      if (overlap(outs[i].second, outs[j].second))
        bad(std::string(outs[i].first) + " shares memory with " + outs[j].first + "; pass output arrays of their own");
  }
  finite("q", q, H * D);
  finite("k", k, KH * D);
  finite("v", v, KH * D);
  finite("d_o", d_o, H * D);
  for (std::size_t i = 0; i < lse.size(); ++i)
    if (std::isnan(lse[i]) || lse[i] == std::numeric_limits<float>::infinity())
      bad("lse holds " + std::to_string(lse[i]) + " at row " + std::to_string(static_cast<std::int64_t>(i) / H) +
          ": pass the lse that forward() returned (finite, or -inf for a row that sees no key)");
}

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
    } else if (!im.transport->failure().empty()) {  // e.g. a schedule aborted its transfers on the way out
      im.mark_broken(im.transport->failure());
    }
    throw;
  }
}

}  // namespace ringattn::ring
