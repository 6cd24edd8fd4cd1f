// ringattn kernels — run-time choice of the ISA path.
#pragma once

#include <optional>

#include "kernels/linear_ops.hpp"
#include "kernels/softmax_ops.hpp"
#include "ringattn/types.hpp"

namespace ringattn::kernels {

// The table of `isa`; throws InvalidArgument if this build or this CPU lacks it.
const SoftmaxOps& ops_for(Isa isa);
// The weight matmul's panel loop of `isa` (kernels/linear_ops.hpp); throws as ops_for.
const LinearOps& linear_ops_for(Isa isa);

// `forced` if set, else env RINGATTN_ISA if set, else the best available path.
Isa resolve_isa(const std::optional<Isa>& forced);

}  // namespace ringattn::kernels
