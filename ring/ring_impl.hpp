// ringattn — the Ring's private state, shared by its calls (ring.cpp: connect and
// forward; decode.cpp: decode). Not installed.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cache_attention.hpp"
#include "net/transport.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/block_backward.hpp"
#include "ringattn/ring.hpp"
#include "ring/internals.hpp"
#include "ring/gradient_relay.hpp"
#include "ring/decode_call.hpp"
#include "ring/ring_step.hpp"
#include "ring/hybrid.hpp"
#include "ring/ulysses.hpp"

namespace ringattn {

using KernelKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, std::int64_t, float>;

inline KernelKey kernel_key(const AttentionSpec& s) {
  return {s.heads, s.kv_heads, s.head_dim, static_cast<int>(s.dtype), static_cast<int>(s.mask.kind), s.mask.window,
          s.scale};
}

struct Ring::Impl {
  RingOptions options;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<ring::RingStep> step;
  std::map<KernelKey, std::unique_ptr<BlockAttention>> kernels;  // one per call shape: primitives kept
  OnlineSoftmaxState state;                                      // pooled
  std::vector<std::uint16_t> q_bf16;                              // pooled
  std::uint64_t calls = 0;

  // backward's (backward.cpp): its kernels, the gradient stream and pooled buffers
  std::map<KernelKey, std::unique_ptr<BlockAttentionBackward>> backward_kernels;
  std::unique_ptr<ring::GradientRelay> gradients;
  struct BackwardBuffers {
    std::vector<float> delta, acc_k, acc_v;
    std::vector<std::uint16_t> d_o_bf16;
  } backward;

  // Ulysses' schedule (ulysses.cpp): its collectives and pooled buffers
  std::unique_ptr<ring::UlyssesState> ulysses;
  // the mesh's views and scoped collectives (mesh.hpp), made on first use
  std::unique_ptr<ring::Mesh> mesh;
  ring::Mesh& mesh_of() {
    if (!mesh) mesh = std::make_unique<ring::Mesh>(*transport, options.group_size);
    return *mesh;
  }
  // forward_hybrid's (hybrid.cpp): Ulysses over the group, the ring step across
  std::unique_ptr<ring::HybridState> hybrid;

  mutable std::mutex mu;
  std::string broken;  // why, once a call failed on the network
  RingInternals::StepHook hook;  // tests only
  std::function<void(int)> observer;  // Ring::on_step

  // decode's: its kernels and pooled buffers (decode.cpp)
  std::map<KernelKey, std::unique_ptr<kernels::CacheAttention>> cache_kernels;
  // decode's (decode.cpp): its collectives and pooled buffers, one per scope (decode_in)
  std::array<std::unique_ptr<ring::DecodeState>, 3> decode;

  AttentionConfig config_for(const AttentionSpec& s) const {
    return AttentionConfig{s, options.threads, options.isa, std::nullopt};
  }

  BlockAttention& kernel_for(const AttentionSpec& s) {
    const KernelKey key = kernel_key(s);
    auto it = kernels.find(key);
    if (it != kernels.end()) return *it->second;
    return *kernels.emplace(key, std::make_unique<BlockAttention>(config_for(s))).first->second;  // validates
  }

  BlockAttentionBackward& backward_kernel_for(const AttentionSpec& s) {
    const KernelKey key = kernel_key(s);
    auto it = backward_kernels.find(key);
    if (it != backward_kernels.end()) return *it->second;
    return *backward_kernels.emplace(key, std::make_unique<BlockAttentionBackward>(config_for(s))).first->second;
  }

  kernels::CacheAttention& cache_kernel_for(const AttentionSpec& s) {
    const KernelKey key = kernel_key(s);
    auto it = cache_kernels.find(key);
    if (it != cache_kernels.end()) return *it->second;
    return *cache_kernels.emplace(key, std::make_unique<kernels::CacheAttention>(config_for(s))).first->second;
  }

  // Throws InvalidArgument (via `bad`) if a call of `rows` rows and this spec exceeds the
  // limits the ring agreed on: checked before anything is sent, so the ring stays usable.
  template <class Bad>
  void check_limits(const AttentionSpec& spec, std::int64_t rows, const char* what, Bad&& bad) const {
    const auto& lim = options.limits;
    if (rows > lim.max_rows)
      bad(std::to_string(rows) + " " + what + " exceed the ring's max_rows = " + std::to_string(lim.max_rows) +
          " (set RingLimits when connecting)");
    if (spec.heads > lim.max_heads || spec.kv_heads > lim.max_kv_heads || spec.head_dim > lim.max_head_dim)
      bad("heads " + std::to_string(spec.heads) + "/" + std::to_string(spec.kv_heads) + ", head_dim " +
          std::to_string(spec.head_dim) + " exceed the ring's limits (" + std::to_string(lim.max_heads) + "/" +
          std::to_string(lim.max_kv_heads) + ", " + std::to_string(lim.max_head_dim) + ")");
  }

  // Throws NetworkError if an earlier call broke the ring.
  void check_usable() const {
    std::lock_guard lock(mu);
    if (!broken.empty())
      throw NetworkError("rank " + std::to_string(options.rank) + ": this ring is broken (" + broken +
                         "); connect a new one");
  }
  void mark_broken(const std::string& why) {
    std::lock_guard lock(mu);
    if (broken.empty()) broken = why;
  }
};

}  // namespace ringattn
