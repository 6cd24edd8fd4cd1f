// ringattn serve — where one HTTP/1.1 request ends in a connection's bytes, found as they
// arrive, with the size bounds of http_server.hpp applied on the way: the server's gate reads
// each request whole with this before a worker thread sees it.
//
// The framing is read exactly as cpp-httplib 0.11 reads it afterwards (a header's name is the
// bytes before its ':', its value trimmed of spaces and tabs; Transfer-Encoding "chunked" in
// any case; hex chunk sizes, extensions ignored, no trailers), and whatever httplib could read
// differently from us or from a proxy in front is refused (400): a CR or LF outside a CRLF or a
// NUL in the head, a folded line, a space before a ':', a repeated Content-Length or
// Transfer-Encoding or both at once, a Content-Length that is not plain digits, a coding other
// than chunked, a chunk size that is not plain hex, bytes after a chunk other than CRLF, a
// trailer. So the request a worker hands to httplib ends where this says, never elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringattn::serve {

// A size as a person reads it: "1 MiB", "64 KiB", "1000 bytes".
std::string size_text(std::uint64_t bytes);

// The server's own answer to a request it will not hand on: 400, 413 or 431.
struct HttpRefusal {
  int status = 0;
  std::string message;
  const char* code = "";
};

class RequestFramer {
 public:
  RequestFramer(std::size_t head_bytes, std::size_t body_bytes) : head_bytes_(head_bytes), body_bytes_(body_bytes) {}

  enum class Step { more, complete, refused };
  // `bytes`: the connection's bytes from this request's first; each call looks only at what
  // was appended since the last one. `complete`: bytes[0, length()) is the whole request (any
  // further bytes are the next one's).
  Step scan(std::string_view bytes);
  void reset() { *this = RequestFramer(head_bytes_, body_bytes_); }

  std::size_t length() const { return end_; }
  bool head_done() const { return head_end_ != 0; }
  // The head said "Expect: 100-continue" (httplib then writes "100 Continue" itself).
  bool expects_continue() const { return expect_continue_; }
  const HttpRefusal& refusal() const { return refusal_; }

  static constexpr std::size_t kChunkLine = 1024;         // a chunk's size line, with extensions
  static constexpr std::size_t kChunkFraming = 64 << 10;  // a chunked body's framing beyond body_bytes

 private:
  Step head(std::string_view bytes);
  Step header_line(std::string_view line);
  Step body_framing();
  Step chunks(std::string_view bytes);
  Step refuse(int status, std::string message, const char* code);

  std::size_t head_bytes_, body_bytes_;
  std::size_t at_ = 0;          // bytes looked at
  std::size_t line_ = 0;        // where the head's current line starts
  std::size_t head_end_ = 0;    // the head's length, CRLF CRLF included, once found
  std::size_t end_ = 0;         // the request's length, once known
  bool expect_continue_ = false, seen_expect_ = false;
  bool chunked_ = false, has_length_ = false;
  std::uint64_t content_length_ = 0;
  enum class Chunk { size, extension, size_lf, data, data_cr, data_lf, last_cr, last_lf } chunk_ = Chunk::size;
  std::uint64_t chunk_size_ = 0, chunk_left_ = 0, body_ = 0;  // body_: chunk data so far
  int digits_ = 0;
  std::size_t line_bytes_ = 0;
  HttpRefusal refusal_;
};

}  // namespace ringattn::serve
