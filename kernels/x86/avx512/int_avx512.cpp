// The integer block arithmetic on AVX-512 without VNNI (Skylake-X): the AVX2 tiles
// (kernels/x86/int_tile_avx2.hpp), vpmaddubsw having no wider form that helps here.
#include "kernels/x86/int_tile_avx2.hpp"

namespace ringattn::kernels {

const IntOps kIntAvx512 = {.name = "avx512", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int_x86,
                           .tile = tile_avx2};

}  // namespace ringattn::kernels
