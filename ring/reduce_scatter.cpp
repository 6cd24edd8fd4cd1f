#include "ring/reduce_scatter.hpp"

#include <cstring>

namespace ringattn::ring {

void put_state(std::vector<std::byte>& out, const OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  out.resize(static_cast<std::size_t>(s.rows) * row * 4);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    std::byte* b = out.data() + r * row * 4;
    std::memcpy(b, s.o.data() + r * H * D, H * D * 4);
    std::memcpy(b + H * D * 4, s.m.data() + r * H, H * 4);
    std::memcpy(b + H * (D + 1) * 4, s.l.data() + r * H, H * 4);
  }
}

void get_state(const std::vector<std::byte>& in, OnlineSoftmaxState& s) {
  const std::size_t H = static_cast<std::size_t>(s.heads), D = static_cast<std::size_t>(s.head_dim);
  const std::size_t row = H * (D + 2);
  for (std::size_t r = 0; r < static_cast<std::size_t>(s.rows); ++r) {
    const std::byte* b = in.data() + r * row * 4;
    std::memcpy(s.o.data() + r * H * D, b, H * D * 4);
    std::memcpy(s.m.data() + r * H, b + H * D * 4, H * 4);
    std::memcpy(s.l.data() + r * H, b + H * (D + 1) * 4, H * 4);
  }
}

}  // namespace ringattn::ring
