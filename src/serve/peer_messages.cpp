#include "peer_messages.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "ringattn/byte_order.hpp"
#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "payload_codec.hpp"

namespace ringattn::serve::peer {
namespace {

constexpr std::size_t kDescriptionBytes = 32;

void write_info(Writer& w, const NodeInfo& n) {
  w.u32(static_cast<std::uint32_t>(n.rank));
  w.u32(static_cast<std::uint32_t>(n.threads));
  for (const std::string* s : {&n.host, &n.control, &n.metrics, &n.version, &n.isa}) w.text(*s);
}

NodeInfo read_info(Reader& r, int world) {
  NodeInfo n;
  const std::uint32_t rank = r.u32(), threads = r.u32();
  if (rank >= static_cast<std::uint32_t>(world)) r.bad("names rank " + std::to_string(rank) + " of " + std::to_string(world));
  if (threads > static_cast<std::uint32_t>(kMaxThreads)) r.bad("names " + std::to_string(threads) + " threads");
  n.rank = static_cast<int>(rank);
  n.threads = static_cast<int>(threads);
  for (std::string* s : {&n.host, &n.control, &n.metrics, &n.version, &n.isa}) *s = r.text();
  return n;
}

// A count sent as a double, checked before the cast (a NaN or 1e300 is refused).
std::int64_t whole(Reader& r, double v, const char* field, double hi) {
  if (!(v >= 0 && v <= hi) || v != std::floor(v)) r.bad("has " + std::string(field) + " = " + std::to_string(v));
  return static_cast<std::int64_t>(v);
}

[[noreturn]] void bad_shard(const std::string& what) {
  throw NetworkError("rank 0 sent a job shard that " + what, FailureCause::protocol, 0);
}

}  // namespace

std::string_view to_string(Msg m) {
  switch (m) {
    case Msg::info: return "INFO";
    case Msg::table: return "TABLE";
    case Msg::shard: return "SHARD";
    case Msg::query: return "QUERY";
    case Msg::result: return "RESULT";
    case Msg::stats: return "STATS";
    case Msg::done: return "DONE";
    case Msg::job: return "JOB";
    case Msg::generate: return "GENERATE";
  }
  return "?";
}

std::vector<std::byte> encode_info(const NodeInfo& n) {
  Writer w;
  write_info(w, n);
  return std::move(w.out);
}

NodeInfo decode_info(std::span<const std::byte> payload, int from) {
  Reader r{payload, "the INFO from rank " + std::to_string(from), from};
  NodeInfo n = read_info(r, std::numeric_limits<int>::max());
  r.end();
  if (n.rank != from) r.bad("names rank " + std::to_string(n.rank));
  return n;
}

std::vector<std::byte> encode_table(const std::vector<NodeInfo>& nodes) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(nodes.size()));
  for (const auto& n : nodes) write_info(w, n);
  return std::move(w.out);
}

std::vector<NodeInfo> decode_table(std::span<const std::byte> payload, int world) {
  Reader r{payload, "the TABLE from rank 0", 0};
  const std::uint32_t count = r.u32();
  if (count != static_cast<std::uint32_t>(world))
    r.bad("lists " + std::to_string(count) + " nodes for a ring of " + std::to_string(world));
  std::vector<NodeInfo> nodes;
  for (std::uint32_t i = 0; i < count; ++i) {
    nodes.push_back(read_info(r, world));
    if (nodes.back().rank != static_cast<int>(i)) r.bad("lists rank " + std::to_string(nodes.back().rank) + " in place " + std::to_string(i));
  }
  r.end();
  return nodes;
}

