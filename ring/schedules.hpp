// ringattn — the schedules behind Ring::forward, backward and decode (ring.cpp reads the
// call's schedule and hands the call to one of these), each in its own file.
#pragma once

#include <optional>
#include <span>

#include "ringattn/ring.hpp"

namespace ringattn::ring {

// A call's documents as the schedules take them: none where the call has none.
inline std::optional<std::span<const std::int32_t>> documents_of(const AttentionCall& c) {
  if (c.documents.empty()) return std::nullopt;
  return c.documents;
}

// The ring's schedule in the call's scope (ring.cpp, backward.cpp, decode.cpp).
ForwardStats forward_ring(Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse);
BackwardStats backward_ring(Ring::Impl& im, const AttentionCall& c, const Gradients& g);
DecodeStats decode_ring(Ring& self, Ring::Impl& im, const AttentionCall& c, KVCache& cache, std::span<float> o,
                        std::span<float> lse);
// Ulysses' (ulysses.cpp) and the hybrid's (hybrid.cpp), over the whole ring.
ForwardStats forward_ulysses(Ring& self, Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse);
BackwardStats backward_ulysses(Ring& self, Ring::Impl& im, const AttentionCall& c, const Gradients& g);
ForwardStats forward_hybrid(Ring& self, Ring::Impl& im, const AttentionCall& c, std::span<float> o, std::span<float> lse);
BackwardStats backward_hybrid(Ring& self, Ring::Impl& im, const AttentionCall& c, const Gradients& g);

}  // namespace ringattn::ring
