// ringattn serve — the responses /v1/responses stored (OpenAI's `store`, true by default), so
// that a request can go on from one (`previous_response_id`) and a client can read one back
// (GET /v1/responses/ID) or delete it. Each holds the conversation through its output as chat
// messages (without its instructions, which OpenAI does not carry over) and the response
// object as answered. In memory on rank 0, bounded (kMaxEntries, kMaxBytes: the least
// recently used go first; one larger than the whole bound is not kept), gone when the
// daemon stops. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "../../infer/common/json.hpp"

namespace ringattn::serve {

class ResponseStore {
 public:
  static constexpr std::size_t kMaxEntries = 1024;
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

  void put(const std::string& id, const infer::Json& conversation, std::string response);
  std::optional<infer::Json> conversation(const std::string& id);  // its messages, through its output
  std::optional<std::string> response(const std::string& id);      // the response object's JSON
  bool erase(const std::string& id);
  std::size_t size() const;

 private:
  struct Entry {
    std::string conversation;  // JSON text: a few bytes a message, counted as stored
    std::string response;
    std::list<std::string>::iterator use;
  };
  Entry* touch(const std::string& id);  // mu_ held
  void drop(std::map<std::string, Entry>::iterator it);

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> order_;  // least recently used first
  std::size_t bytes_ = 0;
};

}  // namespace ringattn::serve
