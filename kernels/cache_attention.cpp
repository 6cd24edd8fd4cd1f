// ringattn kernels — decode attention over a KV cache (kernels/cache_attention.hpp).
#include "kernels/cache_attention.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/dispatch.hpp"
#include "kernels/visible_range.hpp"
#include "ringattn/error.hpp"

namespace ringattn::kernels {

namespace {

// Keys per tile: the tile's K and V rows (every KV head) are read once from memory by the
// first head's pass and must still be in L2 for the other heads' passes, so a tile holds
// about kTileBytes of K and V together: 256 keys of one bf16 head of 128, 32 of 8 heads.
constexpr std::int64_t kTileBytes = 256 << 10;
constexpr std::int64_t kMaxTileKeys = 256;
constexpr std::int64_t kChunkKeys = 4096;   // keys per work item: enough items for the threads, few partials
constexpr std::int64_t kRowsPerItem = 8;    // query rows of one sequence computed together
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One work item: query rows [r0, r1) of a segment, keys [c0, c1), every head. All KV
// heads of a key tile are read together: a row's heads share its cache lines (and the
// hardware prefetcher fetches neighbouring lines anyway), so each byte comes from memory once.
struct Item {
  std::int64_t seg, r0, r1, c0, c1;
  std::size_t slot;  // offset of its partial (m, l, o) in the slots
};

}  // namespace

struct CacheAttention::Impl {
  AttentionConfig cfg;
  Isa isa = Isa::generic;
  const SoftmaxOps* ops = nullptr;
  int threads = 1;
  std::vector<Item> items;
  std::vector<float> slots;  // per item: m [rows*H], l [rows*H], o [rows*H*D]
  struct Scratch {
    std::vector<float> scores, pv;
  };
  std::vector<Scratch> scratch;