std::vector<std::byte> shard_payload(const JobRequest& q, const Positions& pos) {
  const auto rows = static_cast<std::size_t>(pos.size());
  const auto kv = static_cast<std::size_t>(q.kv_heads * q.head_dim);
  std::vector<std::byte> out(kDescriptionBytes + rows * 8 + 2 * rows * kv * 4);
  std::byte* p = out.data();
  put_le<std::uint32_t>(p + 0, static_cast<std::uint32_t>(q.heads));
  put_le<std::uint32_t>(p + 4, static_cast<std::uint32_t>(q.kv_heads));
  put_le<std::uint32_t>(p + 8, static_cast<std::uint32_t>(q.head_dim));
  put_le<std::uint8_t>(p + 12, static_cast<std::uint8_t>(q.mask.kind));
  put_le<std::uint8_t>(p + 13, static_cast<std::uint8_t>(q.dtype));
  put_le<std::uint8_t>(p + 14, q.want_lse ? 1 : 0);
  put_le<std::uint8_t>(p + 15, static_cast<std::uint8_t>(q.layout));
  put_le<std::uint64_t>(p + 16, static_cast<std::uint64_t>(q.mask.window));
  put_le<std::uint64_t>(p + 24, static_cast<std::uint64_t>(q.tokens));
  std::vector<std::int64_t> positions;
  pos.materialize_into(positions);
  for (std::size_t r = 0; r < rows; ++r) put_le<std::uint64_t>(p + kDescriptionBytes + r * 8, static_cast<std::uint64_t>(positions[r]));
  return out;
}

std::vector<std::byte> query_payload(const JobRequest& q, const Positions& pos) {
  return std::vector<std::byte>(static_cast<std::size_t>(pos.size() * q.heads * q.head_dim) * 4);
}

std::span<float> query_rows(std::vector<std::byte>& payload) {
  return {reinterpret_cast<float*>(payload.data()), payload.size() / 4};
}

Shard shard_view(std::vector<std::byte>& payload, const JobRequest& q, std::int64_t rows) {
  Shard s;
  s.request = q;
  s.positions.resize(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < s.positions.size(); ++r)
    s.positions[r] = static_cast<std::int64_t>(get_le<std::uint64_t>(payload.data() + kDescriptionBytes + r * 8));
  const std::size_t n = static_cast<std::size_t>(rows * q.kv_heads * q.head_dim);
  auto* kv = reinterpret_cast<float*>(payload.data() + kDescriptionBytes + static_cast<std::size_t>(rows) * 8);
  s.k = {kv, n};
  s.v = {kv + n, n};
  return s;
}

Shard decode_shard(std::vector<std::byte>& payload, int world, const RingLimits& limits) {
  if (payload.size() < kDescriptionBytes) bad_shard("has " + std::to_string(payload.size()) + " bytes");
  const std::byte* p = payload.data();
  JobRequest q;
  q.heads = get_le<std::uint32_t>(p + 0);
  q.kv_heads = get_le<std::uint32_t>(p + 4);
  q.head_dim = get_le<std::uint32_t>(p + 8);
  const auto mask = get_le<std::uint8_t>(p + 12);
  const auto dtype = get_le<std::uint8_t>(p + 13);
  q.want_lse = get_le<std::uint8_t>(p + 14) != 0;
  const auto layout = get_le<std::uint8_t>(p + 15);
  const auto window = static_cast<std::int64_t>(get_le<std::uint64_t>(p + 16));
  q.tokens = static_cast<std::int64_t>(get_le<std::uint64_t>(p + 24));
  if (q.heads < 1 || q.heads > limits.max_heads || q.head_dim < 1 || q.head_dim > limits.max_head_dim ||
      q.kv_heads < 1 || q.kv_heads > limits.max_kv_heads || q.heads % q.kv_heads != 0)
    bad_shard("has heads " + std::to_string(q.heads) + "/" + std::to_string(q.kv_heads) + ", head_dim " +
              std::to_string(q.head_dim));
  if (mask > 2 || dtype > 1 || layout > 2) bad_shard("has an unknown mask, dtype or layout");
  q.mask = mask == 0 ? Mask::none() : mask == 1 ? Mask::causal() : Mask::sliding_window(window);
  if (q.mask.kind == MaskKind::window && window < 1) bad_shard("has a window < 1");
  q.dtype = static_cast<DType>(dtype);
  q.layout = static_cast<Layout>(layout);
  if (q.tokens < world || q.tokens > limits.max_rows * world) bad_shard("has " + std::to_string(q.tokens) + " tokens");
  const std::size_t per_row = 8 + 2 * static_cast<std::size_t>(q.kv_heads * q.head_dim) * 4;
  const std::size_t body = payload.size() - kDescriptionBytes;
  if (body % per_row != 0 || body / per_row < 1 || body / per_row > static_cast<std::size_t>(limits.max_rows))
    bad_shard("has " + std::to_string(payload.size()) + " bytes, not whole rows of " + std::to_string(per_row));
  Shard s = shard_view(payload, q, static_cast<std::int64_t>(body / per_row));
  for (std::size_t r = 0; r < s.positions.size(); ++r)
    if (s.positions[r] < 0 || s.positions[r] >= q.tokens || (r > 0 && s.positions[r] <= s.positions[r - 1]))
      bad_shard("has positions that are not increasing within 0..tokens-1");
  return s;
}

