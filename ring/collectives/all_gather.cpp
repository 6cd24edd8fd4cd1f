#include "ring/collectives/all_gather.hpp"

#include <string>

#include "ringattn/error.hpp"

namespace ringattn::collectives {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

void gather_ring(Exchange& x, Kind kind, std::uint64_t call, std::uint32_t first_step,
                 std::span<const std::span<std::byte>> blocks) {
  net::Transport& t = x.transport();
  const int R = t.rank(), P = t.world();
  for (int s = 0; s + 1 < P; ++s) {
    const auto step = first_step + static_cast<std::uint32_t>(s);
    x.send(t.successor(), {kind, call, step}, blocks[static_cast<std::size_t>(mod(R - s, P))]);
    x.receive(t.predecessor(), {kind, call, step}, blocks[static_cast<std::size_t>(mod(R - s - 1, P))]);
    x.wait();
  }
}

ExchangeStats AllGather::run(std::span<const std::span<std::byte>> blocks) {
  const net::Transport& t = x_.transport();
  if (blocks.size() != static_cast<std::size_t>(t.world()))
    throw InvalidArgument("rank " + std::to_string(t.rank()) + ": all-gather of " + std::to_string(blocks.size()) +
                          " blocks in a ring of " + std::to_string(t.world()) + " (one block per rank)");
  const ExchangeStats before = x_.stats();
  gather_ring(x_, Kind::all_gather, ++calls_, 0, blocks);
  return x_.since(before);
}

ExchangeStats AllGather::run_sized(std::span<std::vector<std::byte>> blocks, const Arrived& arrived) {
  net::Transport& t = x_.transport();
  const int R = t.rank(), P = t.world();
  if (blocks.size() != static_cast<std::size_t>(P))
    throw InvalidArgument("rank " + std::to_string(R) + ": all-gather of " + std::to_string(blocks.size()) +
                          " blocks in a ring of " + std::to_string(P) + " (one block per rank)");
  if (blocks[static_cast<std::size_t>(R)].size() > x_.max_frame())
    throw InvalidArgument("rank " + std::to_string(R) + ": an all-gather block of " +
                          std::to_string(blocks[static_cast<std::size_t>(R)].size()) +
                          " bytes sized on arrival must fit one frame of " + std::to_string(x_.max_frame()));
  const ExchangeStats before = x_.stats();
  const std::uint64_t call = ++calls_;
  for (int s = 0; s + 1 < P; ++s) {
    const auto step = static_cast<std::uint32_t>(s);
    const int out = mod(R - s, P), in = mod(R - s - 1, P);
    x_.send(t.successor(), {Kind::all_gather, call, step}, blocks[static_cast<std::size_t>(out)]);
    x_.receive_sized(t.predecessor(), {Kind::all_gather, call, step}, blocks[static_cast<std::size_t>(in)]);
    x_.wait();
    arrived(s, in);
  }
  return x_.since(before);
}

}  // namespace ringattn::collectives