  // fold() in named steps: the items, each item's partial, the merge into the state.
  void plan_items(const std::int64_t* q_pos, std::span<const CacheSegment> segments, std::int64_t state_rows,
                  CacheFoldStats& st);
  void fold_item(const Item& item, const float* q, const std::int64_t* q_pos, const CacheSegment& sg,
                 std::int64_t tile_keys);
  void merge_items(OnlineSoftmaxState& state) const;
};

CacheAttention::CacheAttention(const AttentionConfig& cfg) : impl_(std::make_unique<Impl>()) {
  BlockAttention check(cfg);  // one definition of a valid config (and of the resolved scale)
  if (cfg.heads / cfg.kv_heads > 256)
    throw InvalidArgument("cache attention: " + std::to_string(cfg.heads / cfg.kv_heads) +
                          " query heads per KV head; decode supports at most 256");
  auto& im = *impl_;
  im.cfg = check.config();
  im.isa = check.isa();
  im.ops = &ops_for(im.isa);
  im.threads = cfg.threads > 0 ? cfg.threads : omp_get_max_threads();
  im.scratch.resize(static_cast<std::size_t>(im.threads));
}

CacheAttention::~CacheAttention() = default;
CacheAttention::CacheAttention(CacheAttention&&) noexcept = default;
CacheAttention& CacheAttention::operator=(CacheAttention&&) noexcept = default;
const AttentionConfig& CacheAttention::config() const { return impl_->cfg; }
Isa CacheAttention::isa() const { return impl_->isa; }

CacheFoldStats CacheAttention::fold(const float* q, const std::int64_t* q_pos, std::span<const CacheSegment> segments,
                                    OnlineSoftmaxState& state, std::atomic<std::uint64_t>* progress) {
  auto& im = *impl_;
  const auto& cfg = im.cfg;
  const std::int64_t H = cfg.heads, D = cfg.head_dim;
  if (state.heads != H || state.head_dim != D)
    throw InvalidArgument("cache attention: the state has " + std::to_string(state.heads) + " heads of " +
                          std::to_string(state.head_dim) + " but the config " + std::to_string(H) + " of " +
                          std::to_string(D));
  CacheFoldStats st;
  im.plan_items(q_pos, segments, state.rows, st);
  if (im.items.empty()) return st;
  const std::int64_t ld = cfg.kv_heads * D;
  const std::int64_t tile_keys = std::clamp<std::int64_t>(
      (kTileBytes / (2 * ld * static_cast<std::int64_t>(dtype_size(cfg.dtype)))) / 16 * 16, 16, kMaxTileKeys);
  const auto n_items = static_cast<std::int64_t>(im.items.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(im.threads)
  for (std::int64_t it = 0; it < n_items; ++it) {
    const Item& item = im.items[static_cast<std::size_t>(it)];
    im.fold_item(item, q, q_pos, segments[static_cast<std::size_t>(item.seg)], tile_keys);
    if (progress) progress->fetch_add(1, std::memory_order_relaxed);
  }
  im.merge_items(state);
  return st;
}

// Items: per segment, the keys its rows can see (positions increase, so one range per
// row; the union of a group of rows is [min lo, max hi)), cut into chunks; each gets its
// slot for a partial (m, l, o).
void CacheAttention::Impl::plan_items(const std::int64_t* q_pos, std::span<const CacheSegment> segments,
                                      std::int64_t state_rows, CacheFoldStats& st) {
  const std::int64_t H = cfg.heads, D = cfg.head_dim;
  items.clear();
  std::size_t slot = 0;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const auto& sg = segments[s];
    if (sg.q_begin < 0 || sg.q_end > state_rows || sg.q_begin > sg.q_end)
      throw InvalidArgument("cache attention: segment rows [" + std::to_string(sg.q_begin) + ", " +
                            std::to_string(sg.q_end) + ") outside the state's " + std::to_string(state_rows));
    if (sg.nk == 0) continue;
    for (std::int64_t r0 = sg.q_begin; r0 < sg.q_end; r0 += kRowsPerItem) {
      const std::int64_t r1 = std::min(sg.q_end, r0 + kRowsPerItem);
      std::int64_t lo = sg.nk, hi = 0;
      for (std::int64_t r = r0; r < r1; ++r) {
        std::int64_t a, b;
        visible_range(cfg.mask, q_pos[r], sg.k_pos, sg.nk, &a, &b);
        if (a < b) {
          lo = std::min(lo, a);
          hi = std::max(hi, b);
          st.useful_flops += static_cast<double>(b - a) * 4.0 * static_cast<double>(D * H);
        }
      }
      if (lo >= hi) continue;
      st.keys_read += hi - lo;
      for (std::int64_t c0 = lo; c0 < hi; c0 += kChunkKeys) {
        items.push_back({static_cast<std::int64_t>(s), r0, r1, c0, std::min(hi, c0 + kChunkKeys), slot});
        slot += static_cast<std::size_t>((r1 - r0) * H * (D + 2));
      }
    }
  }
  slots.resize(slot);
}

// One item's partial in its slot: its rows against its keys, a tile of keys at a time,
// every KV head of a tile while it is in L2.
void CacheAttention::Impl::fold_item(const Item& item, const float* q, const std::int64_t* q_pos,
                                     const CacheSegment& sg, std::int64_t tile_keys) {
  const std::int64_t H = cfg.heads, KH = cfg.kv_heads, G = H / KH, D = cfg.head_dim, ld = KH * D;
  const bool bf16 = cfg.dtype == DType::bf16;
  const std::size_t esz = dtype_size(cfg.dtype);
  auto& sc = scratch[static_cast<std::size_t>(omp_get_thread_num())];
  const std::int64_t rows = item.r1 - item.r0, M = rows * H;  // state rows (query row, head) of the item
  sc.scores.resize(static_cast<std::size_t>(rows * G * tile_keys));
  sc.pv.resize(static_cast<std::size_t>(G * D));
  float* m = slots.data() + item.slot;
  float* l = m + M;
  float* o = l + M;
  std::fill(m, m + M, kNegInf);
  std::fill(l, l + M, 0.0f);
  std::fill(o, o + M * D, 0.0f);
  for (std::int64_t t0 = item.c0; t0 < item.c1; t0 += tile_keys) {
    const int w = static_cast<int>(std::min(tile_keys, item.c1 - t0));
    // The next tile's K and V rows, every head, into L2 while this tile computes: two
    // contiguous blocks, fetched a KH-th at a time before each head's pass (a burst of all
    // at once stalls on the miss buffers). Each head's pass reads its own part of every
    // row at the row stride, which the hardware prefetchers do not follow across pages.
    const std::int64_t t1 = t0 + tile_keys;
    const std::int64_t next_bytes =
        t1 < item.c1 ? std::min(tile_keys, item.c1 - t1) * ld * static_cast<std::int64_t>(esz) : 0;
    const char* k_next = static_cast<const char*>(sg.k) + static_cast<std::size_t>(t1 * ld) * esz;
    const char* v_next = static_cast<const char*>(sg.v) + static_cast<std::size_t>(t1 * ld) * esz;
    for (std::int64_t g = 0; g < KH; ++g) {
      for (std::int64_t b = next_bytes * g / KH; b < next_bytes * (g + 1) / KH; b += 64) {
        __builtin_prefetch(k_next + b, 0, 2);
        __builtin_prefetch(v_next + b, 0, 2);
      }
      const char* kb = static_cast<const char*>(sg.k) + static_cast<std::size_t>((t0 * KH + g) * D) * esz;
      const char* vb = static_cast<const char*>(sg.v) + static_cast<std::size_t>((t0 * KH + g) * D) * esz;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t row = item.r0 + r;
        std::int64_t lo, hi;
        visible_range(cfg.mask, q_pos[row], sg.k_pos + t0, w, &lo, &hi);
        if (lo >= hi) continue;
        const float* qg = q + (row * H + g * G) * D;
        float* s = sc.scores.data() + r * G * w;
        if (bf16)
          ops->cache_scores_bf16(qg, static_cast<int>(G), reinterpret_cast<const std::uint16_t*>(kb), ld, w,
                                 static_cast<int>(D), s);
        else
          ops->cache_scores_f32(qg, static_cast<int>(G), reinterpret_cast<const float*>(kb), ld, w,
                                static_cast<int>(D), s);
        float alpha[256];  // G <= 256 (checked at construction)
        const std::int64_t i0 = r * H + g * G;  // the item's state row of (query row, first head of the group)
        for (std::int64_t gg = 0; gg < G; ++gg)
          alpha[gg] = ops->online_row(s + gg * w, w, static_cast<int>(lo), static_cast<int>(hi), cfg.scale,
                                      &m[i0 + gg], &l[i0 + gg], s + gg * w, nullptr);
        if (bf16)
          ops->cache_pv_bf16(s, static_cast<int>(G), reinterpret_cast<const std::uint16_t*>(vb), ld, w,
                             static_cast<int>(D), sc.pv.data());
        else
          ops->cache_pv_f32(s, static_cast<int>(G), reinterpret_cast<const float*>(vb), ld, w, static_cast<int>(D),
                            sc.pv.data());
        for (std::int64_t gg = 0; gg < G; ++gg)
          ops->rescale_add(o + (i0 + gg) * D, sc.pv.data() + gg * D, alpha[gg], static_cast<int>(D));
      }
    }
  }
}

// The partials merged into the state, item by item (the order is fixed: deterministic).
void CacheAttention::Impl::merge_items(OnlineSoftmaxState& state) const {
  const std::int64_t H = cfg.heads, D = cfg.head_dim;
  for (const Item& item : items) {
    const std::int64_t rows = item.r1 - item.r0, M = rows * H;
    const float* m = slots.data() + item.slot;
    const float* l = m + M;
    const float* o = l + M;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t i = r * H + h;
        if (m[i] == kNegInf) continue;  // this chunk showed the row nothing
        const auto si = static_cast<std::size_t>((item.r0 + r) * H + h);
        const float ma = state.m[si];
        const float mn = std::fmax(ma, m[i]);
        const float a = ma == kNegInf ? 0.0f : std::exp(ma - mn), b = std::exp(m[i] - mn);
        state.m[si] = mn;
        state.l[si] = state.l[si] * a + l[i] * b;
        float* so = state.o.data() + si * static_cast<std::size_t>(D);
        const float* io = o + i * D;
        for (std::int64_t e = 0; e < D; ++e) so[e] = so[e] * a + io[e] * b;
      }
  }
}

}  // namespace ringattn::kernels