std::vector<std::byte> encode_stats(const NodeResult& r) {
  Writer w;
  for (double d : {r.seconds, r.compute_seconds, r.wait_seconds, r.useful_flops, static_cast<double>(r.steps),
                   static_cast<double>(r.steps_skipped), static_cast<double>(r.bytes_sent), static_cast<double>(r.rows)})
    w.f64(d);
  return std::move(w.out);
}

NodeResult decode_stats(std::span<const std::byte> payload, int rank) {
  Reader rd{payload, "the STATS from rank " + std::to_string(rank), rank};
  NodeResult r;
  r.rank = rank;
  r.seconds = rd.f64();
  r.compute_seconds = rd.f64();
  r.wait_seconds = rd.f64();
  r.useful_flops = rd.f64();
  r.steps = static_cast<int>(whole(rd, rd.f64(), "steps", 1 << 30));
  r.steps_skipped = static_cast<int>(whole(rd, rd.f64(), "steps_skipped", 1 << 30));
  r.bytes_sent = static_cast<std::uint64_t>(whole(rd, rd.f64(), "bytes_sent", 0x1p62));
  r.rows = whole(rd, rd.f64(), "rows", 0x1p40);
  rd.end();
  return r;
}

void send(Ring& ring, int to, Msg type, std::uint64_t job, std::span<const std::byte> payload) {
  MessageRequest s = ring.send_message(to, static_cast<std::uint32_t>(type), job, payload);
  ring.wait(s);
}

namespace {

// One receive: `into(header)` gives the buffer for a message of the right size, or an
// empty span; a wrong size or job is named after the wait.
template <class Into>
MessageHeader receive_checked(Ring& ring, int from, Msg type, std::uint64_t job, std::uint64_t want, Into&& into) {
  bool wrong_size = false;
  std::uint64_t got_bytes = 0;
  MessageRequest r = ring.receive_message(from, static_cast<std::uint32_t>(type), [&](const MessageHeader& h) {
    if (want != kAnySize && h.bytes != want) {
      wrong_size = true;
      got_bytes = h.bytes;
      return std::span<std::byte>();
    }
    return into(h);
  });
  auto named = [&] {
    return std::string(to_string(type)) + " from rank " + std::to_string(from) +
           (job ? " for job " + std::to_string(job) : std::string());
  };
  MessageHeader h;
  try {
    h = ring.wait(r);
  } catch (const NetworkError& e) {
    if (!wrong_size) throw;
    throw NetworkError("the " + named() + " has " + std::to_string(got_bytes) + " bytes, expected " +
                           std::to_string(want) + " (" + e.what() + ")",
                       FailureCause::protocol, from);
  }
  const std::string why = wrong_size ? "the " + named() + " has " + std::to_string(got_bytes) + " bytes, expected " +
                                           std::to_string(want)
                          : job && h.job != job ? "the " + named() + " belongs to job " + std::to_string(h.job)
                                                : std::string();
  if (!why.empty()) {
    ring.abort(why, FailureCause::protocol);
    throw NetworkError(why, FailureCause::protocol, from);
  }
  return h;
}

}  // namespace

MessageHeader receive(Ring& ring, int from, Msg type, std::uint64_t job, std::vector<std::byte>& buf,
                      std::uint64_t want) {
  return receive_checked(ring, from, type, job, want, [&](const MessageHeader& h) {
    buf.resize(static_cast<std::size_t>(h.bytes));  // bounded by the ring's largest frame
    return std::span<std::byte>(buf);
  });
}

MessageHeader receive_into(Ring& ring, int from, Msg type, std::uint64_t job, std::span<std::byte> into) {
  return receive_checked(ring, from, type, job, into.size(), [&](const MessageHeader&) { return into; });
}

}  // namespace ringattn::serve::peer
