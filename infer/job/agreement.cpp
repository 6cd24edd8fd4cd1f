#include "agreement.hpp"

#include <ringattn/error.hpp>

#include <cstdio>
#include <span>
#include <vector>

namespace infer {
namespace {

constexpr std::uint32_t kModelDigest = 0x4D44;  // a rank's digest (job) and what it loaded (payload)
constexpr std::uint32_t kVerdict = 0x4D56;      // rank 0's answer: job 0 agreed, 1 not; payload the reason
constexpr std::size_t kMaxText = 4096;          // a description or a verdict

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// The next message of `type` from `from`, its text bounded before it is read.
std::pair<std::uint64_t, std::string> hear(ringattn::Ring& ring, int from, std::uint32_t type) {
  std::string text;
  ringattn::MessageRequest r = ring.receive_message(from, type, [&](const ringattn::MessageHeader& h) {
    if (h.bytes > kMaxText) return std::span<std::byte>();  // refused: the ring fails naming the message
    text.resize(static_cast<std::size_t>(h.bytes));
    return std::as_writable_bytes(std::span(text.data(), text.size()));
  });
  const ringattn::MessageHeader h = ring.wait(r);
  return {h.job, text};
}

}  // namespace

void agree_on_model(ringattn::Ring& ring, std::uint64_t digest, const std::string& loaded, int parts) {
  const int P = ring.world_size(), me = ring.rank(), first = me % parts;  // first: the rank holding my part in group 0
  if (P == parts) return;  // (the caller skips the digest then too)
  const std::string mine = loaded.substr(0, kMaxText);
  if (me != first) {
    ringattn::MessageRequest s = ring.send_message(first, kModelDigest, digest, bytes_of(mine));
    ring.wait(s);
    const auto [disagree, why] = hear(ring, first, kVerdict);
    if (disagree) throw ringattn::InvalidArgument(why);
    return;
  }
  std::string verdict;
  for (int r = first + parts; r < P; r += parts) {
    const auto [theirs, what] = hear(ring, r, kModelDigest);
    if (theirs != digest && verdict.empty())
      verdict = "rank " + std::to_string(first) + " and rank " + std::to_string(r) + " hold different models: rank " +
                std::to_string(first) + " loaded " + mine + " (digest " +
                hex(digest) + "), rank " + std::to_string(r) + " loaded " + what + " (digest " + hex(theirs) +
                "); give every rank the same model and tokenizer files";
  }
  const std::string answer = verdict.substr(0, kMaxText);
  std::vector<ringattn::MessageRequest> sends;
  for (int r = first + parts; r < P; r += parts)
    sends.push_back(ring.send_message(r, kVerdict, verdict.empty() ? 0 : 1, bytes_of(answer)));
  for (auto& s : sends) ring.wait(s);
  if (!verdict.empty()) throw ringattn::InvalidArgument(verdict);
}

void agree_on_parts(ringattn::Ring& ring, std::uint64_t whole, std::uint64_t part, const std::string& loaded, int parts) {
  if (parts > 1) agree_on_model(ring, whole, loaded, 1);
  if (ring.world_size() > parts) agree_on_model(ring, part, loaded, parts);
}

}  // namespace infer
