// The integer block arithmetic on AVX2: kernels/x86/int_tile_avx2.hpp's tiles.
#include "kernels/x86/int_tile_avx2.hpp"

namespace ringattn::kernels {

const IntOps kIntAvx2 = {.name = "avx2", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int_x86,
                         .tile = tile_avx2};

}  // namespace ringattn::kernels
