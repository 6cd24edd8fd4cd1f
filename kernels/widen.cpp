// The element-wise types' widening to fp32 (kernels/tensor_table.hpp's rows fp32, bf16,
// fp16): exact, one value a block. The block formats' are kernels/quant_blocks.cpp's.
#include <cstring>

#include "kernels/tensor_table.hpp"
#include "ringattn/half.hpp"

namespace ringattn::kernels {

void widen_f32(const std::byte* src, std::int64_t blocks, float* out) noexcept {
  std::memcpy(out, src, static_cast<std::size_t>(blocks) * 4);
}

void widen_bf16(const std::byte* src, std::int64_t blocks, float* out) noexcept {
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + i * 2, 2);
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    std::memcpy(&out[i], &u, 4);
  }
}

void widen_f16(const std::byte* src, std::int64_t blocks, float* out) noexcept {
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::uint16_t h;
    std::memcpy(&h, src + i * 2, 2);
    out[i] = from_f16(h);
  }
}

}  // namespace ringattn::kernels
