// Block attention: one query block x one visiting key/value block, folded into the
// running (m, l, o) state. FlashAttention's schedule on a CPU:
//
//   parallel over (head, query tile)            -- OpenMP, dynamic: causal tiles differ
//     for each key tile:
//       skip it if the mask hides every (q, k) pair    (positions increase, so a tile's
//                                                       first/last rows bound it)
//       or if its queries and keys share no document   (ids never decrease: likewise)
//       S = Q_t K_t^T                 oneDNN matmul, Q and K read in place (strided)
//       per row: visible column range [lo, hi) from the global positions; online
//       softmax update of (m, l), probabilities P (fp32, or bf16 when the matmuls are)
//       T = P V_t                     oneDNN matmul
//       o_row = o_row * alpha + T_row
//
// Tiles: kTileQ x tile_k. 256 x 512 measured fastest for oneDNN's brgemm (AVX-512 and
// AMX; the scores tile is 512 KiB and is overwritten in place by P, so L2 holds S, a K^T
// and a V panel); oneDNN's gemm:jit (its only fp32 matmul below AVX-512) runs 256 x 256
// 10-15 % faster (Zen 4 with both ISA caps at AVX2, b 1024, H 8, D 128: 79 -> 88 GFLOP/s). Partially masked tiles run as 64-row strips (see kStrip). Nothing b x b is ever allocated. Matmul primitives are
// created before the parallel region (one per tile shape), scratch per thread once per
// instance. No exception leaves the parallel region: everything that can fail is
// checked before it.
//
// NaN and inf (kernels/non_finite.hpp): the query tile and the K/V panels are checked
// right after they are copied, while in cache. Found in K or V, the bad entries are zeroed in the
// panels (a strip multiplies whole 64-key column blocks, and 0 * inf would leak into
// rows the mask hides); after the tiles, exactly the rows that see one are poisoned.
#include "ringattn/block_attention.hpp"
#include "kernels/internals.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "kernels/aligned_buffer.hpp"
#include "kernels/dispatch.hpp"
#include "kernels/kernel_setup.hpp"
#include "kernels/kv_panels.hpp"
#include "kernels/matmul_cache.hpp"
#include "kernels/non_finite.hpp"
#include "kernels/tile_plan.hpp"
#include "kernels/visible_range.hpp"
#include "ringattn/error.hpp"
#include "core/logger.hpp"

namespace ringattn {

namespace {

using kernels::visible_range;

using kernels::AlignedBuffer;
using kernels::kTileQ;
using kernels::Piece;
using kernels::pack_kv;
using kernels::panel_element;
using kernels::KvFinite;
constexpr std::int64_t kTileKBrgemm = 512, kTileKGemm = 256, kMaxTileK = kTileKBrgemm;
constexpr std::int64_t kChunkKeys = 8 * kMaxTileK;  // a multiple of every tile_k

struct Scratch {
  AlignedBuffer<float> scores;         // kTileQ x tile_k; fp32 P overwrites it in place
  AlignedBuffer<std::uint16_t> p_bf16;  // kTileQ x tile_k
  AlignedBuffer<float> pv;             // kTileQ x head_dim
  AlignedBuffer<char> q_tile;          // kTileQ x head_dim, dense copy of the query tile
  AlignedBuffer<float> m, l, alpha;    // kTileQ
};


}  // namespace


// One chunk of a fold, as fold() cuts it: every query row against at most kChunkKeys
// keys. qdocs (all query rows) and kdocs (the chunk's keys) are both null without documents.
struct Chunk {
  const void* q;
  const std::vector<std::int64_t>& qpos;
  const std::int32_t* qdocs;
  const void* k;
  const void* v;
  const std::int64_t* kpos;
  const std::int32_t* kdocs;
  std::int64_t nk;
  std::int64_t nq() const { return static_cast<std::int64_t>(qpos.size()); }
};

struct BlockAttention::Impl {
  AttentionConfig cfg;
  AlignedBuffer<char> k_packed, k_rows, v_packed;
  Isa isa;
  DType mm;  // the matmuls' operand type: cfg.dtype, or fp32 for a bf16 call without bf16 units
  std::int64_t tile_k = kTileKBrgemm;  // keys per tile, by oneDNN's implementation (see the top)
  const kernels::SoftmaxOps* ops;

