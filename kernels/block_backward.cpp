// Block attention backward: one query block x one key/value block, FlashAttention-2's
// schedule on a CPU (see include/ringattn/block_backward.hpp for the math):
//
//   parallel over (kv head g, key tile)             -- OpenMP, dynamic: causal items differ
//     dK, dV tile accumulators (fp32, [tk x head_dim]) = 0
//     for each query tile that sees this key tile, for each query head of g:
//       Q and dO rows read in place (copied dense only to widen bf16 for fp32 matmuls)
//       per piece (the forward's tile plan: full tiles, and 64-row strips of partial ones)
//         S  = Q Kᵀ,  dP = dO Vᵀ              oneDNN, K and V from panels packed once
//         P  = exp(scale S − lse)  on the visible columns, 0 elsewhere    (one grad_row
//         dS = scale · P ∘ (dP − D)            0 elsewhere                  op per row)
//         dV += Pᵀ dO,  dK += dSᵀ Q            oneDNN, Pᵀ/dSᵀ read in place, C += A B
//         dQ rows += dS K                      one thread: by the matmul in place (C +=);
//                                              more: into a scratch tile, added under a lock
//     dK, dV tile added to the caller's dk, dv (this item alone owns those rows)
//
// The scale is folded into dS, so dQ and dK need no pass of their own. Key tiles are
// 256 wide for both matmul kinds: the item holds S, dP and both accumulators (4 x 128 KiB
// at head_dim 128) in L2. With more than one thread, dQ rows of one (query tile, head) may
// be added by two items at once; a striped lock keeps each add whole (an add is O(rows x head_dim), its piece
// O(rows x keys x head_dim)). Nothing can fail inside the parallel region: the inputs are
// checked, the primitives created and the panels packed before it.
#include "ringattn/block_backward.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/aligned_buffer.hpp"
#include "kernels/internals.hpp"
#include "kernels/kernel_setup.hpp"
#include "kernels/kv_panels.hpp"
#include "kernels/matmul_cache.hpp"
#include "kernels/tile_plan.hpp"
#include "kernels/visible_range.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {

using kernels::AlignedBuffer;
using kernels::kTileQ;
using kernels::MatmulShape;
using kernels::Piece;

constexpr std::int64_t kTileK = 256;
constexpr std::int64_t kChunkKeys = 8 * kTileK;  // packed K/V bounded to 2048 keys (4 panels)
constexpr float kLog2e = 1.4426950408889634f;
constexpr const char* kWho = "block attention backward";

struct Scratch {
  AlignedBuffer<char> q_tile, do_tile;       // kTileQ x D, matmul dtype, when Q and dO need widening
  const char *q_at = nullptr, *do_at = nullptr;  // the current tile's first row (in place or the copies)
  AlignedBuffer<float> s, dp;                // kTileQ x kTileK: S then P, dP then dS (in place)
  AlignedBuffer<std::uint16_t> p16, ds16;    // bf16 copies when the matmuls are bf16
  AlignedBuffer<float> dq;                   // kTileQ x D, one piece's dS K
  AlignedBuffer<float> dk, dv;               // kTileK x D, the item's accumulators
};

// A piece of the plan, with the query tile it belongs to.
struct KeyEntry {
  std::int64_t qt;
  Piece pc;
};

void check_finite(const kernels::SoftmaxOps& ops, const void* x, std::int64_t n, DType dt, const char* name) {
  const bool bad = dt == DType::bf16 ? ops.has_non_finite_bf16(static_cast<const std::uint16_t*>(x), n)
                                     : ops.has_non_finite_f32(static_cast<const float*>(x), n);
  if (bad)
    throw InvalidArgument(std::string(kWho) + ": " + name +
                          " holds NaN or inf; the backward takes finite inputs only (check the forward's inputs "
                          "and the loss)");
}

}  // namespace

struct BlockAttentionBackward::Impl {
  kernels::KernelSetup setup;
  const AttentionConfig& cfg() const { return setup.cfg; }
  AlignedBuffer<char> k_panel, k_rows, v_panel, v_rows;
  kernels::MatmulCache matmuls;
  std::vector<Scratch> scratch;
  std::vector<std::int64_t> qpos, kpos;
  std::vector<std::vector<Piece>> plan;
  std::vector<std::vector<KeyEntry>> by_key;
  std::array<std::mutex, 64> dq_locks;
  std::atomic<std::uint64_t>* progress = nullptr;

