// ringattn::Linear (include/ringattn/linear.hpp): packing once, and the threaded walk over
// row blocks and panels around each path's panel loop (kernels/linear_ops.hpp).
#include "ringattn/linear.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/aligned_buffer.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/int_ops.hpp"
#include "kernels/quant_blocks.hpp"
#include "kernels/tensor_table.hpp"
#include "ringattn/error.hpp"
#include "ringattn/half.hpp"
#include "ringattn/tensor_types.hpp"

namespace ringattn {

// A run of W's rows held in one dtype: its own panels, at `offset` words into the buffer.
// A Linear is one part, or (blocks kept in their own dtypes) several stacked by rows.
struct LinearPart {
  DType dtype = DType::f32;
  LinearPath path = LinearPath::f32;  // the dtype's row of the tensor-type table says which loops
  std::int64_t row0 = 0, out = 0, panels = 0;
  std::int64_t panel_words = 0;  // 4-byte words per panel: in*32 (f32), ceil(in/2)*32 (bf16), in*16
                                 // (f16), in/block * the format's words (q8_0, q4_k, q6_k)
  std::size_t offset = 0;
  const kernels::QuantFormat* quant = nullptr;  // the block format (path blocks), or null
};

struct Linear::Impl {
  std::int64_t out = 0, in = 0;
  Isa isa = Isa::generic;
  const kernels::LinearOps* ops = nullptr;
  const kernels::IntOps* ints = nullptr;  // the block formats' integer tiles
  std::vector<LinearPart> parts;
  kernels::AlignedBuffer<std::uint32_t> words;
};

namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
constexpr int P = kernels::kPanel;

// A dtype Linear holds: one with a row in the table of tensor types.
bool known_held(DType d) { return kernels::tensor_row(d) != nullptr; }

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
  if (out < 1 || out > kMaxDim)
    throw InvalidArgument("linear: weight shape " + shape(out, in) + " is outside [1, 2^24] per side");
  const Block b{dtype, w, out};
  pack(dtype, in, isa, std::span<const Block>(&b, 1));
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

Linear::Linear(std::optional<DType> dtype, std::int64_t in, std::span<const Block> blocks, std::optional<Isa> isa) {
  for (const Block& b : blocks) {
    if (b.rows < 1 || !b.data || !known_held(b.dtype))
      throw InvalidArgument("linear: a block of " + std::to_string(b.rows) + " rows" + (b.data ? "" : " without data") +
                            " (needs rows >= 1, data, dtype fp32, bf16, fp16, q8_0, q4_k or q6_k)");
  }
  if (blocks.empty()) throw InvalidArgument("linear: no blocks of weights");
  pack(dtype, in, isa, blocks);
}

namespace {

// Bytes of one row of `in` values of `dtype` in a source block (in: whole blocks of it,
// at most 2^24 values, checked by pack).
std::size_t row_bytes(DType dtype, std::int64_t in) {
  const TensorType& t = *kernels::tensor_row(dtype);
  return static_cast<std::size_t>(in / t.block_values * t.block_bytes);
}

// Element k of a source row of fp32, bf16 or fp16, as fp32 (exact).
float source_value(const void* row, DType dtype, std::int64_t k) {
  if (dtype == DType::f32) return static_cast<const float*>(row)[k];
  const std::uint16_t h = static_cast<const std::uint16_t*>(row)[k];
  if (dtype == DType::f16) return from_f16(h);
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::int64_t panel_words_of(const LinearPart& part, std::int64_t in) {
  switch (part.path) {
    case LinearPath::f32: return in * P;
    case LinearPath::bf16: return (in + 1) / 2 * P;
    case LinearPath::f16: return in * P / 2;
    case LinearPath::blocks: return in / part.quant->block * part.quant->panel_words;
  }
  return 0;  // not reached: pack takes the path from the table
}

// Column j of a part's panel from W's row (`row`, of dtype `from`), converted to the
// part's dtype. `scratch` holds `in` floats: a quantized row decoded, where it is converted.
void pack_column(const LinearPart& part, std::int64_t in, std::uint32_t* panel, int j, const void* row, DType from,
                 std::vector<float>& scratch) {
  const auto* from_q = kernels::quant_format(from);
  if (part.quant && from == part.dtype) {  // the file's blocks, the same numbers
    for (std::int64_t b = 0; b < in / part.quant->block; ++b)
      kernels::pack_block(*part.quant, static_cast<const std::byte*>(row) + b * from_q->bytes,
                          panel + b * part.quant->panel_words, j);
    return;
  }
  if (from_q) {  // decoded (llama.cpp's values), then converted as fp32 weights are
    scratch.resize(static_cast<std::size_t>(in));
    for (std::int64_t b = 0; b < in / from_q->block; ++b)
      kernels::decode_block(*from_q, static_cast<const std::byte*>(row) + b * from_q->bytes,
                            scratch.data() + b * from_q->block);
    row = scratch.data();
    from = DType::f32;
  }
  if (part.dtype == DType::q8_0) {
    float v[32];
    for (std::int64_t b = 0; b < in / 32; ++b) {
      for (int i = 0; i < 32; ++i) v[i] = source_value(row, from, b * 32 + i);
      kernels::quantize_q8_0(v, panel + b * part.quant->panel_words, j);
    }
  } else if (part.path == LinearPath::f32) {
    for (std::int64_t k = 0; k < in; ++k) {
      const float v = source_value(row, from, k);
      std::memcpy(&panel[k * P + j], &v, 4);
    }
  } else if (part.path == LinearPath::f16) {  // [K][32] halves
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

}  // namespace

void Linear::pack(std::optional<DType> dtype, std::int64_t in, std::optional<Isa> isa, std::span<const Block> blocks) {
  // Each block's rows checked against what is left below kMaxDim before they are added:
  // a sum taken first could wrap onto a small total and the blocks be packed past it.
  // The parts' rows, panels and words below are then bounded by out and in.
  std::int64_t out = 0;
  for (const Block& b : blocks) {
    if (b.rows > kMaxDim - out)
      throw InvalidArgument("linear: the blocks' rows add up to more than 2^24 (a block of " + std::to_string(b.rows) +
                            " rows after " + std::to_string(out) + "); split the weight into Linears of at most 2^24 rows");
    out += b.rows;
  }
  if (out < 1 || out > kMaxDim || in < 1 || in > kMaxDim)
    throw InvalidArgument("linear: weight shape " + shape(out, in) + " is outside [1, 2^24] per side");
  if (dtype && !known_held(*dtype))
    throw InvalidArgument("linear: unknown weight dtype " + std::to_string(static_cast<int>(*dtype)));
  auto impl = std::make_shared<Impl>();
  impl->out = out;
  impl->in = in;
  impl->isa = kernels::resolve_isa(isa);
  impl->ops = &kernels::linear_ops_for(impl->isa);
  impl->ints = &kernels::int_ops_for(impl->isa);
  // The parts: every block in `dtype`, or each run of blocks of one dtype in it. Every
  // check before a byte is allocated.
  std::vector<std::pair<std::size_t, std::size_t>> runs;  // [first block, end)
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (runs.empty() || (!dtype && blocks[i].dtype != blocks[runs.back().first].dtype)) runs.push_back({i, i});
    runs.back().second = i + 1;
  }
  std::size_t words = 0;
  std::int64_t row0 = 0;
  for (const auto& [b0, b1] : runs) {
    LinearPart part;
    part.dtype = dtype.value_or(blocks[b0].dtype);
    part.path = kernels::tensor_row(part.dtype)->linear;
    part.quant = kernels::quant_format(part.dtype);
    if ((part.path == LinearPath::blocks) != (part.quant != nullptr))  // the table and the kernels disagree
      throw InvalidArgument("linear: dtype " + std::string(to_string(part.dtype)) +
                            " has no packed panel format for its Linear path");
    part.row0 = row0;
    for (std::size_t i = b0; i < b1; ++i) {
      const Block& b = blocks[i];
      part.out += b.rows;
      for (const TensorType* t : {kernels::tensor_row(b.dtype), kernels::tensor_row(part.dtype)})
        if (!t->splits_at(in))
          throw InvalidArgument("linear: " + std::string(t->name) + " weights need rows of a multiple of " +
                                std::to_string(t->block_values) + " values, not in = " + std::to_string(in));
      if ((part.dtype == DType::q4_k || part.dtype == DType::q6_k) && b.dtype != part.dtype)
        throw InvalidArgument("linear: " + std::string(to_string(part.dtype)) + " weights come only from " +
                              std::string(to_string(part.dtype)) + " blocks (a GGUF file's), not from " +
                              std::string(to_string(b.dtype)) + ": hold them as fp32, bf16, fp16 or q8_0");
    }
    part.panels = (part.out + P - 1) / P;
    part.panel_words = panel_words_of(part, in);
    part.offset = words;
    words += static_cast<std::size_t>(part.panels * part.panel_words);
    row0 += part.out;
    impl->parts.push_back(part);
  }
  impl->words.resize(words);
  std::uint32_t* dst = impl->words.data;
  std::memset(dst, 0, words * 4);
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
  // Panel p of a part, column j is output o = row0 + p*32 + j; its weights are row o of W,
  // each converted to the part's dtype (kept, widened exactly, or rounded to nearest even).
  for (const LinearPart& part : impl->parts) {
#pragma omp parallel for schedule(static) if (part.panels * part.panel_words > (1 << 20))
    for (std::int64_t p = 0; p < part.panels; ++p) {
      std::uint32_t* panel = dst + part.offset + static_cast<std::size_t>(p * part.panel_words);
      std::vector<float> scratch;
      for (int j = 0; j < P && p * P + j < part.out; ++j) {
        const auto [row, from] = row_of(part.row0 + p * P + j);
        pack_column(part, in, panel, j, row, from, scratch);
      }
    }
  }
  impl_ = std::move(impl);
}

std::int64_t Linear::out() const { return impl_ ? impl_->out : 0; }
std::int64_t Linear::in() const { return impl_ ? impl_->in : 0; }
DType Linear::dtype() const { return impl_ ? impl_->parts.front().dtype : DType::f32; }
bool Linear::mixed() const { return impl_ && impl_->parts.size() > 1; }
Isa Linear::isa() const { return impl_ ? impl_->isa : Isa::generic; }
const char* Linear::kernel() const {
  if (!impl_) return "none";
  if (activations_ == Activations::int8)
    for (const LinearPart& p : impl_->parts)
      if (p.path == LinearPath::blocks) return impl_->ints->name;
  return impl_->ops->name;
}

std::string_view to_string(Activations a) { return a == Activations::int8 ? "int8" : "fp32"; }

Activations parse_activations(std::string_view s) {
  if (s == "int8") return Activations::int8;
  if (s == "fp32") return Activations::fp32;
  throw InvalidArgument("activations: '" + std::string(s) +
                        "' is not one of int8 (block formats multiply 8-bit activations in integers) or fp32 "
                        "(activations as they are: the dequantized weights' results)");
}

void Linear::row(std::int64_t o, std::span<float> w_row) const {
  if (!impl_) throw InvalidArgument("linear: row of an empty Linear (no weights)");
  const Impl& L = *impl_;
  if (o < 0 || o >= L.out || static_cast<std::int64_t>(w_row.size()) != L.in)
    throw InvalidArgument("linear: row " + std::to_string(o) + " into " + std::to_string(w_row.size()) +
                          " floats of weight " + shape(L.out, L.in) + " (needs 0 <= row < out, in floats)");
  const LinearPart* part = &L.parts.front();
  for (const LinearPart& p : L.parts)
    if (o >= p.row0) part = &p;
  o -= part->row0;
  const std::uint32_t* panel = L.words.data + part->offset + (o / P) * part->panel_words;
  const int j = static_cast<int>(o % P);
  for (std::int64_t k = 0; k < L.in; ++k) {
    float& v = w_row[static_cast<std::size_t>(k)];
    if (part->path == LinearPath::blocks) {
      const int block = part->quant->block;
      v = kernels::packed_value(*part->quant, panel + (k / block) * part->quant->panel_words, static_cast<int>(k % block), j);
    } else if (part->path == LinearPath::f16) {
      v = from_f16(reinterpret_cast<const std::uint16_t*>(panel)[k * P + j]);
    } else {
      const std::uint32_t u =
          part->path == LinearPath::bf16 ? (panel[(k / 2) * P + j] >> (k % 2 ? 16 : 0)) << 16 : panel[k * P + j];
      std::memcpy(&v, &u, 4);
    }
  }
}

std::span<const std::byte> Linear::packed() const {
  if (!impl_) return {};
  return {reinterpret_cast<const std::byte*>(impl_->words.data), impl_->words.size * 4};
}

void Linear::apply(std::span<const float> x, std::span<float> y, bool add, int threads) const {
  if (!impl_) throw InvalidArgument("linear: apply on an empty Linear (no weights)");
  // Compared by division: rows * out could wrap onto y.size() for a huge x.
  const std::size_t in = static_cast<std::size_t>(impl_->in), out = static_cast<std::size_t>(impl_->out);
  const auto rows = static_cast<std::int64_t>(x.size() / in);
  if (x.size() % in != 0 || y.size() % out != 0 || y.size() / out != x.size() / in)
    throw InvalidArgument("linear: x holds " + std::to_string(x.size()) + " and y " + std::to_string(y.size()) +
                          " floats, not rows x " + std::to_string(impl_->in) + " and rows x " +
                          std::to_string(impl_->out) + " for weight " + shape(impl_->out, impl_->in));
  apply(x.data(), rows, impl_->in, y.data(), impl_->out, add, threads);
}

namespace {

// How a part's work is split between threads: its panels between groups of threads, and
// (fewer panels than threads) its row tiles of mr rows as well. Thread t's share: panels
// [p0, p1) and rows [r0, r1) (none if !has(t)).
struct Split {
  int team, panel_groups, row_groups;
  std::int64_t panels, rows, tiles, mr;
  Split(std::int64_t panels_, std::int64_t rows_, int mr_, int threads)
      : panels(panels_), rows(rows_), tiles((rows_ + mr_ - 1) / mr_), mr(mr_) {
    team = threads > 0 ? threads : omp_get_max_threads();
    if (omp_in_parallel()) team = 1;
    team = static_cast<int>(std::clamp<std::int64_t>(panels * tiles, 1, team));
    panel_groups = static_cast<int>(std::min<std::int64_t>(team, panels));
    row_groups = team / panel_groups;
  }
  bool has(int t) const { return t < panel_groups * row_groups; }
  struct Share {
    std::int64_t p0, p1, r0, r1;
  };
  Share share(int t) const {
    const int pg = t % panel_groups, rg = t / panel_groups;
    return {panels * pg / panel_groups, panels * (pg + 1) / panel_groups, tiles * rg / row_groups * mr,
            std::min(rows, tiles * (rg + 1) / row_groups * mr)};
  }
};

// One part's rows of y (y points at the part's first column): the blocked, threaded walk
// over row blocks, runs of k and panels around the path's panel loop. One function on
// purpose (112 lines): the loop nest shares one OpenMP region, its per-thread scratch and
// its schedule, which a split would pass through arguments on the hot path; issue 48's
// integer kernels replace its body.
void apply_part(const kernels::LinearOps& ops, const std::uint32_t* words, const LinearPart& part, std::int64_t in,
                const float* x, std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, bool add, int threads) {
  const bool bf16 = part.path == LinearPath::bf16, f16 = part.path == LinearPath::f16;
  const kernels::QuantFormat* quant = part.quant;
  // Block formats with few rows (decode) take the path's fused loop (ops.panel_quant): each
  // step unpacked in registers, nothing written; many rows (prefill) unpack a panel's run
  // once into fp32 for all the block's row tiles. The same bits either way.
  constexpr std::int64_t kFewRows = 16;
  const bool fused = quant && ops.panel_quant && rows <= kFewRows;
  const int mr = fused ? ops.quant_rows : bf16 ? ops.max_rows_bf16 : ops.max_rows_f32;
  const bool wide = !quant && ops.wide_panels > 1 && (bf16 ? ops.wide_bf16 != nullptr
                                                      : f16  ? ops.wide_f16 != nullptr
                                                             : ops.wide_f32 != nullptr);
  // Blocking: a block of kBlockRows rows of x (L2/L3) and a run of up to 2048 steps of k:
  // each panel's run of weights (256 KiB fp32, 128 KiB bf16) stays in L2 while the block's
  // tiles pass over it, so the weights come from memory rows/384 times, not rows/12, and
  // every tile reads long sequential streams. Measured on Zen 5 (bench linear, dim-2048
  // layer shapes at 512 and 2048 rows): 384 x 2048 gives 0.91-1.0 of oneDNN's roof where
  // 96 x 512 gave 0.78-0.85 on the MLP's shapes. The sums of a longer K are carried
  // between runs through `carry` (exact: stored and loaded). A few rows (decode) have
  // nothing to keep in cache but themselves: K in one run, so each panel's weights are one
  // contiguous read. The split changes no bit of the result. 2048 is a multiple of every
  // block format's 32 or 256 steps.
  constexpr std::int64_t kBlockRows = 384;  // 384: a multiple of every path's tile rows
  const std::int64_t steps = rows <= kFewRows ? in : 2048, runs = (in + steps - 1) / steps;
  const Split split(part.panels, rows, mr, threads);
  // bf16 weights multiply x rounded to bf16 pairs (kernels/linear_ops.hpp), rounded once
  // here for every panel. The buffer is the calling thread's, kept between calls.
  const std::int64_t ldp = (in + 1) / 2;
  thread_local kernels::AlignedBuffer<std::uint32_t> pairs;
  if (bf16) pairs.resize(static_cast<std::size_t>(rows * ldp));
  std::uint32_t* const xp = pairs.data;
  const std::int64_t out = part.out;
#pragma omp parallel num_threads(split.team)
  {
    if (bf16) {
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) round_pairs(x + r * ldx, in, xp + r * ldp);
    }
    if (const int t = omp_get_thread_num(); split.has(t)) {
      const auto [p0, p1, r0, r1] = split.share(t);
      const std::int64_t ldc = (p1 - p0) * P;
      thread_local kernels::AlignedBuffer<float> carry;
      if (runs > 1) carry.resize(static_cast<std::size_t>(std::min(kBlockRows, r1 - r0) * ldc));
      for (std::int64_t b = r0; b < r1; b += kBlockRows) {
        const std::int64_t b1 = std::min(r1, b + kBlockRows);
        for (std::int64_t run = 0; run < runs; ++run) {
          const std::int64_t k0 = run * steps, kn = std::min(steps, in - k0);
          const bool last = run + 1 == runs;
          for (std::int64_t p = p0; p < p1;) {
            // A group of full panels side by side for the tiles of few rows (ops.wide_*).
            const int wide_n = fused ? 2 : ops.wide_panels;
            const bool group = (wide || (fused && ops.quant_wide_rows > 0)) && p + wide_n <= p1 && (p + wide_n) * P <= out;
            const std::int64_t pn = group ? wide_n : 1;
            // Block formats: the panel's run of steps unpacked once for the block's row tiles
            // into fp32 (llama.cpp's values, exact), then the f32 loop: never expanded whole.
            thread_local kernels::AlignedBuffer<float> deq;
            if (quant && !fused) {
              deq.resize(static_cast<std::size_t>(kn * P));
              const std::uint32_t* base = words + p * part.panel_words;
              for (std::int64_t s0 = 0; s0 < kn; s0 += quant->block)
                ops.unpack(part.dtype, base + (k0 + s0) / quant->block * quant->panel_words, deq.data + s0 * P);
            }
            for (std::int64_t r = b; r < b1; r += mr) {
              const int m = static_cast<int>(std::min<std::int64_t>(mr, b1 - r));
              const bool together = group && m <= (fused ? ops.quant_wide_rows : ops.wide_rows);
              for (std::int64_t q = p; q < p + pn; q += together ? pn : 1) {
                const int cols = static_cast<int>(std::min<std::int64_t>(P, out - q * P));
                const std::uint32_t* w = words + q * part.panel_words + (bf16 ? k0 / 2 : f16 || quant ? 0 : k0) * P;
                float* c = runs > 1 ? carry.data + (r - b) * ldc + (q - p0) * P : nullptr;
                const float* from = run == 0 ? nullptr : c;
                float* to = last ? y + r * ldy + q * P : c;
                const std::int64_t ld_to = last ? ldy : ldc;
                const float* xr = x + r * ldx + k0;
                const std::uint32_t* pr = xp + r * ldp + k0 / 2;
                const auto* wf = reinterpret_cast<const float*>(w);
                const auto* wh = reinterpret_cast<const std::uint16_t*>(w) + (f16 ? k0 * P : 0);
                if (fused)
                  ops.panel_quant(part.dtype, xr, ldx, m, w + k0 / quant->block * quant->panel_words, part.panel_words,
                                  together ? 2 : 1, kn, from, ldc, to, ld_to, cols, last && add);
                else if (quant)
                  ops.panel_f32(xr, ldx, m, deq.data, kn, from, ldc, to, ld_to, cols, last && add);
                else if (together && f16)
                  ops.wide_f16(xr, ldx, m, wh, part.panel_words * 2, kn, from, ldc, to, ld_to, last && add);
                else if (f16)
                  ops.panel_f16(xr, ldx, m, wh, kn, from, ldc, to, ld_to, cols, last && add);
                else if (together && bf16)
                  ops.wide_bf16(pr, ldp, m, w, part.panel_words, kn, from, ldc, to, ld_to, last && add);
                else if (together)
                  ops.wide_f32(xr, ldx, m, wf, part.panel_words, kn, from, ldc, to, ld_to, last && add);
                else if (bf16)
                  ops.panel_bf16(pr, ldp, m, w, kn, from, ldc, to, ld_to, cols, last && add);
                else
                  ops.panel_f32(xr, ldx, m, wf, kn, from, ldc, to, ld_to, cols, last && add);
              }
            }
            p += pn;
          }
        }
      }
    }
  }
}

// One block-format part's rows of y in integers (kernels/int_ops.hpp): every row of x
// quantized once, then apply_part's walk — row blocks, runs of k, panels split between
// threads — with each panel's run unpacked once into IntBlocks for the block's row tiles.
// The fp32 sums carry between runs as apply_part's do (runs end on block boundaries), so
// the split changes no bit.
void apply_part_int(const kernels::IntOps& ops, const std::uint32_t* words, const LinearPart& part, std::int64_t in,
                    const float* x, std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, bool add,
                    int threads) {
  const kernels::IntFormat& f = *kernels::int_format(part.dtype);
  const std::int64_t blocks = in / f.block;
  // The quantized rows: int8 [rows][in], dx [rows][blocks], extra [rows][blocks * f.extra].
  const std::int64_t ldq = in, ldd = blocks, lde = blocks * f.extra;
  thread_local kernels::AlignedBuffer<std::uint32_t> qbuf;
  qbuf.resize(static_cast<std::size_t>(rows * (ldq / 4 + ldd + lde)));
  auto* const qx = reinterpret_cast<std::int8_t*>(qbuf.data);
  auto* const dx = reinterpret_cast<float*>(qbuf.data + rows * ldq / 4);
  auto* const ex = reinterpret_cast<std::int32_t*>(qbuf.data + rows * (ldq / 4 + ldd));
  constexpr std::int64_t kFewRows = 16, kBlockRows = 384;
  const int mr = ops.rows;
  // A path that reads packed blocks in registers (ops.packed) takes the few rows of a decode
  // step straight from them: each weight read once, nothing written; else (and for many
  // rows, whose tiles share each unpacked run) runs of 256 steps for few rows, so a panel's
  // unpacked run (9-11 KiB) is written and read back in L1, and of 2048 for many.
  const bool packed = ops.packed && rows <= kFewRows;
  const std::int64_t steps = packed ? in : rows <= kFewRows ? 256 : 2048, runs = (in + steps - 1) / steps;
  const Split split(part.panels, rows, mr, threads);
  const std::int64_t out = part.out;
#pragma omp parallel num_threads(split.team)
  {
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r)
      ops.quantize(f, x + r * ldx, ldx, 1, in, {qx + r * ldq, dx + r * ldd, ex + r * lde, ldq, ldd, lde});
    if (const int t = omp_get_thread_num(); split.has(t)) {
      const auto [p0, p1, r0, r1] = split.share(t);
      const std::int64_t ldc = (p1 - p0) * P;
      thread_local kernels::AlignedBuffer<float> carry;
      if (runs > 1) carry.resize(static_cast<std::size_t>(std::min(kBlockRows, r1 - r0) * ldc));
      thread_local kernels::AlignedBuffer<std::uint32_t> unpacked;
      if (!packed) unpacked.resize(static_cast<std::size_t>(steps / f.block * f.block_words));
      for (std::int64_t b = r0; b < r1; b += kBlockRows) {
        const std::int64_t b1 = std::min(r1, b + kBlockRows);
        for (std::int64_t run = 0; run < runs; ++run) {
          const std::int64_t k0 = run * steps, kb = std::min(steps, in - k0) / f.block, kb0 = k0 / f.block;
          const bool last = run + 1 == runs;
          for (std::int64_t p = p0; p < p1; ++p) {
            const std::uint32_t* base = words + p * part.panel_words + kb0 * part.quant->panel_words;
            for (std::int64_t i = 0; i < kb && !packed; ++i)
              ops.unpack(f, base + i * part.quant->panel_words, unpacked.data + i * f.block_words);
            const int cols = static_cast<int>(std::min<std::int64_t>(P, out - p * P));
            for (std::int64_t r = b; r < b1; r += mr) {
              const int m = static_cast<int>(std::min<std::int64_t>(mr, b1 - r));
              float* c = runs > 1 ? carry.data + (r - b) * ldc + (p - p0) * P : nullptr;
              const float* from = run == 0 ? nullptr : c;
              float* to = last ? y + r * ldy + p * P : c;
              const std::int64_t ld_to = last ? ldy : ldc;
              const kernels::IntRowsView xv{qx + r * ldq + k0, dx + r * ldd + kb0, ex + r * lde + kb0 * f.extra, ldq, ldd,
                                            lde};
              if (packed)
                ops.packed(f, xv, m, base, part.quant->panel_words, kb, from, ldc, to, ld_to, last ? cols : P, last && add);
              else
                ops.tile(f, xv, m, unpacked.data, kb, from, ldc, to, ld_to, last ? cols : P, last && add);
            }
          }
        }
      }
    }
  }
}

}  // namespace

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
  // x + r * ldx and y + r * ldy for every row: more floats than an address space holds
  // cannot be the caller's arrays, and the offsets would overflow.
  constexpr std::int64_t kMaxFloats = PTRDIFF_MAX / static_cast<std::int64_t>(sizeof(float));
  if (rows > 0 && (ldx > kMaxFloats / rows || ldy > kMaxFloats / rows))
    throw InvalidArgument("linear: apply with rows " + std::to_string(rows) + ", ldx " + std::to_string(ldx) +
                          ", ldy " + std::to_string(ldy) + " spans more floats than an address space holds");
  if (rows == 0) return;
  for (const LinearPart& part : L.parts) {
    if (part.path == LinearPath::blocks && activations_ == Activations::int8)
      apply_part_int(*L.ints, L.words.data + part.offset, part, L.in, x, rows, ldx, y + part.row0, ldy, add, threads);
    else
      apply_part(*L.ops, L.words.data + part.offset, part, L.in, x, rows, ldx, y + part.row0, ldy, add, threads);
  }
}

}  // namespace ringattn
