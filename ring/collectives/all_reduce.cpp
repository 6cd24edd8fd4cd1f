#include "ring/collectives/all_reduce.hpp"

#include "ring/collectives/all_gather.hpp"

namespace ringattn::collectives {

std::vector<std::size_t> even_counts(std::size_t n, int world) {
  const auto p = static_cast<std::size_t>(world);
  std::vector<std::size_t> c(p, n / p);
  for (std::size_t r = 0; r < n % p; ++r) ++c[r];
  return c;
}

ExchangeStats AllReduce::run(std::span<float> data, Reduce reduce) {
  net::Transport& t = x_.transport();
  const int P = t.world();
  const std::uint64_t call = ++calls_;
  const ExchangeStats before = x_.stats();
  counts_ = even_counts(data.size(), P);
  reduce_scatter_ring(x_, Kind::all_reduce, call, 0, data, counts_, scratch_, reduce);
  chunks_.clear();
  std::size_t at = 0;
  for (const std::size_t c : counts_) {
    chunks_.push_back(std::as_writable_bytes(data.subspan(at, c)));
    at += c;
  }
  gather_ring(x_, Kind::all_reduce, call, static_cast<std::uint32_t>(P - 1), chunks_);
  return x_.since(before);
}

}  // namespace ringattn::collectives
