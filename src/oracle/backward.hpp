// ringattn oracle — dense attention's backward in float64: the gradients Ring::backward and
// the block-backward kernel are checked against (issue 19). Like reference.hpp it is meant
// for correctness, never for speed: O(rows_q x rows_k x head_dim) per head, serial over the
// queries of a KV-head group.
//
// With O = softmax(scale · Q Kᵀ + mask) V per (query row i, head h), and dO given:
//   P_ij  = exp(scale · q_i·k_j − lse_i)   over the keys j that row i sees
//   D_i   = Σ_t dO_it O_it
//   dV_j += Σ_i P_ij dO_i                  dS_ij = P_ij (dO_i·v_j − D_i)
//   dQ_i  = scale Σ_j dS_ij k_j            dK_j += scale Σ_i dS_ij q_i
// A KV head's dK and dV sum over the query heads of its group (GQA); a row that sees no
// key contributes nothing and gets dQ = 0. Inputs are finite (the kernels refuse others).
#pragma once

#include <cstdint>

#include "ringattn/positions.hpp"
#include "reference.hpp"

namespace ringattn::oracle {

// Forward in float64 on float64 inputs (dense_attention_f64's arithmetic without the
// float rounding of its inputs): for finite-difference checks of the backward. Shapes as
// in reference.hpp; out [nq, heads, d], lse [nq, heads]; either may be null.
void dense_attention_f64(const DenseShape& shape, const double* q, const Positions& q_pos, const double* k,
                         const double* v, const Positions& k_pos, double* out, double* lse,
                         const std::int32_t* q_docs = nullptr, const std::int32_t* k_docs = nullptr);

// dq [nq, heads, d], dk and dv [nk, kv_heads, d], all overwritten. d_o [nq, heads, d].
void dense_attention_backward_f64(const DenseShape& shape, const double* q, const Positions& q_pos, const double* k,
                                  const double* v, const Positions& k_pos, const double* d_o, double* dq, double* dk,
                                  double* dv, const std::int32_t* q_docs = nullptr, const std::int32_t* k_docs = nullptr);

// The same on fp32 inputs (what a kernel was given), widened exactly.
void dense_attention_backward_f64(const DenseShape& shape, const float* q, const Positions& q_pos, const float* k,
                                  const float* v, const Positions& k_pos, const float* d_o, double* dq, double* dk,
                                  double* dv, const std::int32_t* q_docs = nullptr, const std::int32_t* k_docs = nullptr);

}  // namespace ringattn::oracle
