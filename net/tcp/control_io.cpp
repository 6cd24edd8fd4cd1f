// Control frames outside a link (control_io.hpp).
#include "net/tcp/control_io.hpp"

#include <array>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "net/crc32c.hpp"
#include "net/tcp/coroutines.hpp"

namespace ringattn::net::tcp {
namespace {
constexpr auto kAwait = asio::use_awaitable;
}  // namespace

asio::awaitable<std::error_code> write_control(Stream& s, FrameKind kind, std::span<const std::byte> payload) {
  const HeaderBytes hb = encode_header(control_header(kind, payload));
  const std::array<asio::const_buffer, 2> frame{asio::buffer(hb), asio::buffer(payload.data(), payload.size())};
  std::error_code ec;
  co_await asio::async_write(s, frame, asio::redirect_error(kAwait, ec));
  co_return ec;
}

asio::awaitable<void> send_error(Stream& s, FailureCause cause, int origin, const std::string& text) {
  const std::string payload = encode_error({origin, cause, text});
  co_await write_control(s, FrameKind::error, std::as_bytes(std::span(payload.data(), payload.size())));
  s.shutdown_send();
}

asio::awaitable<ControlFrame> read_control(Stream& s) {
  ControlFrame f;
  HeaderBytes hb{};
  std::error_code ec;
  co_await asio::async_read(s, asio::buffer(hb), asio::redirect_error(kAwait, ec));
  if (ec) {
    f.eof = ec == asio::error::eof;
    f.error = f.eof ? "the peer closed the connection during the handshake" : ec.message();
    co_return f;
  }
  f.protocol_seen = hb[0] == std::byte{'R'} && hb[1] == std::byte{'A'} && hb[2] == std::byte{'T'} && hb[3] == std::byte{'N'};
  f.error = try_decode_header(hb, FrameLimits::handshake_only(), f.header);
  if (!f.error.empty()) co_return f;
  f.payload.resize(static_cast<std::size_t>(f.header.payload_bytes));
  co_await asio::async_read(s, asio::buffer(f.payload), asio::redirect_error(kAwait, ec));
  if (ec) {
    f.error = "reading a " + std::string(to_string(f.header.kind)) + " payload: " + ec.message();
    co_return f;
  }
  if (crc32c(f.payload) != f.header.payload_crc)
    f.error = "payload CRC32C mismatch on a " + std::string(to_string(f.header.kind)) + " frame";
  co_return f;
}

}  // namespace ringattn::net::tcp
