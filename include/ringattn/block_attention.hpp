// ringattn — the per-node block-attention kernel.
//
// One call folds one visiting key/value block into the running online-softmax state
// of this node's queries:
//
//   m  <- max(m, rowmax(scale * Q K^T))                       (per query row and head)
//   l  <- l * exp(m_old - m) + rowsum(exp(scale * Q K^T - m))
//   o  <- o * exp(m_old - m) + exp(scale * Q K^T - m) V
//
// After every block has visited, finalize() gives O = o / l and lse = m + log(l): exactly
// dense softmax attention. Nothing b x b is allocated for large b: the kernel walks
// query tiles x key tiles sized for L2, computes the scores and the P·V product with
// oneDNN matmul primitives created once per tile shape, and runs the softmax pieces on
// the best SIMD path of the CPU. Tiles that the mask hides completely are skipped.
//
// Documents (packed variable-length batches, packing.hpp). A fold may carry an int32
// document id per query row and per key row; a query then sees a key only if both are
// in the same document and the mask allows the pair. Invariant: within one block the ids
// never decrease in row order (each document is one contiguous run of positions, so a
// rank's rows sorted by position have sorted documents); fold() checks it. A tile whose
// query rows and key rows share no document (their [first, last] id ranges do not
// intersect) is skipped like a tile the mask hides.
//
// Layout: Q and O are [rows, heads, head_dim], K and V are [rows, kv_heads, head_dim],
// row-major and dense. Query head h reads KV head h / (heads / kv_heads); K and V are
// never duplicated for GQA/MQA.
//
// NaN and inf in Q, K or V. `ringattn node` refuses them before the ring starts; a
// caller that skips such a check gets what dense attention over the visible keys gives
// in float64 (kernels/reference.cpp is the oracle), made exact and order-independent:
//   - a (query row, head) that sees at least one key, and whose q row or one of whose
//     visible keys' k rows holds a NaN or inf, gets O and lse all NaN. Dense attention
//     gives NaN for a NaN or +inf score; a -inf score (which IEEE would quietly drop)
//     is NaN here too, because its sign is an accident of rounding and of q's signs;
//   - otherwise a NaN or inf at element e of a visible key's v row makes O[e] NaN,
//     whatever that key's weight (IEEE's 0 * inf is NaN; and +inf times a positive
//     weight is NaN rather than +inf, so the answer never hinges on whether a weight
//     underflowed in fp32); lse and the other elements are exact;
//   - every other output is bit for bit what it would be were the bad entries 0: a
//     value never reaches a row the mask hides it from, and a query row that sees no
//     key at all still gives O = 0 and lse = -inf, whatever its q holds.
// The check is one vector pass over copies the fold makes anyway, while they are in
// cache; only a fold that finds something pays O(b d) more. The poison lives in the
// state (l = NaN marks a row, NaN elements of o mark elements), survives later folds,
// and merge/finalize keep it, so the answer is the same whatever order blocks are
// folded or states merged in.
// (Finite inputs so large that a score overflows fp32 are outside this contract.)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ringattn/positions.hpp"
#include "ringattn/types.hpp"

namespace ringattn {

// The kernel's configuration: a call's shape (AttentionSpec: heads, kv_heads, head_dim,
// dtype — storage and matmul-input type of Q, K, V — mask, scale) and how it runs.
struct AttentionConfig : AttentionSpec {
  int threads = 0;              // OpenMP threads for a fold, 0..kMaxThreads; 0 means omp_get_max_threads()
  std::optional<Isa> isa;       // force a path; unset: env RINGATTN_ISA, else the best one
  // The type the matmuls multiply. fp32 calls: fp32. bf16 calls: bf16 where the CPU has
  // bf16 units (see bf16_matmul_dtype()), else fp32 operands widened from bf16 inside the
  // copies the kernel makes of each tile anyway (exact, and P stays fp32, so at least as
  // accurate). Set it to force one; bf16 where the CPU has no bf16 matmul is refused.
  std::optional<DType> matmul_dtype;
};

// Head dims the kernel accepts (multiples of 16 that cover the usual models).
inline constexpr std::int64_t kSupportedHeadDims[] = {32, 48, 64, 80, 96, 112, 128, 160, 192, 256};

// The running (m, l, o) triple for `rows` query rows. m and l are [rows, heads]; o is
// [rows, heads, head_dim]; all fp32. A fresh state has m = -inf, l = 0, o = 0.
// Shapes: heads and head_dim in 1..2^16, at most 2^40 elements of o (InvalidArgument).
// fold, merge and finalize refuse a state whose arrays do not match its fields.
struct OnlineSoftmaxState {
  std::int64_t rows = 0, heads = 0, head_dim = 0;
  std::vector<float> m, l, o;

