// The weight matmul's panel loop (kernels/linear_ops.hpp) on every ISA path: against a
// float64 sum, against the generic path (bf16: bit for bit, the dot instruction's order),
// and a row's result the same whatever rows share the call; f16 weights as the f32
// loops on the widened values. The panels are packed here from the layout the header documents, not by
// kernels/linear.cpp, so a packing bug and a loop bug cannot cancel. No oneDNN: this runs
// natively and under qemu-aarch64.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/half.hpp"

using namespace ringattn;
using kernels::kPanel;
using kernels::LinearOps;

namespace {

std::uint16_t to_bf16(float f) {  // round to nearest even (finite inputs)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// m rows of k steps of x (row stride ldx) as bf16 word pairs, row stride ldp words.
std::vector<std::uint32_t> pairs(const float* x, std::int64_t ldx, int m, int k, std::int64_t ldp) {
  std::vector<std::uint32_t> out(std::size_t(m) * ldp, 0xDEADBEEFu);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < (k + 1) / 2; ++p) {
      const std::uint32_t lo = to_bf16(x[i * ldx + 2 * p]), hi = 2 * p + 1 < k ? to_bf16(x[i * ldx + 2 * p + 1]) : 0;
      out[std::size_t(i) * ldp + p] = lo | hi << 16;
    }
  return out;
}

// One panel: w[k][j] for k < K, j < cols (zero beyond), as the path reads it.
struct Panel {
  int k, cols;
  bool bf16;
  std::vector<float> w;  // the weights as the sum should use them (bf16: the rounded values)
  std::vector<float> f32;
  std::vector<std::uint32_t> words;

  Panel(int k_, int cols_, bool bf16_, unsigned seed) : k(k_), cols(cols_), bf16(bf16_), w(std::size_t(k_) * kPanel) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int s = 0; s < k; ++s)
      for (int j = 0; j < cols; ++j) {
        const float v = d(rng);
        w[std::size_t(s) * kPanel + j] = bf16 ? from_bf16(to_bf16(v)) : v;
      }
    if (bf16) {
      words.assign(std::size_t((k + 1) / 2) * kPanel, 0);
      for (int s = 0; s < k; ++s)
        for (int j = 0; j < kPanel; ++j)
          words[std::size_t(s / 2) * kPanel + j] |= std::uint32_t(to_bf16(w[std::size_t(s) * kPanel + j]))
                                                    << (s % 2 ? 16 : 0);
    } else {
      f32 = w;
    }
  }
  void run(const LinearOps& ops, const float* x, std::int64_t ldx, int m, float* y, std::int64_t ldy, bool add) const {
    run_steps(ops, x, ldx, m, 0, k, nullptr, 0, y, ldy, add);
  }
  // Steps [s0, s0 + n) only (s0 even), carrying the sums in a (null: from zero). bf16: x's
  // steps [0, k) of each row rounded into word pairs first, as kernels/linear.cpp does.
  void run_steps(const LinearOps& ops, const float* x, std::int64_t ldx, int m, int s0, int n, const float* a,
                 std::int64_t lda, float* y, std::int64_t ldy, bool add) const {
    if (bf16) {
      const std::int64_t ldp = (k + 1) / 2 + 1;  // strided: the pad word is never read
      const std::vector<std::uint32_t> xp = pairs(x, ldx, m, k, ldp);
      ops.panel_bf16(xp.data() + s0 / 2, ldp, m, words.data() + std::size_t(s0 / 2) * kPanel, n, a, lda, y, ldy, cols,
                     add);
    } else {
      ops.panel_f32(x + s0, ldx, m, f32.data() + std::size_t(s0) * kPanel, n, a, lda, y, ldy, cols, add);
    }
  }
};