  struct Chunk {
    const void *q, *k, *v, *d_o;
    const std::int32_t *qdocs, *kdocs;  // null without documents
    const std::int64_t* kpos;
    std::int64_t nk;
    const float *lse, *delta;
    float *dq, *dk, *dv;  // dk, dv at the chunk's first key
  };

  DType mm() const { return setup.mm; }
  std::size_t esz() const { return dtype_size(setup.mm); }
  std::int64_t tile_width(std::int64_t kt, std::int64_t nk) const { return std::min(kTileK, nk - kt * kTileK); }
  // Q and dO rows are read in place ([rows, heads, D]: row stride heads·D) unless they must
  // be widened first (bf16 inputs on fp32 matmuls), then from dense tile copies.
  bool widen() const { return cfg().dtype == DType::bf16 && mm() == DType::f32; }
  std::int64_t q_ld() const { return widen() ? cfg().head_dim : cfg().heads * cfg().head_dim; }
  // dQ is added by its matmul in place (C += with C's row stride heads·D) when one thread
  // runs the items; with more, pieces of different key tiles may add to the same dQ rows at
  // once, so each piece's dS K goes to scratch and is added under the rows' lock.
  bool dq_in_place() const { return setup.threads == 1; }
  // S and dP: [nr x w] = rows [nr x D] x panel columns (full) or rows read transposed (strips).
  MatmulShape score_shape(const Piece& pc, std::int64_t tk) const {
    const std::int64_t D = cfg().head_dim;
    return pc.partial ? MatmulShape{pc.nr, pc.w, D, q_ld(), 1, D, mm()} : MatmulShape{pc.nr, pc.w, D, q_ld(), tk, 1, mm()};
  }
  // dQ part: [nr x D] (+)= dS [nr x w] x K rows [w x D].
  MatmulShape dq_shape(const Piece& pc) const {
    const std::int64_t D = cfg().head_dim;
    return dq_in_place() ? MatmulShape{pc.nr, D, pc.w, pc.w, D, 1, mm(), false, true, cfg().heads * D}
                         : MatmulShape{pc.nr, D, pc.w, pc.w, D, 1, mm()};
  }
  // dV, dK: [w x D] += Pᵀ or dSᵀ ([nr x w] read transposed) x dO or Q rows [nr x D].
  MatmulShape grad_shape(const Piece& pc) const {
    return MatmulShape{pc.w, cfg().head_dim, pc.nr, pc.w, q_ld(), 1, mm(), true, true};
  }

  GradientStats run_chunk(const std::vector<std::int64_t>& qp, const Chunk& c);
  void pack(const Chunk& c);
  const char* tile_rows(const void* src, char* copy, std::int64_t r0, std::int64_t tq, std::int64_t h) const;
  void run_item(const std::vector<std::int64_t>& qp, const Chunk& c, std::int64_t kt, std::int64_t g, int tid);
  void run_piece(const std::vector<std::int64_t>& qp, const Chunk& c, Scratch& sc, std::int64_t qt, const Piece& pc,
                 std::int64_t h, std::int64_t g, int tid);
  void row_gradients(Scratch& sc, const Piece& pc, std::int64_t i, std::int64_t lo, std::int64_t hi, float lse,
                     float delta) const;
};