  // One chunk of a fold, in named steps: count, plan, prepare, pack, fold the tiles,
  // poison what saw a NaN or inf.
  FoldStats fold_chunk(const Chunk& c, OnlineSoftmaxState& state);
  double useful_flops(const Chunk& c) const;
  void plan_tiles(const Chunk& c, FoldStats& st);
  void prepare_matmuls(std::int64_t nk);
  std::optional<kernels::BadKeys> pack(const Chunk& c);
  bool fold_tiles(const Chunk& c, OnlineSoftmaxState& state);  // true if a q row holds NaN or inf
  bool load_q_tile(const Chunk& c, Scratch& sc, std::int64_t r0, std::int64_t tq, std::int64_t h);
  void fold_piece(const Chunk& c, Scratch& sc, const Piece& pc, std::int64_t r0, std::int64_t h, int tid,
                  OnlineSoftmaxState& state);

  // Operands are dense (see pack_kv): Q rows [nr x D], the K^T panel [D x tk] from which a
  // piece takes w columns, P [nr x w], V panel rows [w x D].
  kernels::MatmulShape score_shape(const Piece& pc, std::int64_t tk) const {
    const std::int64_t D = cfg.head_dim;
    return pc.partial ? kernels::MatmulShape{pc.nr, pc.w, D, D, 1, D, mm}
                      : kernels::MatmulShape{pc.nr, pc.w, D, D, tk, 1, mm};
  }
  kernels::MatmulShape pv_shape(const Piece& pc) const {
    return kernels::MatmulShape{pc.nr, cfg.head_dim, pc.w, pc.w, cfg.head_dim, 1, mm};
  }
  std::int64_t tile_width(std::int64_t kt, std::int64_t nk) const { return std::min(tile_k, nk - kt * tile_k); }
  kernels::MatmulCache matmuls;
  std::vector<Scratch> scratch;
  std::vector<std::uint8_t> q_bad;  // [rows, heads]: the q row holds a NaN or inf
  // Reused from fold to fold (they only grow), so that repeated folds allocate nothing.
  std::vector<std::int64_t> qpos, kpos;
  std::vector<std::vector<Piece>> plan;
  int threads = 1;
  std::atomic<std::uint64_t>* progress = nullptr;
};

BlockAttention::BlockAttention(const AttentionConfig& cfg) : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  const kernels::KernelSetup setup = kernels::set_up(cfg);
  im.cfg = setup.cfg;
  im.isa = setup.isa;
  im.ops = setup.ops;
  im.mm = setup.mm;
  im.threads = setup.threads;
  im.tile_k = kernels::matmul_implementation(im.mm).rfind("brg", 0) == 0 ? kTileKBrgemm : kTileKGemm;
  im.scratch.resize(static_cast<std::size_t>(im.threads));
  for (auto& s : im.scratch) {
    s.scores.resize(static_cast<std::size_t>(kTileQ * im.tile_k));
    if (im.mm == DType::bf16) s.p_bf16.resize(static_cast<std::size_t>(kTileQ * im.tile_k));
    s.pv.resize(static_cast<std::size_t>(kTileQ * cfg.head_dim));
    s.q_tile.resize(static_cast<std::size_t>(kTileQ * cfg.head_dim) * dtype_size(im.mm));
    s.m.resize(kTileQ);
    s.l.resize(kTileQ);
    s.alpha.resize(kTileQ);
  }
  im.matmuls.reserve_streams(im.threads);
  static bool logged = false;
  if (!logged) {
    logged = true;
    logger("kern")->info("block attention on ISA path '{}' ({} threads), oneDNN ISA {}; fp32 calls: oneDNN {}; {}",
                         to_string(im.isa), im.threads, kernels::onednn_isa(),
                         kernels::matmul_implementation(DType::f32), bf16_path());
  }
}

BlockAttention::~BlockAttention() = default;
BlockAttention::BlockAttention(BlockAttention&&) noexcept = default;
BlockAttention& BlockAttention::operator=(BlockAttention&&) noexcept = default;

