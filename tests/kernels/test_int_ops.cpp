// The block formats' integer arithmetic (kernels/int_ops.hpp) table by table: every table
// of every ISA path this CPU runs (AVX512-VNNI with and without VBMI's packed reads, the
// portable loops on AVX-512, AVX2, NEON and generic) quantizes the same rows and multiplies
// the same packed panel blocks to the generic table's bits — through IntBlocks (unpack, tile)
// and, where the table has it, straight from the packed blocks — and the generic table
// against float64 under the same integers. Packed blocks are random words in the layouts
// kernels/quant_blocks.hpp documents (not packed by Linear). No oneDNN: also under qemu.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"

using namespace ringattn;
using namespace ringattn::kernels;

namespace {

int panel_words(DType d) { return d == DType::q8_0 ? 288 : d == DType::q4_k ? 1216 : 1696; }

// `blocks` random packed panel blocks of d: scales small floats, every byte of codes random.
std::vector<std::uint32_t> random_panel(DType d, int blocks, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(1e-3f, 2e-2f);
  const int words = panel_words(d);
  std::vector<std::uint32_t> w(static_cast<std::size_t>(blocks * words));
  for (auto& v : w) v = rng();
  for (int b = 0; b < blocks; ++b) {
    float* f = reinterpret_cast<float*>(w.data() + b * words);
    const int floats = d == DType::q4_k ? 64 : 32;  // d (and dmin)
    for (int i = 0; i < floats; ++i) f[i] = scale(rng);
    if (d == DType::q4_k) {  // 6-bit scales and mins
      auto* s = reinterpret_cast<std::uint8_t*>(w.data() + b * words + 64);
      for (int i = 0; i < 512; ++i) s[i] &= 63;
    }
  }
  return w;
}

struct Quantized {
  std::vector<std::int8_t> q;
  std::vector<float> dx;
  std::vector<std::int32_t> extra;
  std::int64_t ldq, ldd, lde;
  IntRows rows() { return {q.data(), dx.data(), extra.data(), ldq, ldd, lde}; }
  IntRowsView view() const { return {q.data(), dx.data(), extra.data(), ldq, ldd, lde}; }
};

Quantized quantize(const IntOps& ops, const IntFormat& f, const std::vector<float>& x, int m, std::int64_t in) {
  Quantized out;
  out.ldq = in;
  out.ldd = in / f.block;
  out.lde = out.ldd * f.extra;
  out.q.resize(static_cast<std::size_t>(m * in));
  out.dx.resize(static_cast<std::size_t>(m * out.ldd));
  out.extra.resize(static_cast<std::size_t>(m * out.lde));
  ops.quantize(f, x.data(), in, m, in, out.rows());
  return out;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// y [m][32] from a carried sum a [m][32] (or none) through `ops`: via IntBlocks, or packed.
std::vector<float> run(const IntOps& ops, const IntFormat& f, const Quantized& q, int m,
                       const std::vector<std::uint32_t>& panel, int blocks, const std::vector<float>* a, int cols,
                       bool packed) {
  std::vector<float> y(static_cast<std::size_t>(m * 40), 0.5f);  // ldy 40: columns past cols stay 0.5
  if (packed) {
    ops.packed(f, q.view(), m, panel.data(), panel_words(f.dtype), blocks, a ? a->data() : nullptr, 32, y.data(), 40,
               cols, a != nullptr);
  } else {
    std::vector<std::uint32_t> unpacked(static_cast<std::size_t>(blocks * f.block_words));
    for (int b = 0; b < blocks; ++b)
      ops.unpack(f, panel.data() + b * panel_words(f.dtype), unpacked.data() + b * f.block_words);
    ops.tile(f, q.view(), m, unpacked.data(), blocks, a ? a->data() : nullptr, 32, y.data(), 40, cols, a != nullptr);
  }
  return y;
}

}  // namespace

TEST_CASE("int ops: every table of every path gives the generic table's bits, through IntBlocks and packed blocks") {
  const IntOps& generic = int_ops_for(Isa::generic);
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k}) {
    const IntFormat& f = *int_format(d);
    const int blocks = d == DType::q8_0 ? 9 : 3;
    const std::int64_t in = blocks * f.block;
    const std::vector<std::uint32_t> panel = random_panel(d, blocks, 5);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(4 * in));
    for (auto& v : x) v = normal(rng) * (rng() % 4 == 0 ? 30.0f : 1.0f);
    for (std::int64_t k = 0; k < f.block; ++k) x[static_cast<std::size_t>(in + k)] = 0;  // row 1's first block: zeros
    std::vector<float> carry(4 * 32);
    for (auto& v : carry) v = normal(rng);
    for (Isa isa : available_isas())
      for (const IntOps* ops : int_ops_variants(isa)) {
        CAPTURE(to_string(d));
        CAPTURE(ops->name);
        const Quantized want_q = quantize(generic, f, x, 4, in), got_q = quantize(*ops, f, x, 4, in);
        CHECK(want_q.q == got_q.q);
        CHECK(std::memcmp(want_q.dx.data(), got_q.dx.data(), want_q.dx.size() * 4) == 0);
        CHECK(want_q.extra == got_q.extra);
        for (int m = 1; m <= 4; ++m)
          for (int cols : {32, 17, 5})
            for (const std::vector<float>* a : {static_cast<const std::vector<float>*>(nullptr), static_cast<const std::vector<float>*>(&carry)}) {
              CAPTURE(m);
              CAPTURE(cols);
              const std::vector<float> want = run(generic, f, want_q, m, panel, blocks, a, cols, false);
              CHECK(same(run(*ops, f, got_q, m, panel, blocks, a, cols, false), want));
              if (ops->packed) CHECK(same(run(*ops, f, got_q, m, panel, blocks, a, cols, true), want));
            }
      }
  }
}