void attention_backward_delta(const float* o, const float* d_o, std::int64_t rows, std::int64_t heads,
                              std::int64_t head_dim, float* delta, int threads) {
  if (rows < 0 || heads < 1 || head_dim < 1)
    throw InvalidArgument(std::string(kWho) + ": delta of [" + std::to_string(rows) + ", " + std::to_string(heads) +
                          ", " + std::to_string(head_dim) + "]: rows >= 0, heads and head_dim >= 1");
  // o + r * head_dim for every (row, head): more floats than an address space holds cannot
  // be the caller's arrays, and the offsets would overflow.
  std::int64_t n = 0, elements = 0;
  if (__builtin_mul_overflow(rows, heads, &n) || __builtin_mul_overflow(n, head_dim, &elements) ||
      elements > PTRDIFF_MAX / static_cast<std::int64_t>(sizeof(float)))
    throw InvalidArgument(std::string(kWho) + ": delta of [" + std::to_string(rows) + ", " + std::to_string(heads) +
                          ", " + std::to_string(head_dim) + "]: more floats than an address space holds");
  if (threads < 0 || threads > kMaxThreads)
    throw InvalidArgument(std::string(kWho) + ": delta: threads = " + std::to_string(threads) + " must be in 0.." +
                          std::to_string(kMaxThreads) + " (0: all cores)");
  if (rows == 0) return;
  kernels::check_ptr(o, alignof(float), "o", kWho);
  kernels::check_ptr(d_o, alignof(float), "d_o", kWho);
  kernels::check_ptr(delta, alignof(float), "delta", kWho);
  const int t = threads > 0 ? threads : omp_get_max_threads();
  // In double: an fp32 product cannot overflow there, so the sum is finite exactly when
  // every term is, and the check below is the check of o and d_o.
#pragma omp parallel for schedule(static) num_threads(t)
  for (std::int64_t r = 0; r < n; ++r) {
    const float* a = o + r * head_dim;
    const float* b = d_o + r * head_dim;
    double sum = 0;
    for (std::int64_t e = 0; e < head_dim; ++e) sum += static_cast<double>(a[e]) * b[e];
    delta[r] = static_cast<float>(sum);
  }
  for (std::int64_t r = 0; r < n; ++r)
    if (!std::isfinite(delta[r])) {
      const float* a = o + r * head_dim;
      const bool o_bad = std::any_of(a, a + head_dim, [](float x) { return !std::isfinite(x); });
      throw InvalidArgument(std::string(kWho) + ": " + (o_bad ? "o" : "d_o") + " holds NaN or inf at row " +
                            std::to_string(r / heads) + ", head " + std::to_string(r % heads) +
                            "; the backward takes finite inputs only");
    }
}

BlockAttentionBackward::BlockAttentionBackward(const AttentionConfig& cfg) : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.setup = kernels::set_up(cfg);
  const std::int64_t D = im.cfg().head_dim;
  im.scratch.resize(static_cast<std::size_t>(im.setup.threads));
  for (auto& s : im.scratch) {
    if (im.widen()) {
      s.q_tile.resize(static_cast<std::size_t>(kTileQ * D) * im.esz());
      s.do_tile.resize(static_cast<std::size_t>(kTileQ * D) * im.esz());
    }
    s.s.resize(static_cast<std::size_t>(kTileQ * kTileK));
    s.dp.resize(static_cast<std::size_t>(kTileQ * kTileK));
    if (im.mm() == DType::bf16) {
      s.p16.resize(static_cast<std::size_t>(kTileQ * kTileK));
      s.ds16.resize(static_cast<std::size_t>(kTileQ * kTileK));
    }
    if (!im.dq_in_place()) s.dq.resize(static_cast<std::size_t>(kTileQ * D));
    s.dk.resize(static_cast<std::size_t>(kTileK * D));
    s.dv.resize(static_cast<std::size_t>(kTileK * D));
  }
  im.matmuls.reserve_streams(im.setup.threads);
}

BlockAttentionBackward::~BlockAttentionBackward() = default;
BlockAttentionBackward::BlockAttentionBackward(BlockAttentionBackward&&) noexcept = default;
BlockAttentionBackward& BlockAttentionBackward::operator=(BlockAttentionBackward&&) noexcept = default;

const AttentionConfig& BlockAttentionBackward::config() const { return impl_->setup.cfg; }
Isa BlockAttentionBackward::isa() const { return impl_->setup.isa; }
DType BlockAttentionBackward::matmul_dtype() const { return impl_->setup.mm; }
std::int64_t BlockAttentionBackward::tile_rows() const { return kTileQ; }
std::int64_t BlockAttentionBackward::tile_keys() const { return kTileK; }
void BlockAttentionBackward::set_progress_counter(std::atomic<std::uint64_t>* counter) { impl_->progress = counter; }

