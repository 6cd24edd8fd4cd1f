// A deadline on one stream: closes it when the time passes (which ends whatever read or
// write is pending on it), unless disarmed first. A timer handler that fired just
// before the disarm still runs afterwards, possibly once the stream is gone; it looks at
// a shared flag first, never at a dangling stream.
#pragma once

#include <asio/steady_timer.hpp>
#include <memory>

#include "net/tcp/stream.hpp"

namespace ringattn::net::tcp {

class StreamDeadline {
 public:
  template <class When>  // a duration or a time point
  StreamDeadline(Stream& stream, When when) : timer_(stream.get_executor(), when), state_(std::make_shared<State>()) {
    state_->stream = &stream;
    timer_.async_wait([st = state_](std::error_code ec) {
      if (ec || !st->armed) return;
      st->fired = true;
      st->stream->close();
    });
  }
  ~StreamDeadline() { disarm(); }
  StreamDeadline(const StreamDeadline&) = delete;
  StreamDeadline& operator=(const StreamDeadline&) = delete;

  void disarm() {
    state_->armed = false;
    timer_.cancel();
  }
  bool fired() const { return state_->fired; }

 private:
  struct State {
    Stream* stream = nullptr;
    bool armed = true;
    bool fired = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<State> state_;
};

}  // namespace ringattn::net::tcp
