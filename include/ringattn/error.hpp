// ringattn — the exception types of the library.
//
// Set-up, configuration, protocol and peer failures throw ringattn::Error (or a
// subclass). The message says what failed, where (argument, rank, peer, file) and,
// where it helps, what to do. `main` maps these to a non-zero exit code and prints
// the message as one line.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ringattn {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a value the library cannot accept (shape, pointer, option).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Why a ring failed, as far as the rank that reports it can tell. A launcher that hears
// from every rank uses it to name the rank where a failure began rather than a
// neighbour's reaction to it (a neighbour of a dead rank sees "peer_closed").
enum class FailureCause : std::uint8_t {
  unknown = 0,
  local = 1,         // the origin rank failed by itself (bad input, its own error)
  peer_silent = 2,   // nothing, not even a keep-alive, heard from the origin for the timeout
  peer_stalled = 3,  // the origin is alive but made no progress for the timeout
  peer_closed = 4,   // the origin's connection ended (EOF, reset, BYE): it died or gave up
  mismatch = 5,      // the ranks disagree on the ring or the job (a HELLO field)
  auth = 6,          // authentication failed (different tokens)
  protocol = 7,      // a malformed or corrupt frame from the origin
};

std::string_view to_string(FailureCause c);  // "local", "peer_silent", ...

// A peer broke the protocol, vanished, or a network wait ran past its deadline.
// origin_rank() is the rank the failure is attributed to (-1: unknown).
class NetworkError : public Error {
 public:
  explicit NetworkError(const std::string& what, FailureCause cause = FailureCause::unknown, int origin_rank = -1)
      : Error(what), cause_(cause), origin_rank_(origin_rank) {}
  FailureCause cause() const noexcept { return cause_; }
  int origin_rank() const noexcept { return origin_rank_; }

 private:
  FailureCause cause_;
  int origin_rank_;
};

// An input or output file is missing, malformed or cannot be written.
class FileError : public Error {
 public:
  using Error::Error;
};

inline std::string_view to_string(FailureCause c) {
  switch (c) {
    case FailureCause::unknown: return "unknown";
    case FailureCause::local: return "local";
    case FailureCause::peer_silent: return "peer_silent";
    case FailureCause::peer_stalled: return "peer_stalled";
    case FailureCause::peer_closed: return "peer_closed";
    case FailureCause::mismatch: return "mismatch";
    case FailureCause::auth: return "auth";
    case FailureCause::protocol: return "protocol";
  }
  return "unknown";
}

}  // namespace ringattn