GradientStats BlockAttentionBackward::accumulate(const void* q, const Positions& q_pos,
                                                 std::span<const std::int32_t> q_docs, const void* k, const void* v,
                                                 const Positions& k_pos, std::span<const std::int32_t> k_docs,
                                                 const void* d_o, const float* lse, const float* delta, float* dq,
                                                 float* dk, float* dv) {
  return accumulate_impl(q, q_pos, q_docs, k, v, k_pos, k_docs, d_o, lse, delta, dq, dk, dv, true);
}

GradientStats KernelInternals::accumulate_checked(BlockAttentionBackward& kernel, const void* q,
                                                  const Positions& q_pos, std::span<const std::int32_t> q_docs,
                                                  const void* k, const void* v, const Positions& k_pos,
                                                  std::span<const std::int32_t> k_docs, const void* d_o,
                                                  const float* lse, const float* delta, float* dq, float* dk,
                                                  float* dv) {
  return kernel.accumulate_impl(q, q_pos, q_docs, k, v, k_pos, k_docs, d_o, lse, delta, dq, dk, dv, false);
}

GradientStats BlockAttentionBackward::accumulate_impl(const void* q, const Positions& q_pos,
                                                      std::span<const std::int32_t> q_docs, const void* k,
                                                      const void* v, const Positions& k_pos,
                                                      std::span<const std::int32_t> k_docs, const void* d_o,
                                                      const float* lse, const float* delta, float* dq, float* dk,
                                                      float* dv, bool check_inputs) {
  auto& im = *impl_;
  const auto& cfg = im.cfg();
  const std::int64_t nq = q_pos.size(), nk = k_pos.size(), H = cfg.heads, KH = cfg.kv_heads, D = cfg.head_dim;
  const bool docs = !q_docs.empty() || !k_docs.empty();
  if (docs && !check_inputs &&
      (static_cast<std::int64_t>(q_docs.size()) != nq || static_cast<std::int64_t>(k_docs.size()) != nk))
    throw InvalidArgument(std::string(kWho) + ": internal: unchecked documents of the wrong size");
  if (docs && check_inputs) {
    std::string err = kernels::check_docs("the queries'", q_docs, nq);
    if (err.empty()) err = kernels::check_docs("the keys'", k_docs, nk);
    if (!err.empty()) throw InvalidArgument(std::string(kWho) + ": " + err);
  }
  GradientStats st;
  if (nq == 0 || nk == 0) return st;
  const std::size_t in = dtype_size(cfg.dtype);
  kernels::check_ptr(q, in, "q", kWho);
  kernels::check_ptr(k, in, "k", kWho);
  kernels::check_ptr(v, in, "v", kWho);
  kernels::check_ptr(d_o, in, "d_o", kWho);
  for (auto [p, name] : {std::pair<const void*, const char*>{lse, "lse"}, {delta, "delta"}, {dq, "dq"}, {dk, "dk"},
                         {dv, "dv"}})
    kernels::check_ptr(p, alignof(float), name, kWho);
  if (check_inputs) {
    const auto& ops = *im.setup.ops;
    check_finite(ops, q, nq * H * D, cfg.dtype, "q");
    check_finite(ops, k, nk * KH * D, cfg.dtype, "k");
    check_finite(ops, v, nk * KH * D, cfg.dtype, "v");
    check_finite(ops, d_o, nq * H * D, cfg.dtype, "d_o");
    check_finite(ops, delta, nq * H, DType::f32, "delta");
    for (std::int64_t r = 0; r < nq * H; ++r)
      if (std::isnan(lse[r]) || lse[r] == std::numeric_limits<float>::infinity())
        throw InvalidArgument(std::string(kWho) + ": lse at row " + std::to_string(r / H) + ", head " +
                              std::to_string(r % H) + " is " + std::to_string(lse[r]) +
                              "; it must be the forward's (finite, or -inf for a row that sees no key)");
  }
  q_pos.materialize_into(im.qpos);
  k_pos.materialize_into(im.kpos);
  for (std::int64_t c0 = 0; c0 < nk; c0 += kChunkKeys) {
    const std::int64_t n = std::min(kChunkKeys, nk - c0);
    const std::size_t off = static_cast<std::size_t>(c0 * KH * D);
    const Impl::Chunk chunk{q,
                            static_cast<const char*>(k) + off * in,
                            static_cast<const char*>(v) + off * in,
                            d_o,
                            docs ? q_docs.data() : nullptr,
                            docs ? k_docs.data() + c0 : nullptr,
                            im.kpos.data() + c0,
                            n,
                            lse,
                            delta,
                            dq,
                            dk + off,
                            dv + off};
    const GradientStats part = im.run_chunk(im.qpos, chunk);
    st.tiles_computed += part.tiles_computed;
    st.tiles_skipped += part.tiles_skipped;
    st.useful_flops += part.useful_flops;
  }
  return st;
}

