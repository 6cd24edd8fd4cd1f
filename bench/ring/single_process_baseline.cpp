#include "single_process_baseline.hpp"

#include <chrono>

namespace ringattn::bench {

namespace {

std::vector<std::uint16_t> as_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  to_bf16(x.data(), out.data(), static_cast<std::int64_t>(x.size()));
  return out;
}

}  // namespace

SingleProcessBaseline::SingleProcessBaseline(const AttentionConfig& cfg, const DenseInputs& in)
    : cfg_(cfg), in_(in), attn_(cfg), state_(in.tokens, cfg.heads, cfg.head_dim) {
  if (cfg.dtype == DType::bf16) {
    q16_ = as_bf16(in.q);
    k16_ = as_bf16(in.k);
    v16_ = as_bf16(in.v);
  }
}

double SingleProcessBaseline::run_once() {
  const bool bf16 = cfg_.dtype == DType::bf16;
  const void* q = bf16 ? static_cast<const void*>(q16_.data()) : in_.q.data();
  const void* k = bf16 ? static_cast<const void*>(k16_.data()) : in_.k.data();
  const void* v = bf16 ? static_cast<const void*>(v16_.data()) : in_.v.data();
  const Positions all = Positions::contiguous(0, in_.tokens);
  state_.reset();
  const auto t0 = std::chrono::steady_clock::now();
  attn_.fold(q, all, k, v, all, state_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ringattn::bench
