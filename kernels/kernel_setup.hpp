// ringattn kernels — an AttentionConfig checked and resolved, for every kernel made from
// one (the forward fold, the backward): one place that says what a config may hold.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/softmax_ops.hpp"
#include "ringattn/block_attention.hpp"

namespace ringattn::kernels {

struct KernelSetup {
  AttentionConfig cfg;     // scale resolved (0 -> 1/sqrt(head_dim)), matmul_dtype set
  Isa isa;                 // the path it runs
  const SoftmaxOps* ops;   // that path's table
  DType mm;                // the matmuls' operand type
  int threads;             // resolved (0 -> omp_get_max_threads())
};

// Throws InvalidArgument ("attention config: ...") naming what is wrong.
KernelSetup set_up(const AttentionConfig& cfg);

// "" or what is wrong with one side's document ids (side: "the queries'"): their count
// differs from rows, or they decrease.
std::string check_docs(const char* side, std::span<const std::int32_t> docs, std::int64_t rows);

// Throws InvalidArgument ("<who>: the state's shape ... does not match its arrays") unless
// m and l hold rows * heads and o rows * heads * head_dim elements: the fields are public,
// and fold, merge and finalize index the arrays by them.
void check_state(const OnlineSoftmaxState& s, const char* who);

// Throws InvalidArgument ("<who>: <name> is a null pointer" / "is not aligned") unless p
// is non-null and aligned to `align`.
void check_ptr(const void* p, std::size_t align, const char* name, const char* who = "block attention");

}  // namespace ringattn::kernels
