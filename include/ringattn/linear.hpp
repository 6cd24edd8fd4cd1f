// ringattn — a weight matmul for the model around the attention: y = x · Wᵀ for a
// projection W [out, in] held once, in the dtype it came in (fp32, bf16, fp16; GGUF's q8_0, q4_k, q6_k), packed once.
//
//   ringattn::Linear wq(DType::bf16, heads * head_dim, dim, q_proj_bits);  // HF's [out, in]
//   wq.apply(x.data(), rows, dim, q.data(), heads * head_dim);              // q = x · Wqᵀ
//   wo.apply(o.data(), rows, heads * head_dim, h.data(), dim, /*add=*/true); // h += o · Woᵀ
//
// Every output element is one chain of multiply-adds over k = 0, 1, ..., in - 1 in that
// order, whatever the number of rows, the thread count or the position of the row in the
// batch: a row's result is the same alone or beside 2,047 others (batch invariance), so
// prefill at P ranks and decode one token at a time compute each row identically. Rows
// share each pass over the weights (a register tile of up to 12 rows, blocks of 384 rows),
// so prefill reads W about rows/384 times from memory and decode once per step for the
// whole batch. bf16 weights multiply x rounded to bf16 (to nearest even, denormals zero),
// as oneDNN's bf16 matmul and llama.cpp do: each product is exact, the sums and y are
// fp32, and the pairs fold in the AVX512-BF16 dot instruction's order on every path (the
// instruction where the CPU has it, two FMAs elsewhere), so every path gives the same bits.
// fp16 weights widen in registers (exact) and multiply x as it is: the result is that of
// fp32 weights holding the same values.
//
// The block formats (q8_0, q4_k, q6_k) multiply in integers by default (Activations::int8,
// kernels/int_ops.hpp): each row of x is quantized to 8 bits on the format's block grid
// (one fp32 step per 32 or 256 values, as llama.cpp's Q8_0 / Q8_K), the products summed
// exactly in int32, the scales applied in fp32 once a block in a fixed order — the same
// bits on every path, batch and thread count, within about 1e-2 relative of the fp32
// result. Activations::fp32 keeps x as it is: the blocks unpacked a panel's run of steps at
// a time into fp32 (llama.cpp's dequantized values to the bit) and the f32 loops, so the
// result is the bits of fp32 weights holding the dequantized values.
//
// Paths: AVX-512, AVX2, generic (which aarch64's NEON baseline vectorises), chosen as
// the attention kernels' (RINGATTN_ISA, or the best this CPU has). The packed bytes are
// the same on every path and CPU. Copies of a Linear share its weights; apply() is
// const and may run from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "ringattn/types.hpp"

namespace ringattn {

// How a block-format Linear (q8_0, q4_k, q6_k) multiplies x: int8 (quantized per block,
// integer dot products: the fast path) or fp32 (x as it is: the dequantized weights' bits).
enum class Activations : std::uint8_t { int8 = 0, fp32 = 1 };
std::string_view to_string(Activations a);
Activations parse_activations(std::string_view s);  // "int8" or "fp32"; throws InvalidArgument naming it

class Linear {
 public:
  Linear() = default;  // no weights: out() == in() == 0
  // W [out, in] row-major (row o holds output o's weights, PyTorch's and Hugging Face's
  // layout): `w` points at out*in floats (f32) or bit patterns (uint16: bf16, f16). The
  // data is packed and the caller's buffer may go. Throws InvalidArgument for out or in
  // outside [1, 2^24] or a null w, and as the kernels do for an `isa` this CPU lacks.
  Linear(DType dtype, std::int64_t out, std::int64_t in, const void* w, std::optional<Isa> isa = std::nullopt);
  // W stacked from fp32 blocks of rows, each [rows_b, in], in order (Q, K, V; gate, up),
  // held in `dtype` (bf16, fp16: each weight rounded to nearest even) with no stacked or rounded
  // copy on the way: a model loads with one tensor's floats beside its packed weights.
  // Throws InvalidArgument for an empty block or one whose size is not a multiple of in.
  Linear(DType dtype, std::int64_t in, std::initializer_list<std::span<const float>> blocks,
         std::optional<Isa> isa = std::nullopt);
  // A block of W's rows as a file holds them: `rows` rows of `in` values of `dtype`, row-major:
  // fp32 floats, bf16 / fp16 bit patterns, or GGUF blocks (q8_0, q4_k, q6_k: a row is in / 32
  // or in / 256 blocks, kernels/quant_blocks.hpp).
  struct Block {
    DType dtype = DType::f32;
    const void* data = nullptr;
    std::int64_t rows = 0;
  };
  // W stacked from blocks in any dtype, held in `dtype`: each value widened (exact) or
  // rounded to nearest even as it is packed (fp32, bf16, fp16; q8_0 quantized as llama.cpp
  // does), with no stacked or converted copy (a checkpoint's bf16 Q, K and V straight from
  // its mapped file). q4_k and q6_k are held only from blocks of that format. No `dtype`
  // (nullopt): each run of blocks stays in its own dtype — a GGUF file's Q4_K Q and K beside
  // its Q6_K V — and apply() multiplies each run's rows by its own loop. Throws
  // InvalidArgument for no blocks, a block without data or rows, a row length the format's
  // blocks do not divide, or a conversion not made.
  Linear(std::optional<DType> dtype, std::int64_t in, std::span<const Block> blocks,
         std::optional<Isa> isa = std::nullopt);

  // y[r * ldy + o] = sum over k of x[r * ldx + k] · W[o][k]  (add: y[...] += that sum,
  // the sum formed first) for r < rows, o < out. ldx >= in, ldy >= out; y must not
  // overlap x. threads: OpenMP threads (0: OpenMP's default; 1 inside a parallel region).
  // Throws InvalidArgument for a bad shape, naming it.
  void apply(const float* x, std::int64_t rows, std::int64_t ldx, float* y, std::int64_t ldy, bool add = false,
             int threads = 0) const;
  // Dense rows: x [rows, in], y [rows, out], rows = x.size() / in (y.size() must match).
  void apply(std::span<const float> x, std::span<float> y, bool add = false, int threads = 0) const;

  // Output o's weights (row o of W) widened to fp32 into w_row [in]: the lookup a tied
  // embedding makes, so the matrix is held once. Throws InvalidArgument for o outside
  // [0, out) or a w_row of another size.
  void row(std::int64_t o, std::span<float> w_row) const;

  std::int64_t out() const;
  std::int64_t in() const;
  DType dtype() const;  // the held dtype (of the first rows, where runs keep their own)
  bool mixed() const;   // runs of rows held in more than one dtype
  Isa isa() const;
  // The panel loop's name: the ISA path, "avx512-bf16" where AVX-512 has the bf16 dot;
  // for block formats multiplied in integers, the integer tile's ("avx512-vnni").
  const char* kernel() const;
  // How block formats multiply x (int8 by default); no effect on fp32, bf16 and fp16 rows.
  // Copies made before keep theirs.
  void set_activations(Activations a) { activations_ = a; }
  Activations activations() const { return activations_; }
  // The packed weights (padding zero): what the layer holds in memory, and what a digest
  // of the model reads. The same bytes on every CPU.
  std::span<const std::byte> packed() const;

 private:
  struct Impl;
  void pack(std::optional<DType> dtype, std::int64_t in, std::optional<Isa> isa, std::span<const Block> blocks);
  std::shared_ptr<const Impl> impl_;
  Activations activations_ = Activations::int8;
};

}  // namespace ringattn
