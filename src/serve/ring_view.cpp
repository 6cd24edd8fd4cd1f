// ringattn serve — GET /v1/ring's body (ring_view.hpp).
#include "control_protocol.hpp"  // first Asio include: silences GCC's coroutine false positive

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <algorithm>
#include <exception>
#include <vector>

#include "ringattn/error.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"
#include "metrics.hpp"
#include "ring_service.hpp"
#include "ring_view.hpp"

namespace ringattn::serve {
namespace {

constexpr Millis kAskTimeout{2000};  // a worker's whole answer: connect, token, status
constexpr auto kFresh = std::chrono::milliseconds(500);
constexpr std::int64_t kMaxFigure = std::int64_t{1} << 53;  // exact in a double, and so in JavaScript
constexpr std::size_t kMaxText = 255;
constexpr std::int64_t kMaxLinks = 4096;  // peers a rank's status may list

struct Answer {
  std::string json, error;
};

asio::awaitable<void> ask_status(std::string to, ChannelOptions options, Answer& out) {
  Channel c = co_await Channel::connect(std::move(to), std::move(options));
  co_await c.write_json(R"({"op":"status"})");
  out.json = co_await c.read_json();
  c.close();
}

// Every worker's `status` answer at once; `controls` by rank (rank 0's is not asked, nor an
// empty address: a rank not in the ring's table yet).
std::vector<Answer> ask_workers(const std::vector<std::string>& controls, const RingOptions& ring) {
  std::vector<Answer> out(controls.size());
  asio::io_context io;
  for (std::size_t r = 1; r < controls.size(); ++r) {
    Answer& a = out[r];
    if (controls[r].empty()) {
      a.error = "not in the ring's table yet";
      continue;
    }
    asio::co_spawn(io, ask_status(controls[r], ChannelOptions{ring.token, ring.tls, kAskTimeout}, a), [&a](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        a.error = x.what();
      }
    });
  }
  io.run();
  return out;
}

RankStatus read_answer(const Answer& a, int rank) {
  if (!a.error.empty()) throw Error(a.error);
  const infer::Json v = infer::parse_json(a.json);  // bounded by the channel's largest message
  const std::string* event = infer::json_string(v, "event");
  const infer::Json* data = infer::json_field(v, "data");
  if (!event || *event != "status" || !data) {
    const std::string* m = data ? infer::json_string(*data, "message") : nullptr;
    throw Error("rank " + std::to_string(rank) + " did not answer with its status" + (m ? ": " + m->substr(0, kMaxText) : ""));
  }
  return read_rank_status(data->dump(), rank);
}

// The ranks' control addresses, by rank, from the table rank 0 collected when the ring formed
// (rank 0's own first; empty for a rank it does not list).
std::vector<std::string> control_addresses(const RingService& service) {
  std::vector<std::string> out(static_cast<std::size_t>(service.world()));
  for (const infer::Json& n : infer::parse_json(service.nodes_json())) {
    const std::optional<double> r = infer::json_number(n, "rank");
    const std::string* control = infer::json_string(n, "control");
    if (r && control && *r >= 0 && *r < static_cast<double>(out.size())) out[static_cast<std::size_t>(*r)] = *control;
  }
  return out;
}

}  // namespace

RankStatus read_rank_status(std::string_view json, int rank) {
  const std::string who = "rank " + std::to_string(rank) + "'s status";
  infer::Json v;
  try {
    v = infer::parse_json(json);
  } catch (const std::exception& e) {
    throw Error(who + " is not JSON: " + e.what());
  }
  if (!v.is_object()) throw Error(who + " is not a JSON object");
  auto whole = [&](const char* key, std::int64_t hi) {
    const infer::Json* f = infer::json_field(v, key);
    if (!f) throw Error(who + " has no \"" + key + "\"");
    try {
      return infer::json_int(*f, key, 0, hi);
    } catch (const std::exception& e) {
      throw Error(who + ": " + e.what());
    }
  };
  auto text = [&](const char* key) {
    const std::string* s = infer::json_string(v, key);
    if (!s || s->size() > kMaxText)
      throw Error(who + ": \"" + key + "\" must be a string of at most " + std::to_string(kMaxText) + " bytes");
    return *s;
  };
  RankStatus s;
  s.rank = static_cast<int>(whole("rank", 1 << 20));
  if (s.rank != rank) throw Error(who + " says it is rank " + std::to_string(s.rank));
  s.state = text("state");
  bool known = false;
  for (const RingState x : {RingState::forming, RingState::ready, RingState::running, RingState::draining, RingState::stopped})
    known = known || s.state == to_string(x);
  if (!known) throw Error(who + ": \"state\" is not one of forming, ready, running, draining, stopped");
  s.host = text("host");
  s.cache_rows = whole("cache_rows", kMaxFigure);
  s.bytes_sent = whole("bytes_sent", kMaxFigure);
  s.bytes_received = whole("bytes_received", kMaxFigure);
  if (const infer::Json* links = infer::json_field(v, "links")) {  // [{"peer", "bytes_sent"}], peers ascending
    if (!links->is_array() || links->size() > kMaxLinks)
      throw Error(who + ": \"links\" must be an array of at most " + std::to_string(kMaxLinks) + " links");
    for (const infer::Json& l : *links) {
      const infer::Json* p = infer::json_field(l, "peer");
      const infer::Json* b = infer::json_field(l, "bytes_sent");
      if (!p || !b) throw Error(who + ": every link needs a \"peer\" and \"bytes_sent\"");
      std::int64_t peer = 0, sent = 0;
      try {
        peer = infer::json_int(*p, "peer", 0, kMaxLinks - 1);
        sent = infer::json_int(*b, "bytes_sent", 0, kMaxFigure);
      } catch (const std::exception& e) {
        throw Error(who + ": a link: " + e.what());
      }
      if (peer == rank || (!s.links.empty() && peer <= s.links.back().first))
        throw Error(who + ": its links' peers must be other ranks, ascending");
      s.links.emplace_back(static_cast<int>(peer), sent);
    }
  }
  return s;
}

