// The integer block arithmetic (kernels/int_ops.hpp) on AVX512-VNNI over IntBlocks: the
// weight codes transposed once a panel's run (int_codes_x86.hpp), then vnni_tile.hpp's tiles.
#include "kernels/int_blocks.hpp"
#include "kernels/x86/avx512_vnni/vnni_tile.hpp"
#include "kernels/x86/int_codes_x86.hpp"

namespace ringattn::kernels {
namespace {

void tile_scratch(const IntFormat& f, const IntRowsView& x, int m, const std::uint32_t* w, std::int64_t blocks,
                  const float* a, std::int64_t lda, float* y, std::int64_t ldy, int cols, bool add) {
  tile_vnni<ScratchSrc>(f, x, m, w, f.block_words, blocks, a, lda, y, ldy, cols, add);
}

}  // namespace

const IntOps kIntAvx512Vnni = {.name = "avx512-vnni", .rows = 4, .quantize = quantize_rows, .unpack = unpack_int_x86,
                               .tile = tile_scratch};

}  // namespace ringattn::kernels
