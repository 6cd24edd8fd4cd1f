#include "kernels/tile_plan.hpp"

#include <algorithm>

#include "kernels/visible_range.hpp"

namespace ringattn::kernels {

namespace {

enum class TileVis { hidden, full, partial };

// Whether keys [kmin, kmax] can be seen by queries [qmin, qmax] (positions increase).
TileVis classify(const Mask& mask, std::int64_t qmin, std::int64_t qmax, std::int64_t kmin,
                 std::int64_t kmax) {
  switch (mask.kind) {
    case MaskKind::none: return TileVis::full;
    case MaskKind::causal:
      if (kmin > qmax) return TileVis::hidden;
      return kmax <= qmin ? TileVis::full : TileVis::partial;
    case MaskKind::window:
      if (kmin > qmax || kmax <= qmin - mask.window) return TileVis::hidden;
      return (kmax <= qmin && kmin > qmax - mask.window) ? TileVis::full : TileVis::partial;
  }
  return TileVis::partial;
}

// The same when the rows carry documents, ids [qd0, qd1] and [kd0, kd1] (non-decreasing,
// so the first and last rows bound them): no common document hides the tile; a tile the
// mask shows fully is still partial unless its rows all belong to one document.
TileVis classify_docs(TileVis vis, std::int32_t qd0, std::int32_t qd1, std::int32_t kd0, std::int32_t kd1) {
  if (qd1 < kd0 || kd1 < qd0) return TileVis::hidden;
  if (vis == TileVis::full && !(qd0 == qd1 && kd0 == kd1 && qd0 == kd0)) return TileVis::partial;
  return vis;
}

// The key columns a strip of query rows (positions qp, documents qd, nr rows) computes
// against a key tile (kp, kd, tk columns), as windows [cl, ch) rounded out to kStrip:
// one per run of rows of one document (bounded by its first row's lo and its last row's
// hi, kernels/visible_range.hpp), overlapping or touching windows merged. A document
// that sees nothing in the tile adds none, so a strip whose documents have no keys here
// is skipped however far apart its first and last documents' keys lie, and the columns
// between two documents' windows are not computed.
template <class Emit>
void strip_windows(const Mask& mask, const std::int64_t* qp, const std::int32_t* qd, std::int64_t nr,
                   const std::int64_t* kp, const std::int32_t* kd, std::int64_t tk, Emit emit) {
  std::int64_t wl = 0, wh = -1;  // the open window; none while wh < 0
  for (std::int64_t r = 0; r < nr;) {
    std::int64_t re = r + 1;
    while (re < nr && qd[re] == qd[r]) ++re;
    std::int64_t lo_first, hi_first, lo_last, hi_last;
    visible_range(mask, qp[r], qd[r], kp, kd, tk, &lo_first, &hi_first);
    visible_range(mask, qp[re - 1], qd[r], kp, kd, tk, &lo_last, &hi_last);
    r = re;
    if (hi_last <= lo_first) continue;  // this document sees none of these keys
    const std::int64_t cl = (lo_first / kStrip) * kStrip;
    const std::int64_t ch = std::min(tk, ((hi_last + kStrip - 1) / kStrip) * kStrip);
    if (wh >= 0 && cl <= wh) {  // windows only move right (lo and hi never decrease)
      wh = std::max(wh, ch);
      continue;
    }
    if (wh >= 0) emit(wl, wh);
    wl = cl;
    wh = ch;
  }
  if (wh >= 0) emit(wl, wh);
}

}  // namespace

TileCount plan_tiles(const Mask& mask, const std::vector<std::int64_t>& qpos, const std::int32_t* qdocs,
                     const std::int64_t* kpos, const std::int32_t* kdocs, std::int64_t nk, std::int64_t tile_k,
                     std::vector<std::vector<Piece>>& plan) {
  const auto nq = static_cast<std::int64_t>(qpos.size());
  TileCount n;
  const std::int64_t nqt = (nq + kTileQ - 1) / kTileQ, nkt = (nk + tile_k - 1) / tile_k;
  if (plan.size() < static_cast<std::size_t>(nqt)) plan.resize(static_cast<std::size_t>(nqt));
  for (auto& pieces : plan) pieces.clear();  // keeps their capacity
  for (std::int64_t qt = 0; qt < nqt; ++qt) {
    const std::int64_t r0 = qt * kTileQ, tq = std::min(kTileQ, nq - r0);
    for (std::int64_t kt = 0; kt < nkt; ++kt) {
      const std::int64_t c0 = kt * tile_k, tk = std::min(tile_k, nk - c0);
      const std::int64_t* kp = kpos + c0;
      TileVis vis = classify(mask, qpos[static_cast<std::size_t>(r0)], qpos[static_cast<std::size_t>(r0 + tq - 1)],
                             kp[0], kp[tk - 1]);
      if (kdocs && vis != TileVis::hidden)
        vis = classify_docs(vis, qdocs[r0], qdocs[r0 + tq - 1], kdocs[c0], kdocs[c0 + tk - 1]);
      if (vis == TileVis::hidden) {
        ++n.skipped;
        continue;
      }
      ++n.computed;
      auto& pieces = plan[static_cast<std::size_t>(qt)];
      if (vis == TileVis::full) {
        pieces.push_back({kt, 0, tq, 0, tk, false});
        continue;
      }
      const std::int32_t* kd = kdocs ? kdocs + c0 : nullptr;
      for (std::int64_t i0 = 0; i0 < tq; i0 += kStrip) {
        const std::int64_t nr = std::min(kStrip, tq - i0);
        if (kd) {
          strip_windows(mask, qpos.data() + r0 + i0, qdocs + r0 + i0, nr, kp, kd, tk,
                        [&](std::int64_t cl, std::int64_t ch) { pieces.push_back({kt, i0, nr, cl, ch - cl, true}); });
          continue;
        }
        std::int64_t lo_first, hi_first, lo_last, hi_last;
        visible_range(mask, qpos[static_cast<std::size_t>(r0 + i0)], kp, tk, &lo_first, &hi_first);
        visible_range(mask, qpos[static_cast<std::size_t>(r0 + i0 + nr - 1)], kp, tk, &lo_last, &hi_last);
        // Positions increase, so the first row has the smallest lo, the last the largest hi.
        if (hi_last <= lo_first) continue;
        const std::int64_t cl = (lo_first / kStrip) * kStrip;
        const std::int64_t ch = std::min(tk, ((hi_last + kStrip - 1) / kStrip) * kStrip);
        pieces.push_back({kt, i0, nr, cl, ch - cl, true});
      }
    }
  }
  return n;
}

}  // namespace ringattn::kernels