const AttentionConfig& BlockAttention::config() const { return impl_->cfg; }
void BlockAttention::set_progress_counter(std::atomic<std::uint64_t>* counter) { impl_->progress = counter; }
Isa BlockAttention::isa() const { return impl_->isa; }
DType BlockAttention::matmul_dtype() const { return impl_->mm; }
std::int64_t BlockAttention::tile_rows() const { return kTileQ; }
std::int64_t BlockAttention::tile_keys() const { return impl_->tile_k; }

DType bf16_matmul_dtype() { return kernels::bf16_matmul_native() ? DType::bf16 : DType::f32; }

std::string matmul_implementation(DType dtype) {
  return kernels::matmul_implementation(dtype == DType::bf16 ? bf16_matmul_dtype() : DType::f32);
}

std::string matmul_isa() { return kernels::onednn_isa(); }

std::string bf16_path() {
  if (kernels::bf16_matmul_native())
    return "bf16 calls: bf16 matmuls, oneDNN " + kernels::matmul_implementation(DType::bf16);
  return "bf16 calls: fp32 matmuls on operands widened from bf16 per tile, oneDNN " +
         kernels::matmul_implementation(DType::f32) + " (no AVX512-BF16 or AMX here)";
}

FoldStats BlockAttention::fold(const void* q, const Positions& q_pos, const void* k, const void* v,
                               const Positions& k_pos, OnlineSoftmaxState& state) {
  return fold(q, q_pos, {}, k, v, k_pos, {}, state);
}

FoldStats BlockAttention::fold(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs,
                               const void* k, const void* v, const Positions& k_pos,
                               std::span<const std::int32_t> k_docs, OnlineSoftmaxState& state) {
  return fold_documents(q, q_pos, q_docs, k, v, k_pos, k_docs, state, true);
}

FoldStats KernelInternals::fold_checked(BlockAttention& kernel, const void* q, const Positions& q_pos,
                                        std::span<const std::int32_t> q_docs, const void* k, const void* v,
                                        const Positions& k_pos, std::span<const std::int32_t> k_docs,
                                        OnlineSoftmaxState& state) {
  return kernel.fold_documents(q, q_pos, q_docs, k, v, k_pos, k_docs, state, false);
}

FoldStats BlockAttention::fold_documents(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs,
                                         const void* k, const void* v, const Positions& k_pos,
                                         std::span<const std::int32_t> k_docs, OnlineSoftmaxState& state,
                                         bool check_documents) {
  auto& im = *impl_;
  const auto& cfg = im.cfg;
  const std::int64_t nq = q_pos.size(), nk = k_pos.size();
  const std::int64_t H = cfg.heads, D = cfg.head_dim;
  if (state.rows != nq || state.heads != H || state.head_dim != D)
    throw InvalidArgument("block attention: state is [" + std::to_string(state.rows) + ", " +
                          std::to_string(state.heads) + ", " + std::to_string(state.head_dim) +
                          "] but the queries are [" + std::to_string(nq) + ", " + std::to_string(H) +
                          ", " + std::to_string(D) + "]");
  kernels::check_state(state, "block attention");
  const bool docs = !q_docs.empty() || !k_docs.empty();
  if (docs && !check_documents && (static_cast<std::int64_t>(q_docs.size()) != nq || static_cast<std::int64_t>(k_docs.size()) != nk))
    throw InvalidArgument("block attention: internal: unchecked documents of the wrong size");  // sizes stay checked
  if (docs && check_documents) {
    std::string err = kernels::check_docs("the queries'", q_docs, nq);
    if (err.empty()) err = kernels::check_docs("the keys'", k_docs, nk);
    if (!err.empty()) throw InvalidArgument("block attention: " + err);
  }
  FoldStats st;
  if (nq == 0 || nk == 0) return st;
  const std::size_t esz = dtype_size(cfg.dtype);
  kernels::check_ptr(q, esz, "q");
  kernels::check_ptr(k, esz, "k");
  kernels::check_ptr(v, esz, "v");

  q_pos.materialize_into(im.qpos);
  k_pos.materialize_into(im.kpos);
  const auto& qpos = im.qpos;
  const auto& kpos_all = im.kpos;
  // Keys are folded in chunks of kChunkKeys: exact (the online softmax does not care how
  // the keys are grouped) and it bounds the packed K/V panels to a chunk, so a node's
  // memory stays O(b d) with a small constant however large the visiting block is.
  for (std::int64_t c0 = 0; c0 < nk; c0 += kChunkKeys) {
    const std::int64_t n = std::min(kChunkKeys, nk - c0);
    const std::size_t off = static_cast<std::size_t>(c0 * cfg.kv_heads * D) * esz;
    const Chunk chunk{q, qpos, docs ? q_docs.data() : nullptr, static_cast<const char*>(k) + off,
                      static_cast<const char*>(v) + off, kpos_all.data() + c0, docs ? k_docs.data() + c0 : nullptr, n};
    const FoldStats part = im.fold_chunk(chunk, state);
    st.tiles_computed += part.tiles_computed;
    st.tiles_skipped += part.tiles_skipped;
    st.useful_flops += part.useful_flops;
  }
  return st;
}

