// ringattn::Linear (include/ringattn/linear.hpp): packing once, and the threaded walk over
// row blocks and panels around each path's panel loop (kernels/linear_ops.hpp).
#include "ringattn/linear.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/aligned_buffer.hpp"
#include "kernels/dispatch.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"

namespace ringattn {

struct Linear::Impl {
  DType dtype = DType::f32;
  std::int64_t out = 0, in = 0, panels = 0;
  std::int64_t panel_words = 0;  // 4-byte words per panel: in*32 (f32), ceil(in/2)*32 (bf16), in*16 (f16)
  Isa isa = Isa::generic;
  const kernels::LinearOps* ops = nullptr;
  kernels::AlignedBuffer<std::uint32_t> words;
};

namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr int P = kernels::kPanel;

std::string shape(std::int64_t out, std::int64_t in) { return "[" + std::to_string(out) + ", " + std::to_string(in) + "]"; }

// bf16 as the dot instruction reads it: denormals are zero (sign kept).
std::uint32_t flush_denormal(std::uint16_t b) { return (b & 0x7F80u) == 0 ? b & 0x8000u : b; }

// fp32 -> bf16, to nearest even; denormals to signed zero, NaN stays a (quiet) NaN.
std::uint32_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7F800000u) == 0) return (u >> 16) & 0x8000u;
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x40u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// A row of x as bf16 word pairs (step 2p low, 2p + 1 high; an odd length's last high half zero).
void round_pairs(const float* x, std::int64_t n, std::uint32_t* out) {
  for (std::int64_t p = 0; p < n / 2; ++p) out[p] = to_bf16(x[2 * p]) | to_bf16(x[2 * p + 1]) << 16;
  if (n % 2) out[n / 2] = to_bf16(x[n - 1]);
}

}  // namespace

Linear::Linear(DType dtype, std::int64_t out, std::int64_t in, const void* w, std::optional<Isa> isa) {
  if (!w && out >= 1 && in >= 1) throw InvalidArgument("linear: weight " + shape(out, in) + " has no data (null pointer)");
  const Block b{dtype, w, out};
  pack(dtype, out, in, isa, std::span<const Block>(&b, 1));
}

Linear::Linear(DType dtype, std::int64_t in, std::initializer_list<std::span<const float>> blocks, std::optional<Isa> isa) {
  std::vector<Block> list;
  for (const auto& b : blocks) {
    if (in < 1 || b.empty() || static_cast<std::int64_t>(b.size()) % in != 0)
      throw InvalidArgument("linear: a block of " + std::to_string(b.size()) + " weights is not rows of in = " +
                            std::to_string(in) + " (needs a positive multiple)");
    list.push_back({DType::f32, b.data(), static_cast<std::int64_t>(b.size()) / in});
  }
  *this = Linear(dtype, in, std::span<const Block>(list), isa);
}

Linear::Linear(DType dtype, std::int64_t in, std::span<const Block> blocks, std::optional<Isa> isa) {
  std::int64_t out = 0;
  for (const Block& b : blocks) {
    if (b.rows < 1 || !b.data ||
        (b.dtype != DType::f32 && b.dtype != DType::bf16 && b.dtype != DType::f16 && b.dtype != DType::q8_0))
      throw InvalidArgument("linear: a block of " + std::to_string(b.rows) + " rows" +
                            (b.data ? "" : " without data") + " (needs rows >= 1, data, dtype fp32, bf16, fp16 or q8_0)");
    out += b.rows;
  }
  if (blocks.empty()) throw InvalidArgument("linear: no blocks of weights");
  pack(dtype, out, in, isa, blocks);
}

