#include "bench/ring/single_process_baseline.hpp"

#include <algorithm>
#include <chrono>

namespace ringattn::bench {

namespace {

// The tensor in the kernel's input dtype: fp32 as is, bf16 converted once.
struct TypedTensor {
  std::vector<float> f32;
  std::vector<std::uint16_t> bf16;
  TypedTensor(const std::vector<float>& x, DType d) {
    if (d == DType::bf16) {
      bf16.resize(x.size());
      to_bf16(x.data(), bf16.data(), static_cast<std::int64_t>(x.size()));
    } else {
      f32 = x;
    }
  }
  const void* data() const { return bf16.empty() ? static_cast<const void*>(f32.data()) : bf16.data(); }
};

}  // namespace

double single_process_seconds(const AttentionConfig& cfg, const DenseInputs& in, int reps) {
  const TypedTensor q(in.q, cfg.dtype), k(in.k, cfg.dtype), v(in.v, cfg.dtype);
  BlockAttention attn(cfg);
  OnlineSoftmaxState state(in.tokens, cfg.heads, cfg.head_dim);
  const Positions all = Positions::contiguous(0, in.tokens);
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {  // the first run warms up (primitives, page faults)
    state.reset();
    const auto t0 = std::chrono::steady_clock::now();
    attn.fold(q.data(), all, k.data(), v.data(), all, state);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[(t.size() - 1) / 2];
}

}  // namespace ringattn::bench
