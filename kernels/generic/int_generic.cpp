// The integer block arithmetic's portable loops (kernels/int_blocks.hpp), vectorised by the
// compiler for the generic path.
#include "kernels/int_blocks.hpp"

namespace ringattn::kernels {

const IntOps kIntGeneric = {.name = "generic", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int, .tile = tile_portable};

}  // namespace ringattn::kernels
