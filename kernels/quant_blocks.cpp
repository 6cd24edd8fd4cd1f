// GGUF's block formats (kernels/quant_blocks.hpp): a file's blocks decoded as llama.cpp's
// dequantize_row_q8_0 / _q4_K / _q6_K do, and packed into and out of Linear's panels.
#include "kernels/quant_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/tensor_table.hpp"
#include "ringattn/blocks.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"

namespace ringattn::kernels {

namespace {

constexpr int P = 32;  // columns a panel (kernels/linear_ops.hpp's kPanel)

// A format's block and bytes from its row of the tensor-type table; its panel words here.
constexpr QuantFormat format_of(DType d, int panel_words) {
  const TensorType& t = *tensor_row(d);
  return {d, static_cast<int>(t.block_values), static_cast<int>(t.block_bytes), panel_words};
}
constexpr QuantFormat kQ8_0 = format_of(DType::q8_0, 32 + 32 * 32 / 4);
constexpr QuantFormat kQ4K = format_of(DType::q4_k, 32 + 32 + 8 * 32 / 4 * 2 + 256 * 16 / 4);
constexpr QuantFormat kQ6K = format_of(DType::q6_k, 32 + 16 * 32 / 4 + 256 * 16 / 4 + 256 * 8 / 4);
// decode_block and pack_block below read these layouts: 32 or 256 values in 34, 144, 210 bytes.
static_assert(kQ8_0.block == 32 && kQ8_0.bytes == 34 && kQ4K.block == 256 && kQ4K.bytes == 144 &&
              kQ6K.block == 256 && kQ6K.bytes == 210);

float half_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return from_f16(h);
}

std::uint8_t u8(const std::byte* p, int i) { return static_cast<std::uint8_t>(p[i]); }

// q4_k: sub-block t's 6-bit scale and min from the 12 packed bytes (llama.cpp's get_scale_min_k4).
void scale_min_k4(int t, const std::byte* s, int& sc, int& m) {
  if (t < 4) {
    sc = u8(s, t) & 63;
    m = u8(s, t + 4) & 63;
  } else {
    sc = (u8(s, t + 4) & 0xF) | ((u8(s, t - 4) >> 6) << 4);
    m = (u8(s, t + 4) >> 4) | ((u8(s, t) >> 6) << 4);
  }
}

// q4_k value k's 4-bit q: the low nibbles of qs[32c .. 32c+31] are values 64c .. 64c+31,
// the high ones 64c+32 .. 64c+63.
int q4k_q(const std::byte* qs, int k) {
  const std::uint8_t b = u8(qs, k / 64 * 32 + k % 32);
  return k % 64 < 32 ? b & 0xF : b >> 4;
}

// q6_k value k's 6-bit q (0..63): each half of 128 values reads 64 bytes of ql (low nibbles
// for its first and second 32, high nibbles for its third and fourth) and 32 of qh (2 bits
// a quarter).
int q6k_q(const std::byte* src, int k) {
  const int half = k / 128, quarter = k % 128 / 32, l = k % 32;
  const std::uint8_t ql = u8(src, half * 64 + l + (quarter & 1) * 32);
  const std::uint8_t qh = u8(src, 128 + half * 32 + l);
  return (quarter < 2 ? ql & 0xF : ql >> 4) | ((qh >> (2 * quarter)) & 3) << 4;
}

// Packed q4_k / q6_k: byte addresses inside a panel block.
std::uint8_t* bytes_at(std::uint32_t* w, int word) { return reinterpret_cast<std::uint8_t*>(w + word); }
const std::uint8_t* bytes_at(const std::uint32_t* w, int word) { return reinterpret_cast<const std::uint8_t*>(w + word); }
constexpr int kQ4Scale = 64, kQ4Min = 128, kQ4Nib = 192;   // words
constexpr int kQ6Scale = 32, kQ6Nib = 160, kQ6High = 1184;  // words

float f32_at(const std::uint32_t* w, int i) {
  float f;
  std::memcpy(&f, w + i, 4);
  return f;
}

}  // namespace

const QuantFormat* quant_format(DType d) {
  switch (d) {  // every DType (-Wswitch): a new one needs its answer here
    case DType::q8_0: return &kQ8_0;
    case DType::q4_k: return &kQ4K;
    case DType::q6_k: return &kQ6K;
    case DType::f32:
    case DType::bf16:
    case DType::f16: return nullptr;
  }
  return nullptr;  // a value past the enum: no format
}

namespace {
void widen_with(const QuantFormat& f, const std::byte* src, std::int64_t blocks, float* out) noexcept {
  for (std::int64_t b = 0; b < blocks; ++b) decode_block(f, src + b * f.bytes, out + b * f.block);
}
}  // namespace

void widen_q8_0(const std::byte* src, std::int64_t blocks, float* out) noexcept { widen_with(kQ8_0, src, blocks, out); }
void widen_q4_k(const std::byte* src, std::int64_t blocks, float* out) noexcept { widen_with(kQ4K, src, blocks, out); }
void widen_q6_k(const std::byte* src, std::int64_t blocks, float* out) noexcept { widen_with(kQ6K, src, blocks, out); }