// Every table this CPU runs (AVX-512 with and without the bf16 dot instruction).
std::vector<const LinearOps*> all_paths() {
  std::vector<const LinearOps*> out;
  for (Isa isa : available_isas())
    for (const LinearOps* ops : kernels::linear_ops_variants(isa)) out.push_back(ops);
  return out;
}

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("linear panel loop: every path against float64, the generic path, and itself row by row") {
  const LinearOps& generic = kernels::linear_ops_for(Isa::generic);
  for (const LinearOps* path : all_paths()) {
    const LinearOps& ops = *path;
    for (bool bf16 : {false, true}) {
      const int max_rows = bf16 ? ops.max_rows_bf16 : ops.max_rows_f32;
      REQUIRE(max_rows >= 1);
      for (int k : {1, 2, 3, 16, 17, 255}) {
        for (int cols : {32, 31, 17, 16, 15, 1}) {
          CAPTURE(ops.name);
          CAPTURE(bf16);
          CAPTURE(k);
          CAPTURE(cols);
          const Panel panel(k, cols, bf16, unsigned(k * 131 + cols));
          const std::int64_t ldx = k + 3, ldy = kPanel + 5;  // strided rows: nothing beyond is read or written
          const std::vector<float> x = randn(std::size_t(max_rows) * ldx, unsigned(k + cols));
          const std::vector<float> y0 = randn(std::size_t(max_rows) * ldy, 7);
          for (bool add : {false, true}) {
            CAPTURE(add);
            std::vector<float> y = y0, yg = y0;
            panel.run(ops, x.data(), ldx, max_rows, y.data(), ldy, add);
            for (int i = 0; i < max_rows; i += generic.max_rows_f32)
              panel.run(generic, x.data() + i * ldx, ldx, std::min(generic.max_rows_f32, max_rows - i),
                        yg.data() + i * ldy, ldy, add);
            for (int i = 0; i < max_rows; ++i) {
              // The same row alone: bitwise the same (batch invariance).
              std::vector<float> y1 = y0;
              panel.run(ops, x.data() + i * ldx, ldx, 1, y1.data() + i * ldy, ldy, add);
              for (int j = 0; j < ldy; ++j) {
                const std::size_t at = std::size_t(i) * ldy + j;
                CHECK(std::memcmp(&y1[at], &y[at], 4) == 0);
                if (j >= cols) {  // beyond the panel's columns: untouched
                  CHECK(y[at] == y0[at]);
                  continue;
                }
                double sum = 0, mag = 0;
                for (int s = 0; s < k; ++s) {
                  const float xs = x[std::size_t(i) * ldx + s];
                  const double p = double(bf16 ? from_bf16(to_bf16(xs)) : xs) * panel.w[std::size_t(s) * kPanel + j];
                  sum += p;
                  mag += std::fabs(p);
                }
                const double want = (add ? double(y0[at]) : 0.0) + sum;
                const double tol = 2.0 * (k + 1) * 0x1p-24 * (mag + (add ? std::fabs(y0[at]) : 0.0)) + 1e-30;
                CHECK(std::fabs(y[at] - want) <= tol);
                CHECK(std::fabs(double(y[at]) - yg[at]) <= 2 * tol);
                if (bf16) CHECK(std::memcmp(&y[at], &yg[at], 4) == 0);  // exact products, one order: the same bits
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("linear panel loop: a K split into runs carrying their sums is the same, bit for bit") {
  for (const LinearOps* path : all_paths()) {
    const LinearOps& ops = *path;
    for (bool bf16 : {false, true}) {
      const int m = bf16 ? ops.max_rows_bf16 : ops.max_rows_f32;
      for (int cols : {32, 20, 7}) {
        CAPTURE(ops.name);
        CAPTURE(bf16);
        CAPTURE(cols);
        const int k = 101;
        const Panel panel(k, cols, bf16, 11);
        const std::vector<float> x = randn(std::size_t(m) * k, 12);
        const std::vector<float> y0 = randn(std::size_t(m) * kPanel, 13);
        for (bool add : {false, true}) {
          std::vector<float> whole = y0, split = y0, carry(std::size_t(m) * kPanel, -1.0f);
          panel.run(ops, x.data(), k, m, whole.data(), kPanel, add);
          // Runs of 40, 34 and 27 steps: the first from zero into carry, the middle carry to
          // carry in place, the last carry into y (stored or added).
          panel.run_steps(ops, x.data(), k, m, 0, 40, nullptr, 0, carry.data(), kPanel, false);
          panel.run_steps(ops, x.data(), k, m, 40, 34, carry.data(), kPanel, carry.data(), kPanel, false);
          panel.run_steps(ops, x.data(), k, m, 74, 27, carry.data(), kPanel, split.data(), kPanel, add);
          CHECK(std::memcmp(whole.data(), split.data(), whole.size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("linear panel loop: the wide calls (few rows, several panels) equal the panels one by one, bit for bit") {
  for (const LinearOps* path : all_paths()) {
    const LinearOps& ops = *path;
    if (ops.wide_panels < 2) continue;
    for (bool bf16 : {false, true}) {
      for (int k : {1, 2, 7, 64, 65}) {
        CAPTURE(ops.name);
        CAPTURE(bf16);
        CAPTURE(k);
        const int np = ops.wide_panels;
        std::vector<Panel> panels;
        for (int q = 0; q < np; ++q) panels.emplace_back(k, kPanel, bf16, unsigned(100 * k + q));
        // The panels' words end to end, as kernels/linear.cpp lays them out (stride = one panel).
        const std::int64_t stride = bf16 ? std::int64_t((k + 1) / 2) * kPanel : std::int64_t(k) * kPanel;
        std::vector<std::uint32_t> words;
        for (const Panel& p : panels) {
          if (bf16) {
            words.insert(words.end(), p.words.begin(), p.words.end());
          } else {
            const auto* u = reinterpret_cast<const std::uint32_t*>(p.f32.data());
            words.insert(words.end(), u, u + p.f32.size());
          }
        }
        const std::int64_t ldx = k + 1, ld = np * kPanel + 3;
        for (int m = 1; m <= ops.wide_rows; ++m) {
          const std::vector<float> x = randn(std::size_t(m) * ldx, unsigned(m + k));
          const std::vector<float> y0 = randn(std::size_t(m) * ld, 5), carried = randn(std::size_t(m) * ld, 6);
          for (bool add : {false, true})
            for (bool carry : {false, true}) {
              std::vector<float> wide = y0, one = y0;
              const float* a = carry ? carried.data() : nullptr;
              if (bf16) {
                const std::vector<std::uint32_t> xp = pairs(x.data(), ldx, m, k, ldx);
                ops.wide_bf16(xp.data(), ldx, m, words.data(), stride, k, a, ld, wide.data(), ld, add);
              } else {
                ops.wide_f32(x.data(), ldx, m, reinterpret_cast<const float*>(words.data()), stride, k, a, ld,
                             wide.data(), ld, add);
              }
              for (int q = 0; q < np; ++q)
                panels[std::size_t(q)].run_steps(ops, x.data(), ldx, m, 0, k, carry ? carried.data() + q * kPanel : nullptr,
                                                 ld, one.data() + q * kPanel, ld, add);
              CHECK(std::memcmp(wide.data(), one.data(), wide.size() * 4) == 0);
            }
        }
      }
    }
  }
}

TEST_CASE("linear panel loop: f16 weights (panels and wide calls) give the bits of f32 weights of the same values") {
  for (const LinearOps* path : all_paths()) {
    const LinearOps& ops = *path;
    for (int k : {1, 2, 17, 300}) {
      CAPTURE(ops.name);
      CAPTURE(k);
      const int np = std::max(ops.wide_panels, 1);
      // np panels end to end: f16 halves [k][32] each, and the same values widened as floats.
      std::vector<std::uint16_t> halves;
      std::vector<float> floats;
      for (float v : randn(std::size_t(np) * k * kPanel, unsigned(k))) {
        halves.push_back(to_f16(v));
        floats.push_back(from_f16(halves.back()));
      }
      const std::int64_t ldx = k + 1, ld = np * kPanel + 3, stride = std::int64_t(k) * kPanel;
      const int m = ops.max_rows_f32;
      const std::vector<float> x = randn(std::size_t(m) * ldx, 3), y0 = randn(std::size_t(m) * ld, 4);
      const std::vector<float> carried = randn(std::size_t(m) * ld, 5);
      for (bool add : {false, true})
        for (int cols : {32, 19}) {
          std::vector<float> a = y0, b = y0;
          ops.panel_f16(x.data(), ldx, m, halves.data(), k, carried.data(), ld, a.data(), ld, cols, add);
          ops.panel_f32(x.data(), ldx, m, floats.data(), k, carried.data(), ld, b.data(), ld, cols, add);
          CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        }
      for (int rows = 1; rows <= ops.wide_rows; ++rows)
        for (bool add : {false, true}) {
          std::vector<float> a = y0, b = y0;
          ops.wide_f16(x.data(), ldx, rows, halves.data(), stride, k, nullptr, ld, a.data(), ld, add);
          ops.wide_f32(x.data(), ldx, rows, floats.data(), stride, k, nullptr, ld, b.data(), ld, add);
          CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
        }
    }
  }
}

TEST_CASE("linear panel loop: the paths' tables are complete") {
  for (const LinearOps* path : all_paths()) {
    const LinearOps& ops = *path;
    CAPTURE(ops.name);
    CHECK((ops.panel_f32 != nullptr));
    CHECK((ops.panel_bf16 != nullptr));
    CHECK((ops.panel_f16 != nullptr));
    CHECK(ops.max_rows_f32 >= 1);
    CHECK(ops.max_rows_bf16 >= 1);
    if (ops.wide_panels > 1) {  // a path with wide calls has both, for at least one row
      CHECK((ops.wide_f32 != nullptr));
      CHECK((ops.wide_bf16 != nullptr));
      CHECK((ops.wide_f16 != nullptr));
      CHECK(ops.wide_rows >= 1);
    }
  }
}