GradientStats BlockAttentionBackward::Impl::run_chunk(const std::vector<std::int64_t>& qp, const Chunk& c) {
  const auto& cf = cfg();
  GradientStats st;
  st.useful_flops = kernels::visible_pairs(cf.mask, qp, c.qdocs, c.kpos, c.kdocs, c.nk) * 10.0 *
                    static_cast<double>(cf.head_dim * cf.heads);
  const kernels::TileCount n = kernels::plan_tiles(cf.mask, qp, c.qdocs, c.kpos, c.kdocs, c.nk, kTileK, plan);
  st.tiles_computed = n.computed * cf.heads;
  st.tiles_skipped = n.skipped * cf.heads;
  if (n.computed == 0) return st;
  // The plan by key tile: an item walks the pieces of its key tile, query tile by query tile.
  const std::int64_t nkt = (c.nk + kTileK - 1) / kTileK, nqt = (static_cast<std::int64_t>(qp.size()) + kTileQ - 1) / kTileQ;
  if (by_key.size() < static_cast<std::size_t>(nkt)) by_key.resize(static_cast<std::size_t>(nkt));
  for (auto& e : by_key) e.clear();
  for (std::int64_t qt = 0; qt < nqt; ++qt)
    for (const Piece& pc : plan[static_cast<std::size_t>(qt)]) {
      by_key[static_cast<std::size_t>(pc.kt)].push_back({qt, pc});
      matmuls.prepare(score_shape(pc, tile_width(pc.kt, c.nk)));
      matmuls.prepare(dq_shape(pc));
      matmuls.prepare(grad_shape(pc));
    }
  pack(c);
  const std::int64_t KH = cf.kv_heads, items = nkt * KH;
#pragma omp parallel for schedule(dynamic, 1) num_threads(setup.threads)
  for (std::int64_t item = 0; item < items; ++item) {
    omp_set_num_threads(1);  // this task's ICV only: oneDNN inside must not nest threads
    run_item(qp, c, item / KH, item % KH, omp_get_thread_num());
  }
  return st;
}

// K as panels (Kᵀ per tile) and rows, V likewise: forward's packing, plus Vᵀ panels for dP.
void BlockAttentionBackward::Impl::pack(const Chunk& c) {
  const std::int64_t nk = c.nk, KH = cfg().kv_heads, D = cfg().head_dim;
  const std::size_t bytes = static_cast<std::size_t>(nk * KH * D) * esz();
  for (auto* b : {&k_panel, &k_rows, &v_panel, &v_rows}) b->resize(bytes);
  const auto& ops = *setup.ops;
  const int t = setup.threads;
  const auto* k16 = static_cast<const std::uint16_t*>(c.k);
  const auto* v16 = static_cast<const std::uint16_t*>(c.v);
  // The inputs were checked for NaN and inf, so the packing's own check is not consulted.
  if (mm() == DType::bf16)
    kernels::pack_kv(k16, v16, reinterpret_cast<std::uint16_t*>(k_panel.data), reinterpret_cast<std::uint16_t*>(k_rows.data),
                     reinterpret_cast<std::uint16_t*>(v_rows.data), nk, KH, D, kTileK, t, ops.has_non_finite_bf16);
  else if (cfg().dtype == DType::bf16)
    kernels::pack_kv(k16, v16, reinterpret_cast<float*>(k_panel.data), reinterpret_cast<float*>(k_rows.data),
                     reinterpret_cast<float*>(v_rows.data), nk, KH, D, kTileK, t, ops.has_non_finite_f32);
  else
    kernels::pack_kv(static_cast<const float*>(c.k), static_cast<const float*>(c.v), reinterpret_cast<float*>(k_panel.data),
                     reinterpret_cast<float*>(k_rows.data), reinterpret_cast<float*>(v_rows.data), nk, KH, D, kTileK, t,
                     ops.has_non_finite_f32);
  const std::int64_t ntiles = (nk + kTileK - 1) / kTileK;
  const bool bf16 = mm() == DType::bf16;
#pragma omp parallel for collapse(2) schedule(static) num_threads(t)
  for (std::int64_t g = 0; g < KH; ++g)
    for (std::int64_t kt = 0; kt < ntiles; ++kt) {
      const std::int64_t c0 = kt * kTileK, tk = std::min(kTileK, nk - c0);
      const std::size_t at = static_cast<std::size_t>((g * nk + c0) * D);
      if (bf16)
        kernels::transpose_to_panel(reinterpret_cast<const std::uint16_t*>(v_rows.data) + at,
                                    reinterpret_cast<std::uint16_t*>(v_panel.data) + at, tk, D);
      else
        kernels::transpose_to_panel(reinterpret_cast<const float*>(v_rows.data) + at,
                                    reinterpret_cast<float*>(v_panel.data) + at, tk, D);
    }
}