void decode_block(const QuantFormat& f, const std::byte* src, float* out) {
  if (f.dtype == DType::q8_0) {
    const float d = half_at(src);
    for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(static_cast<std::int8_t>(src[2 + i]));
  } else if (f.dtype == DType::q4_k) {
    const float d = half_at(src), dmin = half_at(src + 2);
    for (int t = 0; t < 8; ++t) {
      int sc, m;
      scale_min_k4(t, src + 4, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      for (int i = t * 32; i < t * 32 + 32; ++i) out[i] = d1 * static_cast<float>(q4k_q(src + 16, i)) - m1;
    }
  } else {
    const float d = half_at(src + 208);
    for (int k = 0; k < 256; ++k) {
      const float ds = d * static_cast<float>(static_cast<std::int8_t>(src[192 + k / 16]));
      out[k] = ds * static_cast<float>(q6k_q(src, k) - 32);
    }
  }
}

void pack_block(const QuantFormat& f, const std::byte* src, std::uint32_t* dst, int j) {
  if (f.dtype == DType::q8_0) {
    const float d = half_at(src);
    std::memcpy(dst + j, &d, 4);
    for (int s = 0; s < 32; ++s) bytes_at(dst, 32)[s * P + j] = u8(src, 2 + s);
  } else if (f.dtype == DType::q4_k) {
    const float d = half_at(src), dmin = half_at(src + 2);
    std::memcpy(dst + j, &d, 4);
    std::memcpy(dst + 32 + j, &dmin, 4);
    for (int t = 0; t < 8; ++t) {
      int sc, m;
      scale_min_k4(t, src + 4, sc, m);
      bytes_at(dst, kQ4Scale)[t * P + j] = static_cast<std::uint8_t>(sc);
      bytes_at(dst, kQ4Min)[t * P + j] = static_cast<std::uint8_t>(m);
    }
    for (int s = 0; s < 256; ++s)
      bytes_at(dst, kQ4Nib)[s * 16 + j % 16] |= static_cast<std::uint8_t>(q4k_q(src + 16, s) << (j / 16 * 4));
  } else {
    const float d = half_at(src + 208);
    std::memcpy(dst + j, &d, 4);
    for (int u = 0; u < 16; ++u) bytes_at(dst, kQ6Scale)[u * P + j] = u8(src, 192 + u);
    for (int s = 0; s < 256; ++s) {
      const int q = q6k_q(src, s);
      bytes_at(dst, kQ6Nib)[s * 16 + j % 16] |= static_cast<std::uint8_t>((q & 0xF) << (j / 16 * 4));
      bytes_at(dst, kQ6High)[s * 8 + j % 8] |= static_cast<std::uint8_t>((q >> 4) << (j / 8 * 2));
    }
  }
}

void quantize_q8_0(const float* v, std::uint32_t* dst, int j) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float dq = amax / 127, id = dq != 0 ? 1.0f / dq : 0.0f;
  const float d = from_f16(to_f16(dq));
  std::memcpy(dst + j, &d, 4);
  for (int i = 0; i < 32; ++i)
    bytes_at(dst, 32)[i * P + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::round(v[i] * id)));
}

float packed_value(const QuantFormat& f, const std::uint32_t* src, int s, int j) {
  if (f.dtype == DType::q8_0)
    return f32_at(src, j) * static_cast<float>(reinterpret_cast<const std::int8_t*>(src + 32)[s * P + j]);
  if (f.dtype == DType::q4_k) {
    const float d1 = f32_at(src, j) * static_cast<float>(bytes_at(src, kQ4Scale)[s / 32 * P + j]);
    const float m1 = f32_at(src, 32 + j) * static_cast<float>(bytes_at(src, kQ4Min)[s / 32 * P + j]);
    const int q = (bytes_at(src, kQ4Nib)[s * 16 + j % 16] >> (j / 16 * 4)) & 0xF;
    return d1 * static_cast<float>(q) - m1;
  }
  const float ds = f32_at(src, j) * static_cast<float>(reinterpret_cast<const std::int8_t*>(src + kQ6Scale)[s / 16 * P + j]);
  const int lo = (bytes_at(src, kQ6Nib)[s * 16 + j % 16] >> (j / 16 * 4)) & 0xF;
  const int q = (lo | ((bytes_at(src, kQ6High)[s * 8 + j % 8] >> (j / 8 * 2)) & 3) << 4) - 32;
  return ds * static_cast<float>(q);
}

}  // namespace ringattn::kernels

namespace ringattn {

// The public face of the tensor-type table's block columns (include/ringattn/blocks.hpp).
std::int64_t block_values(DType d) { return tensor_type(d).block_values; }

std::int64_t block_bytes(DType d) { return tensor_type(d).block_bytes; }

void decode_blocks(DType d, const void* src, std::int64_t values, float* out) {
  const TensorType& t = tensor_type(d);
  if (values < 0 || values % t.block_values != 0)
    throw InvalidArgument("decode_blocks: " + std::to_string(values) + " values are not whole " + std::string(t.name) +
                          " blocks of " + std::to_string(t.block_values));
  t.widen(static_cast<const std::byte*>(src), values / t.block_values, out);
}

}  // namespace ringattn
