// infer — the tensor-parallel split (tensor_parallel.hpp).
#include "tensor_parallel.hpp"

#include <ringattn/error.hpp>

#include <algorithm>

#include "model.hpp"

namespace infer {

Part part_of(std::int64_t n, int rank, int size) {
  const std::int64_t base = n / size, extra = n % size, r = rank;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

TpParts TpParts::of(const ModelConfig& c, TpShard shard) {
  const int T = shard.size;
  auto refuse = [&](const std::string& what) {
    throw ringattn::InvalidArgument("tensor parallelism over " + std::to_string(T) + " ranks: " + what);
  };
  if (T < 1 || T > 1024) refuse("the group size must be in [1, 1024]");
  if (shard.rank < 0 || shard.rank >= T) refuse("rank " + std::to_string(shard.rank) + " is outside the group");
  if (c.heads % T != 0)
    refuse("the model's " + std::to_string(c.heads) + " query heads do not split in " + std::to_string(T) +
           " equal parts (a --tp dividing the heads)");
  if (c.kv_heads % T != 0 && T % c.kv_heads != 0)
    refuse("the model's " + std::to_string(c.kv_heads) + " K/V heads neither split in " + std::to_string(T) +
           " parts nor divide " + std::to_string(T) + " (a --tp that they divide or that divides them)");
  if (c.ffn < T || c.vocab < T) refuse("the MLP's " + std::to_string(c.ffn) + " units or the vocabulary of " +
                                       std::to_string(c.vocab) + " is smaller than the group");
  TpParts p;
  p.shard = shard;
  p.heads = part_of(c.heads, shard.rank, T);
  p.kv_heads = c.kv_heads % T == 0 ? part_of(c.kv_heads, shard.rank, T) : Part{shard.rank / (T / c.kv_heads), 1};
  p.ffn = part_of(c.ffn, shard.rank, T);
  p.vocab = part_of(c.vocab, shard.rank, T);
  for (int r = 0; r < T; ++r) p.vocab_counts.push_back(static_cast<std::size_t>(part_of(c.vocab, r, T).count));
  return p;
}

std::int64_t block_values(ringattn::DType dtype) {
  switch (dtype) {
    case ringattn::DType::q8_0: return 32;
    case ringattn::DType::q4_k:
    case ringattn::DType::q6_k: return 256;
    default: return 1;
  }
}

std::size_t stored_bytes(ringattn::DType dtype, std::int64_t n) {
  const std::int64_t b = block_values(dtype);
  if (n < 0 || n % b != 0) return 0;
  const auto blocks = static_cast<std::size_t>(n / b);
  switch (dtype) {
    case ringattn::DType::f32: return blocks * 4;
    case ringattn::DType::bf16:
    case ringattn::DType::f16: return blocks * 2;
    case ringattn::DType::q8_0: return blocks * 34;
    case ringattn::DType::q4_k: return blocks * 144;
    case ringattn::DType::q6_k: return blocks * 210;
  }
  return 0;
}

}  // namespace infer
