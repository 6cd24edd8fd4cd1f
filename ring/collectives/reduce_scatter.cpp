#include "ring/collectives/reduce_scatter.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::collectives {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

void sum(std::span<float> into, std::span<const float> from) {
  for (std::size_t i = 0; i < into.size(); ++i) into[i] += from[i];
}

void max(std::span<float> into, std::span<const float> from) {
  for (std::size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void check_counts(const net::Transport& t, const char* what, std::span<float> data, std::span<const std::size_t> counts) {
  const std::string where = "rank " + std::to_string(t.rank()) + ": " + what;
  if (counts.size() != static_cast<std::size_t>(t.world()))
    throw InvalidArgument(where + " with " + std::to_string(counts.size()) + " chunk counts in a ring of " +
                          std::to_string(t.world()) + " (one per rank)");
  std::size_t total = 0;
  for (const std::size_t c : counts) {
    if (c > data.size() - total)
      throw InvalidArgument(where + ": the chunk counts add up to more than the " + std::to_string(data.size()) +
                            " elements given");
    total += c;
  }
  if (total != data.size())
    throw InvalidArgument(where + ": the chunk counts add up to " + std::to_string(total) + ", not the " +
                          std::to_string(data.size()) + " elements given");
}

void reduce_scatter_ring(Exchange& x, Kind kind, std::uint64_t call, std::uint32_t first_step, std::span<float> data,
                         std::span<const std::size_t> counts, std::vector<float>& scratch, const Reduce& reduce,
                         const Produce& produce) {
  net::Transport& t = x.transport();
  const int R = t.rank(), P = t.world();
  std::vector<std::size_t> start(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), start.begin() + 1);
  auto chunk = [&](int c) {
    const auto i = static_cast<std::size_t>(c);
    return data.subspan(start[i], counts[i]);
  };
  if (produce) produce(mod(R - 1, P));
  for (int s = 0; s + 1 < P; ++s) {
    const auto step = first_step + static_cast<std::uint32_t>(s);
    const int in_chunk = mod(R - s - 2, P);
    const std::span<float> out = chunk(mod(R - s - 1, P)), in = chunk(in_chunk);
    if (scratch.size() < in.size()) scratch.resize(in.size());
    const std::span<float> incoming(scratch.data(), in.size());
    x.send(t.successor(), {kind, call, step}, std::as_bytes(out));
    x.receive(t.predecessor(), {kind, call, step}, std::as_writable_bytes(incoming));
    if (produce) produce(in_chunk);  // overlaps both transfers
    x.wait();
    reduce(in, incoming);
  }
}

ExchangeStats ReduceScatter::run(std::span<float> data, std::span<const std::size_t> counts, const Reduce& reduce,
                                 const Produce& produce) {
  check_counts(x_.transport(), "reduce-scatter", data, counts);
  const ExchangeStats before = x_.stats();
  reduce_scatter_ring(x_, Kind::reduce_scatter, ++calls_, 0, data, counts, scratch_, reduce, produce);
  return x_.since(before);
}

}  // namespace ringattn::collectives
