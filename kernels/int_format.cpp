// The integer layouts of GGUF's block formats (kernels/int_ops.hpp).
#include "kernels/int_ops.hpp"

namespace ringattn::kernels {
namespace {

// codes: block * 32 bytes = block * 8 words; then d[32]; dmin[32] (q4_k); sc [subs][32]; coef [extra][32].
constexpr IntFormat kQ8_0{.dtype = DType::q8_0, .block = 32, .sub = 32, .extra = 1, .block_words = 288,
                          .d_at = 256, .dmin_at = 0, .sc_at = 0, .coef_at = 0};
constexpr IntFormat kQ4_K{.dtype = DType::q4_k, .block = 256, .sub = 32, .extra = 4, .block_words = 2496,
                          .d_at = 2048, .dmin_at = 2080, .sc_at = 2112, .coef_at = 2368};
constexpr IntFormat kQ6_K{.dtype = DType::q6_k, .block = 256, .sub = 16, .extra = 8, .block_words = 2848,
                          .d_at = 2048, .dmin_at = 0, .sc_at = 2080, .coef_at = 2592};
static_assert(kQ4_K.coef_at + kQ4_K.extra * 32 == kQ4_K.block_words);
static_assert(kQ6_K.coef_at + kQ6_K.extra * 32 == kQ6_K.block_words);
static_assert(kQ6_K.sc_at + kQ6_K.block / kQ6_K.sub * 32 == kQ6_K.coef_at);

}  // namespace

const IntFormat* int_format(DType d) noexcept {
  switch (d) {
    case DType::q8_0: return &kQ8_0;
    case DType::q4_k: return &kQ4_K;
    case DType::q6_k: return &kQ6_K;
    case DType::f32:
    case DType::bf16:
    case DType::f16: break;
  }
  return nullptr;
}

}  // namespace ringattn::kernels
