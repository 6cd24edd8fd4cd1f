// A ring's mesh (ring/mesh.hpp) and the scoped collectives of include/ringattn/ring.hpp.
#include "ring/mesh.hpp"

#include <chrono>
#include <string>

#include "ring/call_checks.hpp"
#include "ring/internals.hpp"
#include "ring/ring_impl.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace ring {

std::vector<int> group_members(int rank, int world, int group_size) {
  std::vector<int> m;
  for (int i = 0, first = rank / group_size * group_size; i < group_size && first + i < world; ++i) m.push_back(first + i);
  return m;
}

std::vector<int> across_members(int rank, int world, int group_size) {
  std::vector<int> m;
  for (int r = rank % group_size; r < world; r += group_size) m.push_back(r);
  return m;
}

}  // namespace ring

namespace {

using Clock = std::chrono::steady_clock;

const char* name_of(Scope s) { return s == Scope::group ? "group" : s == Scope::across ? "across" : "ring"; }

ring::Mesh::Collectives& collectives_of(Ring& ring, Ring::Impl& im, Scope s) {
  auto& slot = im.mesh_of().scoped[static_cast<std::size_t>(s)];
  if (!slot) slot = std::make_unique<ring::Mesh::Collectives>(im.mesh_of().of(s), RingInternals::max_frame_bytes(ring));
  return *slot;
}

CollectiveStats finish(const collectives::ExchangeStats& x, Clock::time_point start) {
  return {std::chrono::duration<double>(Clock::now() - start).count(), x.wait_seconds, x.bytes_sent};
}

}  // namespace

int Ring::scope_rank(Scope scope) const {
  ring::check_scope(*impl_, scope, "scope_rank");
  return impl_->mesh_of().of(scope).rank();
}
int Ring::scope_size(Scope scope) const {
  ring::check_scope(*impl_, scope, "scope_size");
  return impl_->mesh_of().of(scope).world();
}

CollectiveStats Ring::all_reduce(std::span<float> data, Scope scope) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  ring::check_scope(im, scope, "all_reduce");
  auto& c = collectives_of(*this, im, scope);
  collectives::ExchangeStats x;
  try {
    x = c.reduce.run(data);
  } catch (...) {
    ring::fail_call(im);  // nothing is refused before sending: any failure is the ring's
  }
  return finish(x, start);
}

CollectiveStats Ring::all_gather(std::span<float> data, std::span<const std::size_t> counts, Scope scope) {
  auto& im = *impl_;
  const auto start = Clock::now();
  im.check_usable();
  ring::check_scope(im, scope, "all_gather");
  const net::Transport& t = im.mesh_of().of(scope);
  const std::string where = "rank " + std::to_string(rank()) + ": all_gather over the " + name_of(scope) + ": ";
  if (counts.size() != static_cast<std::size_t>(t.world()))
    throw InvalidArgument(where + std::to_string(counts.size()) + " counts for " + std::to_string(t.world()) + " ranks");
  // Each count is checked against what is left of `data` before it is added: a sum taken
  // first could wrap modulo 2^64 onto data.size() and the blocks then reach past the array.
  std::vector<std::span<std::byte>> blocks;
  std::size_t at = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] > data.size() - at)
      throw InvalidArgument(where + "the counts add up to more than the " + std::to_string(data.size()) +
                            " floats given (rank " + std::to_string(r) + "'s count " + std::to_string(counts[r]) +
                            " with " + std::to_string(data.size() - at) + " left)");
    blocks.push_back(std::as_writable_bytes(data.subspan(at, counts[r])));
    at += counts[r];
  }
  if (at != data.size())
    throw InvalidArgument(where + "the counts add up to " + std::to_string(at) + ", not the " + std::to_string(data.size()) +
                          " floats given");
  auto& c = collectives_of(*this, im, scope);
  collectives::ExchangeStats x;
  try {
    x = c.gather.run(blocks);
  } catch (...) {
    ring::fail_call(im);
  }
  return finish(x, start);
}

}  // namespace ringattn
