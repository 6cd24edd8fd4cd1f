// ringattn kernels — the keys one query sees, as one column range.
//
// Key positions within a block increase, and every mask is "k <= q" and/or
// "k > q - window", so the visible keys of any query are one contiguous range of the
// block's columns. The kernel's tiling and the poisoning of non-finite inputs both
// use this one definition, so they cannot disagree about which (query, key) pairs meet.
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

}  // namespace ringattn::kernels