FoldStats BlockAttention::Impl::fold_chunk(const Chunk& c, OnlineSoftmaxState& state) {
  FoldStats st;
  st.useful_flops = useful_flops(c);
  plan_tiles(c, st);
  if (st.tiles_computed == 0) return st;  // the whole block is masked: nothing to pack
  prepare_matmuls(c.nk);
  const std::optional<kernels::BadKeys> bad_keys = pack(c);
  q_bad.assign(static_cast<std::size_t>(c.nq() * cfg.heads), 0);
  const bool any_q_bad = fold_tiles(c, state);
  if (any_q_bad || bad_keys)
    kernels::poison_non_finite(cfg.mask, c.qpos, any_q_bad ? q_bad.data() : nullptr, c.kpos, c.nk,
                               bad_keys ? &*bad_keys : nullptr, cfg.heads / cfg.kv_heads, state, c.qdocs, c.kdocs);
  return st;
}

// Visible (q, k) pairs x 4 x head_dim x heads.
double BlockAttention::Impl::useful_flops(const Chunk& c) const {
  return kernels::visible_pairs(cfg.mask, c.qpos, c.qdocs, c.kpos, c.kdocs, c.nk) * 4.0 *
         static_cast<double>(cfg.head_dim * cfg.heads);
}

// The tile plan (kernels/tile_plan.hpp), the same for every head: H tiles per entry.
void BlockAttention::Impl::plan_tiles(const Chunk& c, FoldStats& st) {
  const kernels::TileCount n = kernels::plan_tiles(cfg.mask, c.qpos, c.qdocs, c.kpos, c.kdocs, c.nk, tile_k, plan);
  st.tiles_computed += n.computed * cfg.heads;
  st.tiles_skipped += n.skipped * cfg.heads;
}

// Every shape the tile loop will meet gets its primitive now, outside the parallel loop.
void BlockAttention::Impl::prepare_matmuls(std::int64_t nk) {
  for (const auto& pieces : plan)
    for (const auto& pc : pieces) {
      matmuls.prepare(score_shape(pc, tile_width(pc.kt, nk)));
      matmuls.prepare(pv_shape(pc));
    }
}