// The first of rows [r0, r0+tq) of head h of a [rows, heads, D] input, as the matmuls read
// them: in place (row stride heads·D), or widened into `copy` (dense, stride D).
const char* BlockAttentionBackward::Impl::tile_rows(const void* src, char* copy, std::int64_t r0, std::int64_t tq,
                                                    std::int64_t h) const {
  const std::int64_t H = cfg().heads, D = cfg().head_dim;
  const char* b = static_cast<const char*>(src);
  if (!widen()) return b + static_cast<std::size_t>((r0 * H + h) * D) * esz();
  for (std::int64_t i = 0; i < tq; ++i) {
    const auto* row = reinterpret_cast<const std::uint16_t*>(b) + ((r0 + i) * H + h) * D;
    std::transform(row, row + D, reinterpret_cast<float*>(copy) + i * D, kernels::panel_element<float, std::uint16_t>);
  }
  return copy;
}

void BlockAttentionBackward::Impl::run_item(const std::vector<std::int64_t>& qp, const Chunk& c, std::int64_t kt,
                                            std::int64_t g, int tid) {
  const auto& entries = by_key[static_cast<std::size_t>(kt)];
  if (entries.empty()) return;
  const auto& cf = cfg();
  const std::int64_t D = cf.head_dim, KH = cf.kv_heads, G = cf.heads / KH, nq = static_cast<std::int64_t>(qp.size());
  const std::int64_t c0 = kt * kTileK, tk = tile_width(kt, c.nk);
  Scratch& sc = scratch[static_cast<std::size_t>(tid)];
  std::fill(sc.dk.data, sc.dk.data + tk * D, 0.0f);
  std::fill(sc.dv.data, sc.dv.data + tk * D, 0.0f);
  for (std::size_t e = 0; e < entries.size();) {
    const std::int64_t qt = entries[e].qt;
    std::size_t end = e;
    while (end < entries.size() && entries[end].qt == qt) ++end;
    const std::int64_t r0 = qt * kTileQ, tq = std::min(kTileQ, nq - r0);
    for (std::int64_t h = g * G; h < (g + 1) * G; ++h) {
      sc.q_at = tile_rows(c.q, sc.q_tile.data, r0, tq, h);
      sc.do_at = tile_rows(c.d_o, sc.do_tile.data, r0, tq, h);
      for (std::size_t x = e; x < end; ++x) run_piece(qp, c, sc, qt, entries[x].pc, h, g, tid);
    }
    e = end;
  }
  const auto& ops = *setup.ops;
  for (std::int64_t j = 0; j < tk; ++j) {
    const std::size_t at = static_cast<std::size_t>(((c0 + j) * KH + g) * D);
    ops.rescale_add(c.dk + at, sc.dk.data + j * D, 1.0f, static_cast<int>(D));
    ops.rescale_add(c.dv + at, sc.dv.data + j * D, 1.0f, static_cast<int>(D));
  }
}

