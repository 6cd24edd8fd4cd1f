// ringattn kernels — NaN and inf in the inputs of a fold.
//
// What the kernel promises (block_attention.hpp states it for callers): a (query row,
// head) whose q row or one of whose visible keys' k rows holds a NaN or inf ends with
// O and lse NaN; otherwise a NaN or inf at element e of a visible key's v row makes
// O[e] NaN; everything else is bit for bit what it would be had the bad entries been 0.
//
// How it gets there without slowing the finite case down:
//   - Detection runs over copies the fold makes anyway (each query tile into scratch,
//     K and V into packed panels), right after the copy while they are in cache,
//     through the per-ISA has_non_finite ops of softmax_ops.hpp: an AND, an ADD and
//     an OR per vector, no branch.
//   - A non-finite v is replaced by 0 in the packed panel, so it reaches no product at
//     all. Left in, it did: a 64-row strip multiplies whole 64-key column blocks, and
//     0 * inf is NaN, so a hidden value poisoned its neighbours. A non-finite k is
//     zeroed too (a hidden column's score is never read, but this way the tiles only
//     ever compute finite numbers and the poison is written in one place).
//   - A non-finite q needs no scrubbing: row i of Q K^T and of P V depends on q_i alone,
//     so the damage stays in its own row, which is then poisoned anyway.
//   - After the tiles, the rows that see a bad entry are poisoned in the state: m, l
//     and o NaN for a bad score, o[e] NaN for a bad value. The state keeps NaN through
//     later folds (l * alpha + sum stays NaN) and merge/finalize test for it, so the
//     ring's P folds and a decode merge of P partial states agree in any order.
// The check is one pass over cache-hot copies, O(b d) against the fold's O(b^2 d); only
// a fold that found something bad pays more: the scrub and the prefix counts below,
// O(b d) again, once per chunk.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "ringattn/block_attention.hpp"
#include "ringattn/types.hpp"

namespace ringattn::kernels {

// Bit 31 of the result is set iff x is NaN or +-inf (exponent all ones): adding one to
// the exponent field carries out of it only then. The scalar form of the
// has_non_finite ops, for the slow path below.
inline constexpr std::uint32_t kNonFiniteBit = 0x80000000u;
inline std::uint32_t non_finite_bit(float x) { return (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) + 0x00800000u; }
inline std::uint32_t non_finite_bit(std::uint16_t bf16) {
  return static_cast<std::uint32_t>((bf16 & 0x7f80u) + 0x0080u) << 16;
}

// Replaces every NaN and inf of x[0..n) (fp32 or bf16 per dt) by +0.
void zero_non_finite(void* x, std::int64_t n, DType dt);

// Where the non-finite entries of one block's K and V are, per kv head, as prefix counts
// over the key rows: "does any key in rows [lo, hi) hold one" is two lookups however
// many keys a query sees. K is tracked per row (a bad k spoils the whole score), V per
// element (a bad v spoils one output element).
class BadKeys {
 public:
  // k, v: [rows, kv_heads, dim] in dt; either may be clean (then it costs nothing).
  BadKeys(const void* k, bool k_bad, const void* v, bool v_bad, std::int64_t rows, std::int64_t kv_heads,
          std::int64_t dim, DType dt);

  bool any_k(std::int64_t lo, std::int64_t hi, std::int64_t g) const {
    return !k_.empty() && k_[idx(hi, g)] != k_[idx(lo, g)];
  }
  bool has_v() const { return !v_.empty(); }
  bool any_v(std::int64_t lo, std::int64_t hi, std::int64_t g, std::int64_t e) const {
    return v_[static_cast<std::size_t>(idx(hi, g) * dim_ + e)] != v_[static_cast<std::size_t>(idx(lo, g) * dim_ + e)];
  }

 private:
  std::int64_t idx(std::int64_t row, std::int64_t g) const { return row * kv_heads_ + g; }
  std::int64_t kv_heads_, dim_;
  std::vector<std::int32_t> k_;  // [(rows + 1) x kv_heads]: bad k rows among keys [0, row)
  std::vector<std::int32_t> v_;  // [(rows + 1) x kv_heads x dim]: the same per element
};

// Marks in `state` what the block (keys at positions kpos[0..nk)) did to each query row
// (positions qpos) that sees at least one of its keys: m, l, o all NaN for (row, head)
// with q_bad[row * heads + head] set (q_bad may be null) or a bad k row of its kv head in
// view; else o[e] NaN for every element e with a bad v in view. Rows that see nothing
// are left alone: a query that meets no key uses none of its values. With documents
// (qdocs and kdocs both non-null), a row sees only the keys of its own document.
void poison_non_finite(const Mask& mask, const std::vector<std::int64_t>& qpos, const std::uint8_t* q_bad,
                       const std::int64_t* kpos, std::int64_t nk, const BadKeys* keys, std::int64_t group,
                       OnlineSoftmaxState& state, const std::int32_t* qdocs = nullptr,
                       const std::int32_t* kdocs = nullptr);

}  // namespace ringattn::kernels