  OnlineSoftmaxState() = default;
  OnlineSoftmaxState(std::int64_t rows, std::int64_t heads, std::int64_t head_dim);
  void reset();
  // A fresh state of another shape, reusing the memory (no allocation when it fits).
  void reset(std::int64_t rows, std::int64_t heads, std::int64_t head_dim);
};

// Combines two partial states over disjoint key sets: `into` becomes the state over both.
// Commutative and associative up to fp32 rounding. Rows where both are empty stay empty;
// a row poisoned on either side (l or m NaN) is poisoned in the result, and a NaN
// element of either o stays NaN.
void merge(OnlineSoftmaxState& into, const OnlineSoftmaxState& other);

// O = o / l as fp32 [rows, heads, head_dim]; lse = m + log(l) as [rows, heads].
// A row that saw no key (fully masked, l = 0) yields O = 0 and lse = -inf, never NaN;
// a poisoned row (l = NaN) yields O and lse NaN.
// `out` may be s.o.data() (normalise in place); either pointer may be null.
void finalize(const OnlineSoftmaxState& s, float* out, float* lse);

struct FoldStats {
  std::int64_t tiles_computed = 0;
  std::int64_t tiles_skipped = 0;    // fully masked query x key tiles
  double useful_flops = 0;           // 4 * visible (q,k) pairs * head_dim * heads
};

class BlockAttention {
 public:
  explicit BlockAttention(const AttentionConfig& cfg);  // validates; throws InvalidArgument
  ~BlockAttention();
  BlockAttention(BlockAttention&&) noexcept;
  BlockAttention& operator=(BlockAttention&&) noexcept;

  const AttentionConfig& config() const;
  Isa isa() const;  // the path this instance runs
  DType matmul_dtype() const;  // the type its matmuls multiply
  // The tile a fold walks, query rows x keys (FoldStats counts these per head): 256 x 512
  // on oneDNN's brgemm matmuls, 256 x 256 on its gemm:jit (CPUs below AVX-512).
  std::int64_t tile_rows() const;
  std::int64_t tile_keys() const;

  // A counter fold() increments once per tile it computes (relaxed; null: none). A ring
  // hands its keep-alive counter here, so a fold that takes minutes is seen progressing.
  void set_progress_counter(std::atomic<std::uint64_t>* counter);

  // Folds the block (k, v) at positions k_pos into `state` for queries q at q_pos.
  // q: [q_pos.size(), heads, head_dim]; k, v: [k_pos.size(), kv_heads, head_dim], in
  // config().dtype, aligned to the element size. state.rows must equal q_pos.size().
  // Not re-entrant on one instance; different instances may run concurrently.
  FoldStats fold(const void* q, const Positions& q_pos, const void* k, const void* v,
                 const Positions& k_pos, OnlineSoftmaxState& state);
  // The same within documents: q_docs [q_pos.size()] and k_docs [k_pos.size()] are the
  // rows' document ids, each non-decreasing. Both empty: no documents (as above).
  // Throws InvalidArgument if only one is given, a size differs or an id decreases.
  FoldStats fold(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs, const void* k,
                 const void* v, const Positions& k_pos, std::span<const std::int32_t> k_docs,
                 OnlineSoftmaxState& state);

 private:
  friend struct KernelInternals;  // the ring's fold of what it already checked (kernels/internals.hpp)
  FoldStats fold_documents(const void* q, const Positions& q_pos, std::span<const std::int32_t> q_docs, const void* k,
                           const void* v, const Positions& k_pos, std::span<const std::int32_t> k_docs,
                           OnlineSoftmaxState& state, bool check_documents);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The ISA paths this CPU can run, best first (always ends with generic).
std::vector<Isa> available_isas();
// The path picked when nothing is forced: env RINGATTN_ISA if set, else the best one.
Isa default_isa();

// The type a bf16 call's matmuls multiply in this process: DType::bf16 where the CPU has
// bf16 matmul units (AVX512-BF16, AMX) and ONEDNN_MAX_CPU_ISA lets oneDNN use them, else
// DType::f32. Decided once per process.
DType bf16_matmul_dtype();
// oneDNN's implementation of the tile matmuls of a call of `dtype` on this CPU, as its
// verbose log names it: "brg:avx512_core", "brg:avx512_core_amx", "gemm:jit", ...
std::string matmul_implementation(DType dtype);
// The instruction set oneDNN uses in this process, as ONEDNN_MAX_CPU_ISA names it ("avx2",
// "avx512_core_bf16", ...): the CPU's best, or less where that variable caps it.
std::string matmul_isa();
// One line for logs and --help saying how a bf16 call runs here, e.g.
// "bf16 calls: bf16 matmuls (oneDNN brg:avx512_core_bf16)".
std::string bf16_path();

// fp32 <-> bf16 (round to nearest even), for callers that keep bf16 buffers.
void to_bf16(const float* src, std::uint16_t* dst, std::int64_t n);
void from_bf16(const std::uint16_t* src, float* dst, std::int64_t n);

}  // namespace ringattn
