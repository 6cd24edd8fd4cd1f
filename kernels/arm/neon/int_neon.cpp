// The integer block arithmetic's portable loops (kernels/int_blocks.hpp), vectorised by the
// compiler for NEON.
#include "kernels/int_blocks.hpp"

namespace ringattn::kernels {

const IntOps kIntNeon = {.name = "neon", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int, .tile = tile_portable};

}  // namespace ringattn::kernels