std::string RingView::json() {
  std::lock_guard lock(mu_);
  if (last_.empty() || std::chrono::steady_clock::now() - made_ >= kFresh) {
    last_ = survey();
    made_ = std::chrono::steady_clock::now();
  }
  return last_;
}

std::string RingView::survey() const {
  const HostedModel* model = service_.model();
  const int world = service_.world();
  const int tp = model ? model->options.tp.size : 1;
  auto figure = [&](const char* name, const Labels& labels = {}) { return metrics_.value(name, labels).value_or(0); };
  auto whole = [&](const char* name, const Labels& labels = {}) { return static_cast<std::int64_t>(figure(name, labels)); };
  // Rank 0's count of the ring's rows: cache_mib on every daemon, each holding an equal share.
  const std::int64_t capacity = whole("ringattn_cache_rows_capacity");
  const std::int64_t per_rank = capacity / std::max(1, world / tp);

  const std::vector<std::string> controls = control_addresses(service_);
  const std::vector<Answer> answers = ask_workers(controls, service_.ring_options());
  std::vector<cli::JsonObject> ranks;
  for (int r = 0; r < world; ++r) {
    const auto i = static_cast<std::size_t>(r);
    cli::JsonObject o;
    o.add("rank", r);
    if (controls[i].empty()) o.add_null("control");
    else o.add("control", controls[i]);
    try {
      const RankStatus s = r == 0 ? read_rank_status(service_.status_json(), 0) : read_answer(answers[i], r);
      o.add("host", s.host).add("state", s.state).add("cache_rows", s.cache_rows).add("cache_rows_capacity", per_rank);
      o.add("bytes_sent", s.bytes_sent).add("bytes_received", s.bytes_received);
      std::vector<cli::JsonObject> links;
      for (const auto& [peer, sent] : s.links)
        if (peer < world) links.push_back(cli::JsonObject().add("peer", peer).add("bytes_sent", sent));
      o.add("links", links).add_null("error");
    } catch (const std::exception& e) {
      for (const char* k : {"host", "state", "cache_rows", "cache_rows_capacity", "bytes_sent", "bytes_received", "links"}) o.add_null(k);
      o.add("error", e.what());
    }
    ranks.push_back(std::move(o));
  }

  cli::JsonObject o;
  o.add("object", "ring");
  if (model) o.add("model", model->name);
  else o.add_null("model");
  o.add("state", to_string(service_.state())).add("health", service_.health()).add("world_size", world).add("tp", tp);
  const RingService::Requests q = service_.requests();
  o.add("requests", cli::JsonObject().add("running", q.running).add("queued", q.queued));
  o.add("sessions", whole("ringattn_sessions"));
  o.add("cache_rows", cli::JsonObject().add("reserved", whole("ringattn_cache_rows_reserved")).add("capacity", capacity));
  o.add("generated_tokens", whole("ringattn_generated_tokens_total", {{"phase", "decode"}}));
  o.add("tokens_per_second", cli::JsonObject()
                                 .add("prefill", figure("ringattn_prefill_tokens_per_second"))
                                 .add("decode", figure("ringattn_decode_tokens_per_second")));
  for (const char* k : {"hits", "lookups"}) {  // where this build has a prefix cache
    const std::string key = std::string("prefix_cache_") + k;
    if (const std::optional<double> n = metrics_.sum("ringattn_" + key + "_total")) o.add(key, static_cast<std::int64_t>(*n));
    else o.add_null(key);
  }
  o.add("ranks", ranks);
  return o.str();
}

}  // namespace ringattn::serve
