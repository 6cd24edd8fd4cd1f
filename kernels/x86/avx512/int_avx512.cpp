// The integer block arithmetic's portable loops (kernels/int_blocks.hpp), vectorised by the
// compiler for AVX-512 (no VNNI).
#include "kernels/int_blocks.hpp"
#include "kernels/x86/int_codes_x86.hpp"

namespace ringattn::kernels {

const IntOps kIntAvx512 = {.name = "avx512", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int_x86, .tile = tile_portable};

}  // namespace ringattn::kernels