// K and V into the panels (pack_kv). NaN or inf in K or V: note where (from the caller's
// block), then zero them in the panels so that no product ever sees them; the rows that
// do see them are poisoned after the tiles.
std::optional<kernels::BadKeys> BlockAttention::Impl::pack(const Chunk& c) {
  const std::int64_t nk = c.nk, KH = cfg.kv_heads, D = cfg.head_dim;
  const std::size_t kv_bytes = static_cast<std::size_t>(nk * KH * D) * dtype_size(mm);
  k_packed.resize(kv_bytes);
  k_rows.resize(kv_bytes);
  v_packed.resize(kv_bytes);
  auto* kp32 = reinterpret_cast<float*>(k_packed.data);
  auto* kr32 = reinterpret_cast<float*>(k_rows.data);
  auto* vp32 = reinterpret_cast<float*>(v_packed.data);
  const auto* k16 = static_cast<const std::uint16_t*>(c.k);
  const auto* v16 = static_cast<const std::uint16_t*>(c.v);
  KvFinite finite;
  if (mm == DType::bf16)
    finite = pack_kv(k16, v16, reinterpret_cast<std::uint16_t*>(k_packed.data), reinterpret_cast<std::uint16_t*>(k_rows.data),
                     reinterpret_cast<std::uint16_t*>(v_packed.data), nk, KH, D, tile_k, threads, ops->has_non_finite_bf16);
  else if (cfg.dtype == DType::bf16)  // widened to fp32 as it is packed
    finite = pack_kv(k16, v16, kp32, kr32, vp32, nk, KH, D, tile_k, threads, ops->has_non_finite_f32);
  else
    finite = pack_kv(static_cast<const float*>(c.k), static_cast<const float*>(c.v), kp32, kr32, vp32, nk, KH, D, tile_k,
                     threads, ops->has_non_finite_f32);
  if (finite.k && finite.v) return std::nullopt;
  std::optional<kernels::BadKeys> bad(std::in_place, c.k, !finite.k, c.v, !finite.v, nk, KH, D, cfg.dtype);
  const std::int64_t elems = nk * KH * D;
  if (!finite.k) {
    kernels::zero_non_finite(k_packed.data, elems, mm);
    kernels::zero_non_finite(k_rows.data, elems, mm);
  }
  if (!finite.v) kernels::zero_non_finite(v_packed.data, elems, mm);
  return bad;
}

// The tiles, (query tile, head) items in parallel: each folds its pieces into the state.
bool BlockAttention::Impl::fold_tiles(const Chunk& c, OnlineSoftmaxState& state) {
  const std::int64_t H = cfg.heads, nq = c.nq();
  const std::int64_t items = H * ((nq + kTileQ - 1) / kTileQ);
  int any_q_bad = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(| : any_q_bad)
  for (std::int64_t item = 0; item < items; ++item) {
    const int tid = omp_get_thread_num();
    omp_set_num_threads(1);  // this task's ICV only: oneDNN inside must not nest threads
    Scratch& sc = scratch[static_cast<std::size_t>(tid)];
    const std::int64_t qt = item / H, h = item % H;
    const auto& pieces = plan[static_cast<std::size_t>(qt)];
    if (pieces.empty()) continue;
    const std::int64_t r0 = qt * kTileQ, tq = std::min(kTileQ, nq - r0);
    for (std::int64_t i = 0; i < tq; ++i) {
      sc.m.data[i] = state.m[static_cast<std::size_t>((r0 + i) * H + h)];
      sc.l.data[i] = state.l[static_cast<std::size_t>((r0 + i) * H + h)];
    }
    any_q_bad |= load_q_tile(c, sc, r0, tq, h);
    for (const Piece& pc : pieces) fold_piece(c, sc, pc, r0, h, tid, state);
    for (std::int64_t i = 0; i < tq; ++i) {
      state.m[static_cast<std::size_t>((r0 + i) * H + h)] = sc.m.data[i];
      state.l[static_cast<std::size_t>((r0 + i) * H + h)] = sc.l.data[i];
    }
  }
  return any_q_bad;
}