namespace {

// q8_0: 32 weights a block, as GGUF stores them (fp16 d, int8 q[32]) and as Linear packs
// them: per panel, per block of 32 steps, 32 fp32 scales (one a column) then [32 steps][32
// columns] int8 — 288 words.
constexpr std::int64_t kQ8Block = 32, kQ8Bytes = 34, kQ8Words = 32 + 32 * 32 / 4;

float q8_value(const std::byte* row, std::int64_t k) {
  const std::byte* b = row + (k / kQ8Block) * kQ8Bytes;
  std::uint16_t d;
  std::memcpy(&d, b, 2);
  return from_f16(d) * static_cast<float>(static_cast<std::int8_t>(b[2 + k % kQ8Block]));
}

// Bytes of one row of `in` values of `dtype` in a source block.
std::size_t row_bytes(DType dtype, std::int64_t in) {
  return dtype == DType::q8_0 ? static_cast<std::size_t>(in / kQ8Block * kQ8Bytes)
                              : static_cast<std::size_t>(in) * dtype_size(dtype);
}

// Element k of a source row of `dtype`, as fp32 (exact).
float source_value(const void* row, DType dtype, std::int64_t k) {
  if (dtype == DType::f32) return static_cast<const float*>(row)[k];
  if (dtype == DType::q8_0) return q8_value(static_cast<const std::byte*>(row), k);
  const std::uint16_t h = static_cast<const std::uint16_t*>(row)[k];
  if (dtype == DType::f16) return from_f16(h);
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

void Linear::pack(DType dtype, std::int64_t out, std::int64_t in, std::optional<Isa> isa, std::span<const Block> blocks) {
  if (out < 1 || out > kMaxDim || in < 1 || in > kMaxDim)
    throw InvalidArgument("linear: weight shape " + shape(out, in) + " is outside [1, 2^24] per side");
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16 && dtype != DType::q8_0)
    throw InvalidArgument("linear: unknown weight dtype " + std::to_string(static_cast<int>(dtype)));
  for (const Block& b : blocks)
    if ((dtype == DType::q8_0 || b.dtype == DType::q8_0) && in % kQ8Block != 0)
      throw InvalidArgument("linear: q8_0 weights need rows of a multiple of 32 values, not in = " + std::to_string(in));
  auto impl = std::make_shared<Impl>();
  impl->dtype = dtype;
  impl->out = out;
  impl->in = in;
  impl->isa = kernels::resolve_isa(isa);
  impl->ops = &kernels::linear_ops_for(impl->isa);
  impl->panels = (out + P - 1) / P;
  impl->panel_words = dtype == DType::bf16  ? (in + 1) / 2 * P
                      : dtype == DType::f16  ? in * P / 2
                      : dtype == DType::q8_0 ? in / kQ8Block * kQ8Words
                                             : in * P;
  const std::size_t total = static_cast<std::size_t>(impl->panels * impl->panel_words);
  impl->words.resize(total);
  std::uint32_t* dst = impl->words.data;
  std::memset(dst, 0, total * 4);
  // Row o of W: the block holding it, and the row's first element there.
  auto row_of = [&](std::int64_t o) {
    for (const Block& b : blocks) {
      if (o < b.rows)
        return std::pair<const void*, DType>(
            static_cast<const std::byte*>(b.data) + static_cast<std::size_t>(o) * row_bytes(b.dtype, in), b.dtype);
      o -= b.rows;
    }
    return std::pair<const void*, DType>(nullptr, DType::f32);  // not reached: o < out
  };
  // Panel p, column j is output o = p*32 + j; its weights are row o of W, each converted
  // to the held dtype (widened exactly, or rounded to nearest even).
#pragma omp parallel for schedule(static) if (total > (1u << 20))
  for (std::int64_t p = 0; p < impl->panels; ++p) {
    std::uint32_t* panel = dst + p * impl->panel_words;
    for (int j = 0; j < P && p * P + j < out; ++j) {
      const auto [row, from] = row_of(p * P + j);
      if (dtype == DType::f32) {
        for (std::int64_t k = 0; k < in; ++k) {
          const float v = source_value(row, from, k);
          std::memcpy(&panel[k * P + j], &v, 4);
        }
      } else if (dtype == DType::q8_0) {  // each block: its scale, its 32 int8 in column j
        for (std::int64_t b = 0; b < in / kQ8Block; ++b) {
          std::uint32_t* blk = panel + b * kQ8Words;
          auto* q = reinterpret_cast<std::int8_t*>(blk + 32);
          float d;
          if (from == DType::q8_0) {
            const std::byte* src = static_cast<const std::byte*>(row) + b * kQ8Bytes;
            std::uint16_t h;
            std::memcpy(&h, src, 2);
            d = from_f16(h);
            for (std::int64_t i = 0; i < kQ8Block; ++i) q[i * P + j] = static_cast<std::int8_t>(src[2 + i]);
          } else {  // quantized as llama.cpp's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d)
            float v[kQ8Block], amax = 0;
            for (std::int64_t i = 0; i < kQ8Block; ++i) {
              v[i] = source_value(row, from, b * kQ8Block + i);
              amax = std::max(amax, std::fabs(v[i]));
            }
            const float dq = amax / 127, id = dq != 0 ? 1.0f / dq : 0.0f;
            d = from_f16(to_f16(dq));
            for (std::int64_t i = 0; i < kQ8Block; ++i) q[i * P + j] = static_cast<std::int8_t>(std::round(v[i] * id));
          }
          std::memcpy(&blk[j], &d, 4);
        }
      } else if (dtype == DType::f16) {  // [K][32] halves
        auto* halves = reinterpret_cast<std::uint16_t*>(panel);
        const auto* h = static_cast<const std::uint16_t*>(row);
        for (std::int64_t k = 0; k < in; ++k)
          halves[k * P + j] = from == DType::f16 ? h[k] : to_f16(source_value(row, from, k));
      } else {  // bf16 word pairs
        const auto* h = static_cast<const std::uint16_t*>(row);
        for (std::int64_t k = 0; k < in; ++k) {
          const std::uint32_t b = from == DType::bf16 ? flush_denormal(h[k]) : to_bf16(source_value(row, from, k));
          panel[(k / 2) * P + j] |= b << (k % 2 ? 16 : 0);
        }
      }
    }
  }
  impl_ = std::move(impl);
}

std::int64_t Linear::out() const { return impl_ ? impl_->out : 0; }
std::int64_t Linear::in() const { return impl_ ? impl_->in : 0; }
DType Linear::dtype() const { return impl_ ? impl_->dtype : DType::f32; }
Isa Linear::isa() const { return impl_ ? impl_->isa : Isa::generic; }
const char* Linear::kernel() const { return impl_ ? impl_->ops->name : "none"; }

void Linear::row(std::int64_t o, std::span<float> w_row) const {
  if (!impl_) throw InvalidArgument("linear: row of an empty Linear (no weights)");
  const Impl& L = *impl_;
  if (o < 0 || o >= L.out || static_cast<std::int64_t>(w_row.size()) != L.in)
    throw InvalidArgument("linear: row " + std::to_string(o) + " into " + std::to_string(w_row.size()) +
                          " floats of weight " + shape(L.out, L.in) + " (needs 0 <= row < out, in floats)");
  const std::uint32_t* panel = L.words.data + (o / P) * L.panel_words;
  const std::int64_t j = o % P;
  for (std::int64_t k = 0; k < L.in; ++k) {
    if (L.dtype == DType::q8_0) {
      const std::uint32_t* blk = panel + (k / kQ8Block) * kQ8Words;
      float d;
      std::memcpy(&d, &blk[j], 4);
      w_row[static_cast<std::size_t>(k)] =
          d * static_cast<float>(reinterpret_cast<const std::int8_t*>(blk + 32)[(k % kQ8Block) * P + j]);
      continue;
    }
    if (L.dtype == DType::f16) {
      w_row[static_cast<std::size_t>(k)] = from_f16(reinterpret_cast<const std::uint16_t*>(panel)[k * P + j]);
      continue;
    }
    const std::uint32_t u = L.dtype == DType::bf16 ? (panel[(k / 2) * P + j] >> (k % 2 ? 16 : 0)) << 16 : panel[k * P + j];
    std::memcpy(&w_row[static_cast<std::size_t>(k)], &u, 4);
  }
}

std::span<const std::byte> Linear::packed() const {
  if (!impl_) return {};
  return {reinterpret_cast<const std::byte*>(impl_->words.data),
          static_cast<std::size_t>(impl_->panels * impl_->panel_words) * 4};
}

void Linear::apply(std::span<const float> x, std::span<float> y, bool add, int threads) const {
  if (!impl_) throw InvalidArgument("linear: apply on an empty Linear (no weights)");
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / impl_->in;
  if (rows * impl_->in != static_cast<std::int64_t>(x.size()) || rows * impl_->out != static_cast<std::int64_t>(y.size()))
    throw InvalidArgument("linear: x holds " + std::to_string(x.size()) + " and y " + std::to_string(y.size()) +
                          " floats, not rows x " + std::to_string(impl_->in) + " and rows x " +
                          std::to_string(impl_->out) + " for weight " + shape(impl_->out, impl_->in));
  apply(x.data(), rows, impl_->in, y.data(), impl_->out, add, threads);
}

void Linear::apply(const float* x, std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, bool add,
                   int threads) const {
  if (!impl_) throw InvalidArgument("linear: apply on an empty Linear (no weights)");
  const Impl& L = *impl_;
  if (rows < 0 || ldx < L.in || ldy < L.out || (rows > 0 && (!x || !y)))
    throw InvalidArgument("linear: apply with rows " + std::to_string(rows) + ", ldx " + std::to_string(ldx) +
                          ", ldy " + std::to_string(ldy) + " to weight " + shape(L.out, L.in) +
                          " (needs rows >= 0, ldx >= in, ldy >= out, data for rows > 0)");
  if (threads < 0 || threads > kMaxThreads)
    throw InvalidArgument("linear: threads " + std::to_string(threads) + " is outside [0, " +
                          std::to_string(kMaxThreads) + "]");
  if (rows == 0) return;
  const bool bf16 = L.dtype == DType::bf16, f16 = L.dtype == DType::f16, q8 = L.dtype == DType::q8_0;
  const int mr = bf16 ? L.ops->max_rows_bf16 : L.ops->max_rows_f32;
  const bool wide = !q8 && L.ops->wide_panels > 1 && (bf16 ? L.ops->wide_bf16 != nullptr
                                               : f16  ? L.ops->wide_f16 != nullptr
                                                      : L.ops->wide_f32 != nullptr);
  // Blocking: a block of kBlockRows rows of x (L2/L3) and a run of up to 2048 steps of k:
  // each panel's run of weights (256 KiB fp32, 128 KiB bf16) stays in L2 while the block's
  // tiles pass over it, so the weights come from memory rows/384 times, not rows/12, and
  // every tile reads long sequential streams. Measured on Zen 5 (bench linear, dim-2048
  // layer shapes at 512 and 2048 rows): 384 x 2048 gives 0.91-1.0 of oneDNN's roof where
  // 96 x 512 gave 0.78-0.85 on the MLP's shapes. The sums of a longer K are carried
  // between runs through `carry` (exact: stored and loaded). A few rows (decode) have
  // nothing to keep in cache but themselves: K in one run, so each panel's weights are one
  // contiguous read. The split changes no bit of the result.
  constexpr std::int64_t kBlockRows = 384, kFewRows = 16;  // 384: a multiple of every path's tile rows
  const std::int64_t steps = rows <= kFewRows ? L.in : 2048, runs = (L.in + steps - 1) / steps;
  int team = threads > 0 ? threads : omp_get_max_threads();
  if (omp_in_parallel()) team = 1;
  // Work: panels split between threads, or (fewer panels than threads) rows as well.
  const std::int64_t tiles = (rows + mr - 1) / mr;
  team = static_cast<int>(std::clamp<std::int64_t>(L.panels * tiles, 1, team));
  const int panel_groups = static_cast<int>(std::min<std::int64_t>(team, L.panels));
  const int row_groups = team / panel_groups;
  // bf16 weights multiply x rounded to bf16 pairs (kernels/linear_ops.hpp), rounded once
  // here for every panel. The buffer is the calling thread's, kept between calls.
  const std::int64_t ldp = (L.in + 1) / 2;
  thread_local kernels::AlignedBuffer<std::uint32_t> pairs;
  if (bf16) pairs.resize(static_cast<std::size_t>(rows * ldp));
  std::uint32_t* const xp = pairs.data;
#pragma omp parallel num_threads(team)
  {
    if (bf16) {
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) round_pairs(x + r * ldx, L.in, xp + r * ldp);
    }
    const int t = omp_get_thread_num();
    if (t < panel_groups * row_groups) {
      const int pg = t % panel_groups, rg = t / panel_groups;
      const std::int64_t p0 = L.panels * pg / panel_groups, p1 = L.panels * (pg + 1) / panel_groups;
      const std::int64_t r0 = tiles * rg / row_groups * mr, r1 = std::min(rows, tiles * (rg + 1) / row_groups * mr);
      const std::int64_t ldc = (p1 - p0) * P;
      thread_local kernels::AlignedBuffer<float> carry;
      if (runs > 1) carry.resize(static_cast<std::size_t>(std::min(kBlockRows, r1 - r0) * ldc));
      for (std::int64_t b = r0; b < r1; b += kBlockRows) {
        const std::int64_t b1 = std::min(r1, b + kBlockRows);
        for (std::int64_t run = 0; run < runs; ++run) {
          const std::int64_t k0 = run * steps, kn = std::min(steps, L.in - k0);
          const bool last = run + 1 == runs;
          for (std::int64_t p = p0; p < p1;) {
            // A group of full panels side by side for the tiles of few rows (ops.wide_*).
            const bool group = wide && p + L.ops->wide_panels <= p1 && (p + L.ops->wide_panels) * P <= L.out;
            const std::int64_t pn = group ? L.ops->wide_panels : 1;
            // q8_0: the panel's run of steps dequantized once for the block's row tiles into
            // fp32 (d * q, exact), then the f32 loop: the weights are never expanded whole.
            thread_local kernels::AlignedBuffer<float> deq;
            if (q8) {
              deq.resize(static_cast<std::size_t>(kn * P));
              const std::uint32_t* base = L.words.data + p * L.panel_words;
              for (std::int64_t s0 = 0; s0 < kn; s0 += kQ8Block) {
                const std::uint32_t* blk = base + (k0 + s0) / kQ8Block * kQ8Words;
                float d[P];
                std::memcpy(d, blk, sizeof d);
                const auto* q = reinterpret_cast<const std::int8_t*>(blk + 32);
                for (std::int64_t i = 0; i < kQ8Block; ++i)
                  for (int c = 0; c < P; ++c)
                    deq.data[(s0 + i) * P + c] = d[c] * static_cast<float>(q[i * P + c]);
              }
            }
            for (std::int64_t r = b; r < b1; r += mr) {
              const int m = static_cast<int>(std::min<std::int64_t>(mr, b1 - r));
              const bool together = group && m <= L.ops->wide_rows;
              for (std::int64_t q = p; q < p + pn; q += together ? pn : 1) {
                const int cols = static_cast<int>(std::min<std::int64_t>(P, L.out - q * P));
                const std::uint32_t* w = L.words.data + q * L.panel_words + (bf16 ? k0 / 2 : f16 ? 0 : k0) * P;
                float* c = runs > 1 ? carry.data + (r - b) * ldc + (q - p0) * P : nullptr;
                const float* from = run == 0 ? nullptr : c;
                float* to = last ? y + r * ldy + q * P : c;
                const std::int64_t ld_to = last ? ldy : ldc;
                const float* xr = x + r * ldx + k0;
                const std::uint32_t* pr = xp + r * ldp + k0 / 2;
                const auto* wf = reinterpret_cast<const float*>(w);
                const auto* wh = reinterpret_cast<const std::uint16_t*>(w) + (f16 ? k0 * P : 0);
                if (q8)
                  L.ops->panel_f32(xr, ldx, m, deq.data, kn, from, ldc, to, ld_to, cols, last && add);
                else if (together && f16)
                  L.ops->wide_f16(xr, ldx, m, wh, L.panel_words * 2, kn, from, ldc, to, ld_to, last && add);
                else if (f16)
                  L.ops->panel_f16(xr, ldx, m, wh, kn, from, ldc, to, ld_to, cols, last && add);
                else if (together && bf16)
                  L.ops->wide_bf16(pr, ldp, m, w, L.panel_words, kn, from, ldc, to, ld_to, last && add);
                else if (together)
                  L.ops->wide_f32(xr, ldx, m, wf, L.panel_words, kn, from, ldc, to, ld_to, last && add);
                else if (bf16)
                  L.ops->panel_bf16(pr, ldp, m, w, kn, from, ldc, to, ld_to, cols, last && add);
                else
                  L.ops->panel_f32(xr, ldx, m, wf, kn, from, ldc, to, ld_to, cols, last && add);
              }
            }
            p += pn;
          }
        }
      }
    }
  }
}

}  // namespace ringattn
