// ringattn serve — the ring's live state for people: the body of GET /v1/ring on rank 0's API
// port (the page of web_page.hpp draws it every second; docs/daemons.md shows the JSON).
//
// Built on rank 0 from what it has: its own metrics (the cache's rows, requests, tokens and
// tokens/s, prefix-cache hits and lookups where this build counts them) and every rank's own
// figures — the rows it keeps, the bytes its links carried — from the `status` answer that `ringattn
// status` also reads (RingService::status_json). Rank 0 asks every worker's control port for
// it at once, with the ring's token and TLS, each answer within 2 s, and checks each field
// as it would a wire message's; a rank that does not answer, or answers wrongly, is listed
// with its error and no figures. One survey runs at a time, and an answer younger than
// 500 ms is served again: many open pages cost the workers one status request each per
// half second at most.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include <string_view>

namespace ringattn::serve {

class Metrics;
class RingService;

// One rank's figures as its `status` answer gives them, every field checked: the rank it must
// be, a known state, a host name of at most 255 bytes, whole numbers in [0, 2^53]. Throws
// Error naming the rank and the field.
struct RankStatus {
  int rank = 0;
  std::string host, state;
  std::int64_t cache_rows = 0, bytes_sent = 0, bytes_received = 0;
  std::vector<std::pair<int, std::int64_t>> links;  // the bytes it sent to each peer rank, ascending
};
RankStatus read_rank_status(std::string_view json, int rank);

class RingView {
 public:
  RingView(const RingService& service, const Metrics& metrics) : service_(service), metrics_(metrics) {}
  std::string json();  // the JSON object of GET /v1/ring, at most 500 ms old

 private:
  std::string survey() const;
  const RingService& service_;
  const Metrics& metrics_;
  std::mutex mu_;  // one survey at a time; guards the last answer
  std::chrono::steady_clock::time_point made_{};
  std::string last_;
};

}  // namespace ringattn::serve