TEST_CASE("int ops: the generic table against float64 of the same integers and scales") {
  const IntOps& ops = int_ops_for(Isa::generic);
  for (DType d : {DType::q8_0, DType::q4_k, DType::q6_k}) {
    CAPTURE(to_string(d));
    const IntFormat& f = *int_format(d);
    const int blocks = 2;
    const std::int64_t in = blocks * f.block;
    const std::vector<std::uint32_t> panel = random_panel(d, blocks, 9);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(in));
    for (auto& v : x) v = normal(rng);
    const Quantized q = quantize(ops, f, x, 1, in);
    const std::vector<float> y = run(ops, f, q, 1, panel, blocks, nullptr, 32, false);
    // Each weight's value by the layouts (quant_blocks.hpp), times the quantized activation.
    for (int c = 0; c < 32; ++c) {
      double want = 0, mag = 0;
      for (int b = 0; b < blocks; ++b) {
        const std::uint32_t* blk = panel.data() + b * panel_words(d);
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(blk);
        const float* fl = reinterpret_cast<const float*>(blk);
        for (int s = 0; s < f.block; ++s) {
          double w;
          if (d == DType::q8_0) {
            w = double(fl[c]) * static_cast<std::int8_t>(bytes[128 + s * 32 + c]);
          } else if (d == DType::q4_k) {
            const int t = s / 32, nib = bytes[768 + s * 16 + c % 16];
            const int qv = c < 16 ? nib & 15 : nib >> 4;
            w = double(fl[c]) * bytes[256 + t * 32 + c] * qv - double(fl[32 + c]) * bytes[512 + t * 32 + c];
          } else {
            const int nib = bytes[640 + s * 16 + c % 16], hi = (bytes[4736 + s * 8 + c % 8] >> (2 * (c / 8))) & 3;
            const int qv = (c < 16 ? nib & 15 : nib >> 4) | hi << 4;
            w = double(fl[c]) * static_cast<std::int8_t>(bytes[128 + (s / 16) * 32 + c]) * (qv - 32);
          }
          const double xv = double(q.dx[static_cast<std::size_t>(b)]) * q.q[static_cast<std::size_t>(b * f.block + s)];
          want += w * xv;
          mag += std::fabs(w * xv);
        }
      }
      CAPTURE(c);
      CHECK(std::fabs(y[static_cast<std::size_t>(c)] - want) <= 1e-6 * mag + 1e-30);
    }
  }
}

TEST_CASE("int ops: quantization: dx = amax / 127, nearest even, zero blocks zero, non-finite blocks NaN") {
  const IntOps& ops = int_ops_for(Isa::generic);
  const IntFormat& f = *int_format(DType::q8_0);
  std::vector<float> x(96, 0.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i - 16) * 0.5f;  // amax 8
  x[33] = std::numeric_limits<float>::infinity();
  const Quantized q = quantize(ops, f, x, 1, 96);
  CHECK(q.dx[0] == 8.0f / 127.0f);
  CHECK(q.q[0] == -127);
  CHECK(q.q[1] == static_cast<std::int8_t>(std::nearbyint(-7.5f / (8.0f / 127.0f))));
  CHECK(q.q[16] == 0);
  std::int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += q.q[static_cast<std::size_t>(i)];
  CHECK(q.extra[0] == -128 * sum);
  CHECK(std::isnan(q.dx[1]));
  CHECK(q.dx[2] == 0.0f);
  // A block of denormals quantizes as any other (its reciprocal scale would overflow).
  std::vector<float> tiny(32);
  for (int i = 0; i < 32; ++i) tiny[static_cast<std::size_t>(i)] = static_cast<float>(i - 16) * 1e-40f;
  const Quantized t = quantize(ops, f, tiny, 1, 32);
  CHECK(t.dx[0] == std::fabs(tiny[0]) / 127.0f);  // amax: element 0, -16e-40 as a denormal holds it
  CHECK(t.q[0] == -127);
  CHECK(t.q[31] == static_cast<std::int8_t>(std::nearbyint(15e-40f / t.dx[0])));
}
