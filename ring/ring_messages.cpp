// Ring's messages (include/ringattn/messages.hpp): frames tagged with the message's type
// and job on the ring's transport; a receive names the type it waits for.
#include <string>

#include "net/wire.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"
#include "ring/ring_impl.hpp"

namespace ringattn {

struct MessageRequest::State {
  net::Request request;
  int peer = 0;
  bool receive = false;
  std::uint32_t type = 0;                    // a receive's expected type
  std::function<std::span<std::byte>(const MessageHeader&)> buffer_for;
};

namespace {

MessageHeader header_of(const net::FrameHeader& h) { return {h.tag.schedule, h.tag.call, h.payload_bytes}; }

}  // namespace

MessageRequest Ring::send_message(int to, std::uint32_t type, std::uint64_t job, std::span<const std::byte> payload) {
  auto& im = *impl_;
  if (to < 0 || to >= world_size() || to == rank())
    throw InvalidArgument("rank " + std::to_string(rank()) + ": send_message: rank " + std::to_string(to) +
                          " is not another rank of this ring of " + std::to_string(world_size()));
  if (type == 0 || type > kMaxMessageType)
    throw InvalidArgument("send_message: message types are 1 .. " + std::to_string(kMaxMessageType) + ", not " +
                          std::to_string(type) + " (the types above are the library's collectives)");
  MessageRequest r;
  r.state_ = std::make_shared<MessageRequest::State>();
  r.state_->peer = to;
  r.state_->request = im.transport->isend(to, {type, job, 0}, payload);
  return r;
}

MessageRequest Ring::receive_message(int from, std::uint32_t type,
                                     std::function<std::span<std::byte>(const MessageHeader&)> buffer_for) {
  auto& im = *impl_;
  if (from < 0 || from >= world_size() || from == rank())
    throw InvalidArgument("rank " + std::to_string(rank()) + ": receive_message: rank " + std::to_string(from) +
                          " is not another rank of this ring of " + std::to_string(world_size()));
  if (type == 0 || type > kMaxMessageType)
    throw InvalidArgument("receive_message: message types are 1 .. " + std::to_string(kMaxMessageType) + ", not " +
                          std::to_string(type) + " (the types above are the library's collectives)");
  MessageRequest r;
  auto st = std::make_shared<MessageRequest::State>();
  st->peer = from;
  st->receive = true;
  st->type = type;
  st->buffer_for = std::move(buffer_for);
  // Weak: the request owns the state (a dropped request refuses what comes).
  // Any job: the program learns it from the header.
  st->request = im.transport->irecv(from, {type, net::kAnyCall, 0},
                                    [w = std::weak_ptr(st)](const net::FrameHeader& h) -> std::span<std::byte> {
                                      const auto s = w.lock();
                                      return s ? s->buffer_for(header_of(h)) : std::span<std::byte>();
                                    });
  r.state_ = std::move(st);
  return r;
}

MessageHeader Ring::wait(MessageRequest& request) {
  auto& im = *impl_;
  if (!request.valid()) throw InvalidArgument("Ring::wait: an empty MessageRequest");
  auto& st = *request.state_;
  try {
    return header_of(im.transport->wait(st.request));
  } catch (const NetworkError& e) {
    im.mark_broken(e.what());
    throw;
  }
}

bool Ring::ready(const MessageRequest& request) const {
  return request.valid() && impl_->transport->test(request.state_->request);
}

void Ring::abort(const std::string& why, FailureCause cause) {
  impl_->transport->abort(cause, rank(), why);
}

void Ring::announce_leaving() { impl_->transport->announce_leaving(); }

std::vector<int> Ring::leaving_ranks() const { return impl_->transport->leaving_peers(); }

std::string Ring::link_failure() const { return impl_->transport->failure(); }

void Ring::on_step(std::function<void(int step)> observer) { impl_->observer = std::move(observer); }

RingTraffic Ring::traffic() const {
  const net::TransportStats s = impl_->transport->stats();
  RingTraffic t{s.bytes_sent, s.bytes_received, s.frames_sent, s.frames_received, s.io_cpu_seconds, {}};
  for (const auto& l : s.links) t.links.push_back({l.peer, l.bytes_sent, l.bytes_received});
  return t;
}

std::uint64_t Ring::progress() const { return impl_->transport->liveness().progress(); }

Isa Ring::kernel_isa(const AttentionSpec& spec) { return impl_->kernel_for(spec).isa(); }

}  // namespace ringattn
