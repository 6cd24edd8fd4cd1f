#include "ring/collectives/exchange.hpp"

#include <algorithm>
#include <chrono>

#include "ringattn/error.hpp"

namespace ringattn::collectives {

namespace {

constexpr std::uint64_t kMaxPieces = 1u << 16;

// The frames a payload of `bytes` travels as: fn(offset, length, header step) for each
// piece of at most max_frame bytes (one, empty, for an empty payload). Throws
// InvalidArgument, naming `what`, past 65536 pieces.
template <class Fn>
void for_each_piece(std::size_t bytes, std::uint64_t max_frame, FrameId id, int rank, const std::string& what, Fn&& fn) {
  const std::uint64_t n = bytes == 0 ? 1 : (bytes + max_frame - 1) / max_frame;
  if (n > kMaxPieces)
    throw InvalidArgument("rank " + std::to_string(rank) + ": " + to_string(id.kind) + " of " + std::to_string(bytes) +
                          " bytes " + what + " needs more than 65536 frames of the ring's " + std::to_string(max_frame) +
                          " bytes");
  for (std::uint64_t p = 0; p < n; ++p) {
    const auto off = static_cast<std::size_t>(p * max_frame);
    fn(off, std::min<std::size_t>(bytes - off, static_cast<std::size_t>(max_frame)),
       (static_cast<std::uint64_t>(id.step) << 16) | p);
  }
}

}  // namespace

std::uint32_t Exchange::schedule_of(Kind k) const { return ring::schedule(family_, static_cast<std::uint32_t>(k)); }

const char* to_string(Kind k) {
  switch (k) {
    case Kind::all_gather: return "all-gather";
    case Kind::reduce_scatter: return "reduce-scatter";
    case Kind::all_reduce: return "all-reduce";
    case Kind::all_to_all: return "all-to-all";
  }
  return "collective";
}

// One posted piece's receive: the expected frame, and what came instead.
struct Exchange::Receive {
  int from = 0;
  net::Tag tag;
  std::span<std::byte> into;
  std::vector<std::byte>* sized = nullptr;  // receive_sized: grown to what comes
  net::Request request;
  bool mismatch = false;
  net::FrameHeader got;
  std::vector<std::byte> discard;  // what came instead (within the negotiated maximum), never read
};

Exchange::Exchange(net::Transport& t, std::uint64_t max_frame, ring::Family family)
    : t_(t), max_frame_(max_frame), family_(family) {
  if (max_frame_ == 0) throw InvalidArgument("collectives: a frame of at most 0 bytes");
}

Exchange::~Exchange() {
  // Requests still posted (a throw between post and wait) hold pointers into callers'
  // buffers: end them with the transport, as every schedule does.
  if (!sends_.empty() || !receives_.empty())
    if (t_.failure().empty()) t_.abort(FailureCause::local, t_.rank(), "a collective was left with transfers in flight");
}

void Exchange::send(int to, FrameId id, std::span<const std::byte> bytes) {
  for_each_piece(bytes.size(), max_frame_, id, t_.rank(), "to rank " + std::to_string(to),
                 [&](std::size_t off, std::size_t len, std::uint64_t step) {
                   sends_.push_back(t_.isend(to, {schedule_of(id.kind), id.call, step}, bytes.subspan(off, len)));
                   stats_.bytes_sent += len;
                 });
}

void Exchange::receive(int from, FrameId id, std::span<std::byte> into) {
  for_each_piece(into.size(), max_frame_, id, t_.rank(), "from rank " + std::to_string(from),
                 [&](std::size_t off, std::size_t len, std::uint64_t step) {
                   auto r = std::make_shared<Receive>();
                   r->from = from;
                   r->tag = {schedule_of(id.kind), id.call, step};
                   r->into = into.subspan(off, len);
                   // Weak: the state holds the request, which holds this callback. A frame that
                   // comes after the state is gone (wait() threw) is refused; the transport has
                   // failed then.
                   r->request = t_.irecv(from, r->tag, [w = std::weak_ptr<Receive>(r)](const net::FrameHeader& h) -> std::span<std::byte> {
                     const auto r = w.lock();
                     if (!r) return {};
                     if (h.payload_bytes == r->into.size()) return r->into;
                     r->mismatch = true;
                     r->got = h;
                     r->discard.resize(static_cast<std::size_t>(h.payload_bytes));  // the transport bounded it
                     return r->discard;
                   });
                   receives_.push_back(std::move(r));
                 });
}

void Exchange::receive_sized(int from, FrameId id, std::vector<std::byte>& into) {
  auto r = std::make_shared<Receive>();
  r->from = from;
  r->tag = {schedule_of(id.kind), id.call, static_cast<std::uint64_t>(id.step) << 16};
  r->sized = &into;
  // The transport bounds the frame by the negotiated maximum = max_frame before this runs.
  r->request = t_.irecv(from, r->tag, [w = std::weak_ptr<Receive>(r)](const net::FrameHeader& h) -> std::span<std::byte> {
    const auto r = w.lock();
    if (!r) return {};
    r->sized->resize(static_cast<std::size_t>(h.payload_bytes));
    r->into = std::span<std::byte>(*r->sized);
    return r->into;
  });
  receives_.push_back(std::move(r));
}

void Exchange::wait() {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<net::Request> sends = std::move(sends_);
  std::vector<std::shared_ptr<Receive>> receives = std::move(receives_);
  sends_.clear();
  receives_.clear();
  auto refuse = [&](const Receive& r) {
    const std::string why = "rank " + std::to_string(t_.ring_rank(t_.rank())) + " expected " + ring::describe(r.tag) +
                            ", " + std::to_string(r.into.size()) + " bytes, from rank " +
                            std::to_string(t_.ring_rank(r.from)) + " but got " +
                            ring::describe(r.got.tag) + ", " + std::to_string(r.got.payload_bytes) +
                            " bytes (every rank must call the same collectives, in the same order, with sizes that agree)";
    t_.abort(FailureCause::protocol, r.from, why);
    throw NetworkError(why, FailureCause::protocol, r.from);
  };
  for (auto& r : receives) {
    try {
      t_.wait(r->request);
    } catch (const NetworkError&) {
      if (r->mismatch) refuse(*r);
      throw;
    }
    if (r->mismatch) refuse(*r);
  }
  for (auto& s : sends) t_.wait(s);
  stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace ringattn::collectives
