// ringattn kernels — run-time choice of the ISA path.
#pragma once

#include <optional>
#include <vector>

#include "kernels/int_ops.hpp"
#include "kernels/linear_ops.hpp"
#include "kernels/softmax_ops.hpp"
#include "ringattn/types.hpp"

namespace ringattn::kernels {

// The table of `isa`; throws InvalidArgument if this build or this CPU lacks it.
const SoftmaxOps& ops_for(Isa isa);
// The weight matmul's panel loop of `isa` (kernels/linear_ops.hpp); throws as ops_for.
const LinearOps& linear_ops_for(Isa isa);
// Every table of `isa` this CPU runs, the one linear_ops_for picks first (tests run all:
// AVX-512 with and without the bf16 dot instruction).
std::vector<const LinearOps*> linear_ops_variants(Isa isa);

// The block formats' integer arithmetic of `isa` (kernels/int_ops.hpp), and every table
// of it this CPU runs (the one int_ops_for picks first; tests run all).
const IntOps& int_ops_for(Isa isa);
std::vector<const IntOps*> int_ops_variants(Isa isa);

// `forced` if set, else env RINGATTN_ISA if set, else the best available path.
Isa resolve_isa(const std::optional<Isa>& forced);

}  // namespace ringattn::kernels
