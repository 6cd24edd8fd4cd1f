// ringattn — small value types shared by the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ringattn {

// Element type of tensors in memory and on the wire. State and accumulation are
// always fp32; bf16 is storage and matmul-input precision only. Attention's inputs and
// the wire take fp32 or bf16; f16 (IEEE half) and GGUF's block formats q8_0, q4_k and q6_k
// are weight dtypes only (ringattn::Linear; kernels/quant_blocks.hpp has their layouts).
// q8_0: each run of 32 weights along a row is an fp16 scale d and 32 int8 q, weight = d * q
// (34 bytes per 32); q4_k and q6_k: super-blocks of 256 weights (144 and 210 bytes).
enum class DType : std::uint8_t { f32 = 0, bf16 = 1, f16 = 2, q8_0 = 3, q4_k = 4, q6_k = 5 };

std::string_view to_string(DType d);  // "fp32", "bf16", "fp16", "q8_0", "q4_k", "q6_k"
DType parse_dtype(std::string_view s);  // "fp32"/"f32"/"float32" or "bf16"; throws InvalidArgument
// A model's weights: parse_dtype's names or "fp16"/"f16"/"float16"; throws InvalidArgument.
DType parse_weights_dtype(std::string_view s);
// Bytes per element; the block formats have none of their own: 0, sized by their blocks.
inline std::size_t dtype_size(DType d) {
  return d == DType::f32 ? 4 : d == DType::bf16 || d == DType::f16 ? 2 : 0;
}

// Which keys a query sees, evaluated on *global* token positions.
//   none:    every key.
//   causal:  key position j <= query position i.
//   window:  i - window < j <= i  (window tokens, itself included; causal by definition).
enum class MaskKind : std::uint8_t { none = 0, causal = 1, window = 2 };

struct Mask {
  MaskKind kind = MaskKind::none;
  std::int64_t window = 0;  // only for MaskKind::window; must be >= 1

  static Mask none() { return {}; }
  static Mask causal() { return {MaskKind::causal, 0}; }
  static Mask sliding_window(std::int64_t w) { return {MaskKind::window, w}; }

  // True if the query at position q sees the key at position k.
  bool visible(std::int64_t q, std::int64_t k) const {
    switch (kind) {
      case MaskKind::none: return true;
      case MaskKind::causal: return k <= q;
      case MaskKind::window: return k <= q && k > q - window;
    }
    return false;
  }
};

std::string to_string(const Mask& m);  // "none", "causal", "window:W"

// One attention call's shape: what every rank of a ring passes identically, and what the
// per-node kernel is made for (AttentionConfig adds how it runs). The one call shape from
// the public API down: the ring's wire spec (ring/block_format.hpp) and the daemon's job
// request are built from it.
struct AttentionSpec {
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;  // divides heads (GQA/MQA); == heads for MHA
  std::int64_t head_dim = 0;  // one of kSupportedHeadDims (block_attention.hpp)
  DType dtype = DType::f32;   // kernel inputs and K/V on the wire; bf16 halves the traffic
  Mask mask = Mask::none();
  float scale = 0;            // 0: 1/sqrt(head_dim)
};

// The most kernel threads a call may ask for (every entry point: AttentionConfig,
// RingOptions, RINGATTN_THREADS, --threads, Python's threads=). OpenMP dies rather than
// fail when it cannot start that many.
inline constexpr int kMaxThreads = 4096;

// The most ranks a ring may have (RingOptions::world_size, RINGATTN_WORLD_SIZE, a
// RendezvousServer's, shard_documents' shards), and the most rows a rank may pass to one
// call (the ceiling of RingLimits::max_rows): per-rank tables are sized by the first and
// a caller's row counts are bounded by the second before anything is allocated.
inline constexpr int kMaxWorldSize = 1 << 20;
inline constexpr std::int64_t kMaxRankRows = std::int64_t{1} << 30;

// Instruction-set path of the per-node kernels (the matmuls are oneDNN's own).
enum class Isa : std::uint8_t { generic = 0, avx2 = 1, avx512 = 2, neon = 3 };

std::string_view to_string(Isa i);
Isa parse_isa(std::string_view s);  // throws InvalidArgument naming the value
// Every path's name, "generic, avx2, avx512, neon": what --isa and RINGATTN_ISA take
// (which of them this build and CPU run: available_isas()).
std::string isa_names();

}  // namespace ringattn