// Row i of a piece: S -> P (in place, and bf16), dP -> dS (in place, and bf16), over the
// visible columns [lo, hi); zero elsewhere, so that no hidden pair reaches a product.
void BlockAttentionBackward::Impl::row_gradients(Scratch& sc, const Piece& pc, std::int64_t i, std::int64_t lo,
                                                 std::int64_t hi, float lse, float delta) const {
  const auto& ops = *setup.ops;
  const std::int64_t w = pc.w;
  float* s = sc.s.data + i * w;
  float* dp = sc.dp.data + i * w;
  if (lse == -std::numeric_limits<float>::infinity()) hi = lo;  // a row that sees no key at all
  const bool bf16 = mm() == DType::bf16;
  ops.grad_row(s, dp, static_cast<int>(w), static_cast<int>(lo), static_cast<int>(hi), cfg().scale * kLog2e,
               lse * kLog2e, cfg().scale, delta, bf16 ? sc.p16.data + i * w : nullptr,
               bf16 ? sc.ds16.data + i * w : nullptr);
}

void BlockAttentionBackward::Impl::run_piece(const std::vector<std::int64_t>& qp, const Chunk& c, Scratch& sc,
                                             std::int64_t qt, const Piece& pc, std::int64_t h, std::int64_t g,
                                             int tid) {
  const auto& cf = cfg();
  const std::int64_t H = cf.heads, D = cf.head_dim;
  const std::size_t es = esz();
  const std::int64_t c0 = pc.kt * kTileK, tk = tile_width(pc.kt, c.nk), r0 = qt * kTileQ;
  const std::size_t rows_off = static_cast<std::size_t>((g * c.nk + c0 + pc.cl) * D) * es;
  const std::size_t panel_off = static_cast<std::size_t>((g * c.nk + c0) * D + pc.cl) * es;
  const void* k_op = pc.partial ? k_rows.data + rows_off : k_panel.data + panel_off;
  const void* v_op = pc.partial ? v_rows.data + rows_off : v_panel.data + panel_off;
  const std::size_t tile_row_bytes = static_cast<std::size_t>(q_ld()) * es;
  const char* q_rows = sc.q_at + static_cast<std::size_t>(pc.i0) * tile_row_bytes;
  const char* do_rows = sc.do_at + static_cast<std::size_t>(pc.i0) * tile_row_bytes;
  const MatmulShape scores = score_shape(pc, tk);
  matmuls.run(scores, q_rows, k_op, sc.s.data, tid);
  matmuls.run(scores, do_rows, v_op, sc.dp.data, tid);
  const std::int64_t* kp = c.kpos + c0 + pc.cl;
  const std::int32_t* kd = c.kdocs ? c.kdocs + c0 + pc.cl : nullptr;
  for (std::int64_t i = 0; i < pc.nr; ++i) {
    const std::int64_t row = r0 + pc.i0 + i;
    std::int64_t lo = 0, hi = pc.w;
    if (pc.partial)
      kernels::visible_range(cf.mask, qp[static_cast<std::size_t>(row)], c.qdocs ? c.qdocs[row] : 0, kp, kd, pc.w,
                             &lo, &hi);
    row_gradients(sc, pc, i, lo, hi, c.lse[row * H + h], c.delta[row * H + h]);
  }
  const bool bf16 = mm() == DType::bf16;
  const void* p = bf16 ? static_cast<const void*>(sc.p16.data) : sc.s.data;
  const void* ds = bf16 ? static_cast<const void*>(sc.ds16.data) : sc.dp.data;
  const MatmulShape grads = grad_shape(pc);
  matmuls.run(grads, p, do_rows, sc.dv.data + pc.cl * D, tid);
  matmuls.run(grads, ds, q_rows, sc.dk.data + pc.cl * D, tid);
  float* dq_rows = c.dq + ((r0 + pc.i0) * H + h) * D;
  if (dq_in_place()) {
    matmuls.run(dq_shape(pc), ds, k_rows.data + rows_off, dq_rows, tid);
  } else {
    matmuls.run(dq_shape(pc), ds, k_rows.data + rows_off, sc.dq.data, tid);
    std::lock_guard<std::mutex> lock(dq_locks[static_cast<std::size_t>(qt * H + h) % dq_locks.size()]);
    for (std::int64_t i = 0; i < pc.nr; ++i)
      setup.ops->rescale_add(dq_rows + i * H * D, sc.dq.data + i * D, 1.0f, static_cast<int>(D));
  }
  if (progress) progress->fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ringattn
