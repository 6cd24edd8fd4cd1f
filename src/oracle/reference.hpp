// ringattn kernels — dense attention in float64: the oracle for tests, the demo and
// `ringattn verify`. O(rows_q x rows_k) time, O(rows_k) extra memory per query; it is
// meant for correctness, never for speed.
#pragma once

#include <cstdint>
#include <vector>

#include "ringattn/positions.hpp"
#include "ringattn/types.hpp"

namespace ringattn::oracle {

struct DenseShape {
  std::int64_t heads, kv_heads, head_dim;
  Mask mask;
  double scale;  // 0 means 1/sqrt(head_dim)
};

// q: [nq, heads, d], k/v: [nk, kv_heads, d] fp32. out: [nq, heads, d]; lse: [nq, heads]
// (-inf and out = 0 for rows that see no key). Either output may be null.
// Non-finite inputs (the semantics BlockAttention must match, see block_attention.hpp):
// a (row, head) that sees a key whose score q·k is not finite (a NaN or inf in its q row
// or in that key's k row) gets O and lse all NaN; otherwise a NaN or inf at element e of
// a visible key's v row makes O[e] NaN. Only visible keys are ever read.
// Documents: with q_docs [nq] and k_docs [nk] (both or neither), a query sees a key only
// if they are in the same document and the mask allows the pair — attention within each
// document of a packed batch, with no assumption on the order of the ids.
void dense_attention_f64(const DenseShape& shape, const float* q, const Positions& q_pos, const float* k,
                         const float* v, const Positions& k_pos, double* out, double* lse,
                         const std::int32_t* q_docs = nullptr, const std::int32_t* k_docs = nullptr);

}  // namespace ringattn::oracle