// Rows [r0, r0+tq) of head h of Q into the tile (widened where a bf16 call multiplies
// fp32). A non-finite q spoils only its own row (rows of Q K^T and P V are independent),
// which is poisoned after the tiles; it needs no scrubbing, only noting.
bool BlockAttention::Impl::load_q_tile(const Chunk& c, Scratch& sc, std::int64_t r0, std::int64_t tq, std::int64_t h) {
  const std::int64_t H = cfg.heads, D = cfg.head_dim;
  const bool bf16 = mm == DType::bf16;
  const std::size_t row_bytes = static_cast<std::size_t>(D) * dtype_size(mm);
  const char* qb = static_cast<const char*>(c.q);
  if (cfg.dtype == DType::bf16 && !bf16)
    for (std::int64_t i = 0; i < tq; ++i) {
      const auto* src = reinterpret_cast<const std::uint16_t*>(qb) + ((r0 + i) * H + h) * D;
      std::transform(src, src + D, reinterpret_cast<float*>(sc.q_tile.data) + i * D, panel_element<float, std::uint16_t>);
    }
  else
    for (std::int64_t i = 0; i < tq; ++i)
      std::memcpy(sc.q_tile.data + static_cast<std::size_t>(i) * row_bytes,
                  qb + static_cast<std::size_t>(((r0 + i) * H + h) * D) * dtype_size(cfg.dtype), row_bytes);
  auto has_non_finite = [&](const char* x, std::int64_t n) {
    return bf16 ? ops->has_non_finite_bf16(reinterpret_cast<const std::uint16_t*>(x), n)
                : ops->has_non_finite_f32(reinterpret_cast<const float*>(x), n);
  };
  if (!has_non_finite(sc.q_tile.data, tq * D)) return false;
  for (std::int64_t i = 0; i < tq; ++i)
    if (has_non_finite(sc.q_tile.data + static_cast<std::size_t>(i) * row_bytes, D)) q_bad[static_cast<std::size_t>((r0 + i) * H + h)] = 1;
  return true;
}

// One piece: S = Q K^T, the online softmax per row (P and the rescale factor), O += P V.
void BlockAttention::Impl::fold_piece(const Chunk& c, Scratch& sc, const Piece& pc, std::int64_t r0, std::int64_t h,
                                      int tid, OnlineSoftmaxState& state) {
  const std::int64_t H = cfg.heads, D = cfg.head_dim, g = h / (cfg.heads / cfg.kv_heads);
  const std::size_t esz = dtype_size(mm), row_bytes = static_cast<std::size_t>(D) * esz;
  const bool bf16 = mm == DType::bf16;  // bf16 operands: Q, K, V and P
  const std::int64_t c0 = pc.kt * tile_k, tk = tile_width(pc.kt, c.nk);
  const std::int64_t* kp = c.kpos + c0 + pc.cl;
  const std::int32_t* kd = c.kdocs ? c.kdocs + c0 + pc.cl : nullptr;
  const std::size_t rows_off = static_cast<std::size_t>((g * c.nk + c0 + pc.cl) * D) * esz;
  const void* k_operand =
      pc.partial ? k_rows.data + rows_off : k_packed.data + static_cast<std::size_t>((g * c.nk + c0) * D + pc.cl) * esz;
  const void* q_rows = sc.q_tile.data + static_cast<std::size_t>(pc.i0) * row_bytes;
  matmuls.run(score_shape(pc, tk), q_rows, k_operand, sc.scores.data, tid);
  for (std::int64_t i = 0; i < pc.nr; ++i) {
    const std::int64_t row = pc.i0 + i;
    std::int64_t lo = 0, hi = pc.w;
    if (pc.partial)
      visible_range(cfg.mask, c.qpos[static_cast<std::size_t>(r0 + row)], c.qdocs ? c.qdocs[r0 + row] : 0, kp, kd, pc.w,
                    &lo, &hi);
    sc.alpha.data[row] = ops->online_row(sc.scores.data + i * pc.w, static_cast<int>(pc.w), static_cast<int>(lo),
                                         static_cast<int>(hi), cfg.scale, &sc.m.data[row], &sc.l.data[row],
                                         bf16 ? nullptr : sc.scores.data + i * pc.w,
                                         bf16 ? sc.p_bf16.data + i * pc.w : nullptr);
  }
  const void* p = bf16 ? static_cast<const void*>(sc.p_bf16.data) : static_cast<const void*>(sc.scores.data);
  matmuls.run(pv_shape(pc), p, v_packed.data + rows_off, sc.pv.data, tid);
  for (std::int64_t i = 0; i < pc.nr; ++i)
    ops->rescale_add(state.o.data() + static_cast<std::size_t>(((r0 + pc.i0 + i) * H + h) * D), sc.pv.data + i * D,
                     sc.alpha.data[pc.i0 + i], static_cast<int>(D));
  if (progress) progress->fetch_add(1, std::memory_order_relaxed);  // one tile: a sign of life
}

}  // namespace ringattn
