// ringattn kernels — the keys one query sees, as one column range.
//
// Key positions within a block increase, and every mask is "k <= q" and/or
// "k > q - window", so the visible keys of any query are one contiguous range of the
// block's columns. The kernel's tiling and the poisoning of non-finite inputs both
// use this one definition, so they cannot disagree about which (query, key) pairs meet.
//
// Documents (packed batches) keep it one range: a block's document ids never decrease
// in row order, so the keys of one document are one run of columns, and the
// intersection of two column ranges is one range. Both ends of either range never
// decrease from one query row to the next (positions and documents increase with the
// row), so neither do the ends of the intersection: a strip of query rows is bounded
// by its first row's lo and its last row's hi.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ringattn/types.hpp"

namespace ringattn::kernels {

// Columns [lo, hi) of the increasing key positions k[0..n) visible to the query at q.
inline void visible_range(const Mask& mask, std::int64_t q, const std::int64_t* k, std::int64_t n,
                          std::int64_t* lo, std::int64_t* hi) {
  *lo = 0;
  *hi = n;
  if (mask.kind == MaskKind::none) return;
  *hi = std::upper_bound(k, k + n, q) - k;  // k <= q
  if (mask.kind == MaskKind::window) *lo = std::upper_bound(k, k + n, q - mask.window) - k;  // k > q - W
  if (*lo > *hi) *lo = *hi;
}

// The same within documents: the query's document is qdoc, the keys' are kdocs[0..n)
// (non-decreasing); null kdocs means the call has no documents (qdoc is then unused).
inline void visible_range(const Mask& mask, std::int64_t q, std::int32_t qdoc, const std::int64_t* k,
                          const std::int32_t* kdocs, std::int64_t n, std::int64_t* lo, std::int64_t* hi) {
  visible_range(mask, q, k, n, lo, hi);
  if (!kdocs) return;
  const auto same = std::equal_range(kdocs, kdocs + n, qdoc);
  *lo = std::max<std::int64_t>(*lo, same.first - kdocs);
  *hi = std::min<std::int64_t>(*hi, same.second - kdocs);
  if (*lo > *hi) *lo = *hi;
}

// How many (query, key) pairs meet: the sum over the queries qpos (documents qdocs, or
// null) of their visible ranges among the keys kpos[0..nk) (kdocs or null).
template <class QPos>
inline double visible_pairs(const Mask& mask, const QPos& qpos, const std::int32_t* qdocs, const std::int64_t* kpos,
                            const std::int32_t* kdocs, std::int64_t nk) {
  double pairs = 0;
  for (std::size_t i = 0; i < qpos.size(); ++i) {
    std::int64_t lo, hi;
    visible_range(mask, qpos[i], qdocs ? qdocs[i] : 0, kpos, kdocs, nk, &lo, &hi);
    pairs += static_cast<double>(hi - lo);
  }
  return pairs;
}

}  // namespace ringattn::kernels
