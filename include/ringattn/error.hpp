// ringattn — the one exception type of the library.
//
// Set-up, configuration, protocol and peer failures throw ringattn::Error (or a
// subclass). The message says what failed, where (argument, rank, peer, file) and,
// where it helps, what to do. `main` maps these to a non-zero exit code and prints
// the message as one line.
#pragma once

#include <stdexcept>
#include <string>

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

// A peer broke the protocol, vanished, or a network wait ran past its deadline.
class NetworkError : public Error {
 public:
  using Error::Error;
};

// An input or output file is missing, malformed or cannot be written.
class FileError : public Error {
 public:
  using Error::Error;
};

}  // namespace ringattn
