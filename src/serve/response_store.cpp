// ringattn serve — the stored responses (response_store.hpp).
#include "response_store.hpp"

#include <utility>

namespace ringattn::serve {

void ResponseStore::put(const std::string& id, const infer::Json& conversation, std::string response) {
  std::string text = conversation.dump();
  const std::size_t bytes = text.size() + response.size() + id.size();
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) drop(it);
  if (bytes > kMaxBytes) return;  // larger than the whole store: not kept (a later previous_response_id says so)
  while (!order_.empty() && (entries_.size() >= kMaxEntries || bytes_ + bytes > kMaxBytes)) drop(entries_.find(order_.front()));
  order_.push_back(id);
  entries_.emplace(id, Entry{std::move(text), std::move(response), std::prev(order_.end())});
  bytes_ += bytes;
}

ResponseStore::Entry* ResponseStore::touch(const std::string& id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  order_.splice(order_.end(), order_, it->second.use);
  return &it->second;
}

std::optional<infer::Json> ResponseStore::conversation(const std::string& id) {
  std::string text;
  {
    std::lock_guard lock(mu_);
    const Entry* e = touch(id);
    if (!e) return std::nullopt;
    text = e->conversation;
  }
  return infer::parse_json(text);  // written by put(): well-formed
}

std::optional<std::string> ResponseStore::response(const std::string& id) {
  std::lock_guard lock(mu_);
  const Entry* e = touch(id);
  if (!e) return std::nullopt;
  return e->response;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  drop(it);
  return true;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

void ResponseStore::drop(std::map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.conversation.size() + it->second.response.size() + it->first.size();
  order_.erase(it->second.use);
  entries_.erase(it);
}

}  // namespace ringattn::serve
