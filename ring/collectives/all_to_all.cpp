#include "ring/collectives/all_to_all.hpp"

#include <cstring>
#include <string>

#include "ringattn/error.hpp"

namespace ringattn::collectives {

ExchangeStats AllToAll::run(std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv) {
  net::Transport& t = x_.transport();
  const int R = t.rank(), P = t.world();
  const std::string where = "rank " + std::to_string(R) + ": all-to-all";
  if (send.size() != static_cast<std::size_t>(P) || recv.size() != static_cast<std::size_t>(P))
    throw InvalidArgument(where + " of " + std::to_string(send.size()) + " blocks out and " + std::to_string(recv.size()) +
                          " in, in a ring of " + std::to_string(P) + " (one per rank each)");
  const auto self = static_cast<std::size_t>(R);
  if (send[self].size() != recv[self].size())
    throw InvalidArgument(where + ": this rank's own block is " + std::to_string(send[self].size()) +
                          " bytes out but " + std::to_string(recv[self].size()) + " in");
  const std::uint64_t call = ++calls_;
  const ExchangeStats before = x_.stats();
  for (int s = 1; s < P; ++s) {
    const int to = (R + s) % P, from = (R - s + P) % P;
    const auto step = static_cast<std::uint32_t>(s);
    x_.send(to, {Kind::all_to_all, call, step}, send[static_cast<std::size_t>(to)]);
    x_.receive(from, {Kind::all_to_all, call, step}, recv[static_cast<std::size_t>(from)]);
  }
  if (!send[self].empty()) std::memmove(recv[self].data(), send[self].data(), send[self].size());
  x_.wait();
  return x_.since(before);
}

}  // namespace ringattn::collectives
