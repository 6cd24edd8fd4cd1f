// ringattn serve — a request's extent in a connection's bytes (http_framing.hpp).
#include "http_framing.hpp"

#include <algorithm>

namespace ringattn::serve {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x + 32 : x) == (y >= 'A' && y <= 'Z' ? y + 32 : y);
         });
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string size_text(std::uint64_t bytes) {
  if (bytes != 0 && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes != 0 && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

RequestFramer::Step RequestFramer::scan(std::string_view bytes) {
  if (refusal_.status != 0) return Step::refused;
  if (end_ != 0) return Step::complete;
  if (head_end_ == 0) {
    const Step s = head(bytes);
    if (s != Step::more || head_end_ == 0) return s;
  }
  if (chunked_) return chunks(bytes);
  if (bytes.size() < head_end_ + content_length_) return Step::more;
  end_ = head_end_ + content_length_;
  return Step::complete;
}

RequestFramer::Step RequestFramer::head(std::string_view b) {
  for (; at_ < b.size(); ++at_) {
    if (at_ >= head_bytes_)  // answered here: httplib would take a cut head for a malformed one
      return refuse(431, "the request's head is over " + size_text(head_bytes_), "request_too_large");
    const char c = b[at_];
    const char before = at_ > 0 ? b[at_ - 1] : '\0';
    if (c == '\0') return refuse(400, "a NUL byte in the request's head", "malformed_request");
    if (before == '\r' && c != '\n') return refuse(400, "a CR without LF in the request's head", "malformed_request");
    if (c != '\n') continue;
    if (before != '\r') return refuse(400, "an LF without CR in the request's head", "malformed_request");
    const std::string_view line = b.substr(line_, at_ - 1 - line_);
    const bool request_line = line_ == 0;  // httplib parses it
    line_ = at_ + 1;
    if (line.empty()) {
      head_end_ = ++at_;
      return body_framing();
    }
    if (!request_line) {
      if (const Step s = header_line(line); s != Step::more) return s;
    }
  }
  return Step::more;
}

RequestFramer::Step RequestFramer::header_line(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return refuse(400, "a folded header line", "malformed_request");
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos) return refuse(400, "a header line without ':'", "malformed_request");
  const std::string_view name = line.substr(0, colon);
  if (name.empty() || name.back() == ' ' || name.back() == '\t')
    return refuse(400, "a header without a name or with a space before its ':'", "malformed_request");
  const std::string_view value = trimmed(line.substr(colon + 1));
  if (same_name(name, "Content-Length")) {
    if (has_length_) return refuse(400, "more than one Content-Length", "malformed_request");
    if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return refuse(400, "a Content-Length that is not a number of bytes", "malformed_request");
    has_length_ = true;
    for (const char c : value) content_length_ = content_length_ * 10 + static_cast<std::uint64_t>(c - '0');
  } else if (same_name(name, "Transfer-Encoding")) {
    if (chunked_) return refuse(400, "more than one Transfer-Encoding", "malformed_request");
    if (!same_name(value, "chunked")) return refuse(400, "a Transfer-Encoding other than chunked", "malformed_request");
    chunked_ = true;
  } else if (same_name(name, "Expect") && !seen_expect_) {  // httplib looks at the first
    seen_expect_ = true;
    expect_continue_ = value == "100-continue";
  }
  return Step::more;
}

RequestFramer::Step RequestFramer::body_framing() {
  if (chunked_ && has_length_) return refuse(400, "both Content-Length and Transfer-Encoding", "malformed_request");
  if (content_length_ > body_bytes_)  // refused at once: nothing of it is read
    return refuse(413, "the request's body (Content-Length " + std::to_string(content_length_) + ") is over " + size_text(body_bytes_),
                  "request_too_large");
  return Step::more;
}

RequestFramer::Step RequestFramer::chunks(std::string_view b) {
  const auto malformed = [this](const char* what) { return refuse(400, std::string("a malformed chunked body: ") + what, "malformed_request"); };
  const auto too_large = [this] {
    return refuse(413, "the request's chunked body is over " + size_text(body_bytes_), "request_too_large");
  };
  while (at_ < b.size()) {
    if (at_ - head_end_ > body_bytes_ + kChunkFraming) return too_large();  // tiny chunks: framing, not data
    if (chunk_ == Chunk::data) {
      const std::uint64_t k = std::min<std::uint64_t>(chunk_left_, b.size() - at_);
      at_ += k;
      chunk_left_ -= k;
      if (chunk_left_ == 0) chunk_ = Chunk::data_cr;
      continue;
    }
    const char c = b[at_++];
    switch (chunk_) {
      case Chunk::size:
        if (++line_bytes_ > kChunkLine) return malformed("a chunk size line over 1024 bytes");
        if (const int d = hex_digit(c); d >= 0) {
          if (++digits_ > 16) return malformed("a chunk size of more than 16 hex digits");
          chunk_size_ = chunk_size_ * 16 + static_cast<std::uint64_t>(d);
          if (body_ + chunk_size_ > body_bytes_) return too_large();  // at once, before its data
        } else if (digits_ > 0 && c == ';') {
          chunk_ = Chunk::extension;
        } else if (digits_ > 0 && c == '\r') {
          chunk_ = Chunk::size_lf;
        } else {
          return malformed("a chunk size that is not hex");
        }
        break;
      case Chunk::extension:
        if (++line_bytes_ > kChunkLine) return malformed("a chunk size line over 1024 bytes");
        if (c == '\r') chunk_ = Chunk::size_lf;
        else if (c == '\n' || c == '\0') return malformed("a chunk extension with an LF or a NUL");
        break;
      case Chunk::size_lf:
        if (c != '\n') return malformed("a chunk size line not ended by CRLF");
        body_ += chunk_size_;
        chunk_left_ = chunk_size_;
        chunk_ = chunk_size_ == 0 ? Chunk::last_cr : Chunk::data;
        chunk_size_ = 0;
        digits_ = 0;
        line_bytes_ = 0;
        break;
      case Chunk::data_cr:
      case Chunk::data_lf:
        if (c != (chunk_ == Chunk::data_cr ? '\r' : '\n')) return malformed("a chunk's data not followed by CRLF");
        chunk_ = chunk_ == Chunk::data_cr ? Chunk::data_lf : Chunk::size;
        break;
      case Chunk::last_cr:
        if (c != '\r') return malformed("a trailer after the last chunk (httplib reads none)");
        chunk_ = Chunk::last_lf;
        break;
      case Chunk::last_lf:
        if (c != '\n') return malformed("the last chunk not followed by CRLF");
        end_ = at_;
        return Step::complete;
      case Chunk::data:
        break;  // handled above
    }
  }
  return Step::more;
}

RequestFramer::Step RequestFramer::refuse(int status, std::string message, const char* code) {
  refusal_ = {status, std::move(message), code};
  return Step::refused;
}

}  // namespace ringattn::serve
