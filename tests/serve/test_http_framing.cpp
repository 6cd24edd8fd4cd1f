// RequestFramer (src/serve/http_framing.hpp) without sockets: where a request ends however
// its bytes arrive (all at once, or one at a time as a slow client sends them), pipelined
// bytes left to the next request, and each bound and malformed framing refused with its status.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "src/serve/http_framing.hpp"

using ringattn::serve::RequestFramer;
using Step = RequestFramer::Step;

namespace {

constexpr std::size_t kHead = 1024, kBody = 100;

struct Outcome {
  Step step;
  std::size_t length;
  int status;
};

// Feeds `bytes` whole, or a byte at a time; what the framer says at the end.
Outcome frame(std::string_view bytes, bool byte_at_a_time) {
  RequestFramer f(kHead, kBody);
  Step step = Step::more;
  if (byte_at_a_time) {
    for (std::size_t n = 1; n <= bytes.size() && step == Step::more; ++n) step = f.scan(bytes.substr(0, n));
  } else {
    step = f.scan(bytes);
  }
  return {step, f.length(), f.refusal().status};
}

}  // namespace

TEST_CASE("http framing: a request ends at the same byte however it arrives; what follows is the next request's") {
  const std::string next = "GET /next HTTP/1.1\r\n\r\n";
  const std::string requests[] = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
      "POST / HTTP/1.1\r\ncontent-length:\t0 \r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n1;a=b\r\nx\r\nA\r\n0123456789\r\n0;last\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string("64\r\n") + std::string(100, 'z') + "\r\n0\r\n\r\n",  // exactly the bound
  };
  for (const std::string& r : requests) {
    CAPTURE(r);
    for (const bool slow : {false, true}) {
      const Outcome o = frame(r + next, slow);
      CHECK(o.step == Step::complete);
      CHECK(o.length == r.size());
    }
    CHECK(frame(r.substr(0, r.size() - 1), false).step == Step::more);  // one byte short
  }
  RequestFramer f(kHead, kBody);
  CHECK(f.scan("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n") == Step::more);
  CHECK(f.head_done());
  CHECK(f.expects_continue());
  CHECK(f.scan("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc") == Step::complete);
}

TEST_CASE("http framing: the bounds (431, 413 at the size that passes them) and malformed framing (400), byte by byte too") {
  const std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::pair<std::string, int> refused[] = {
      {"GET / HTTP/1.1\r\nX: " + std::string(kHead, 'a') + "\r\n\r\n", 431},
      {"POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 413},
      {chunked + "65\r\n", 413},                       // 101 in one chunk: refused before its data
      {chunked + "60\r\n" + std::string(0x60, 'a') + "\r\n5\r\n", 413},  // 96 + 5 over two
      {chunked + "1;" + std::string(RequestFramer::kChunkLine, 'e') + "\r\n", 400},
      {chunked + "g\r\n", 400},
      {chunked + "\r\n", 400},
      {chunked + "5;\n", 400},
      {chunked + "5\r\nhelloX", 400},
      {chunked + "0\r\nX: trailer\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\n Content-Length: 1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nNo colon\r\n\r\n", 400},
      {"GET / HTTP/1.1\rX: y\r\n\r\n", 400},
      {std::string("GET / HTTP/1.1\r\nX: \0\r\n\r\n", 23), 400},
  };
  for (const auto& [bytes, status] : refused) {
    CAPTURE(bytes);
    for (const bool slow : {false, true}) {
      const Outcome o = frame(bytes, slow);
      CHECK(o.step == Step::refused);
      CHECK(o.status == status);
    }
  }
  // A chunked body's framing is bounded too: a byte of data per 1 KiB size line is refused
  // long before it could hold the connection's buffer at a megabyte per byte of body.
  std::string tiny = chunked;
  const std::string chunk = "1;" + std::string(1000, 'e') + "\r\nx\r\n";
  while (tiny.size() < chunked.size() + kBody + RequestFramer::kChunkFraming + 2048) tiny += chunk;
  RequestFramer f(kHead, kBody);
  CHECK(f.scan(tiny) == Step::refused);
  CHECK(f.refusal().status == 413);
  CHECK(f.refusal().message.find("chunked body") != std::string::npos);
}
