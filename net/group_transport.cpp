#include "net/group_transport.hpp"

#include <algorithm>

#include "ringattn/error.hpp"

namespace ringattn::net {

GroupTransport::GroupTransport(Transport& parent, std::vector<int> members) : parent_(parent), members_(std::move(members)) {
  const std::string where = "rank " + std::to_string(parent.rank()) + ": a group of ranks";
  if (members_.empty()) throw InvalidArgument(where + " needs at least one member");
  std::vector<int> sorted = members_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw InvalidArgument(where + " names a rank twice");
  if (sorted.front() < 0 || sorted.back() >= parent.world())
    throw InvalidArgument(where + " names a rank outside 0.." + std::to_string(parent.world() - 1));
  const auto self = std::find(members_.begin(), members_.end(), parent.rank());
  if (self == members_.end()) throw InvalidArgument(where + " must include this rank");
  rank_ = static_cast<int>(self - members_.begin());
}

int GroupTransport::parent_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= world())
    throw InvalidArgument("rank " + std::to_string(parent_.rank()) + ": rank " + std::to_string(group_rank) +
                          " is outside its group of " + std::to_string(world()));
  return members_[static_cast<std::size_t>(group_rank)];
}

void GroupTransport::connect(const std::vector<PeerAddress>&) {
  throw InvalidArgument("a group of ranks is connected by its parent transport");
}

Request GroupTransport::isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc) {
  return parent_.isend(parent_rank(to), tag, payload, crc);
}

Request GroupTransport::irecv(int from, const Tag& tag, std::span<std::byte> buffer) {
  return parent_.irecv(parent_rank(from), tag, buffer);
}

Request GroupTransport::irecv(int from, const Tag& tag, BufferFor buffer_for) {
  return parent_.irecv(parent_rank(from), tag, std::move(buffer_for));
}

std::vector<int> GroupTransport::leaving_peers() const {
  std::vector<int> out;
  for (const int r : parent_.leaving_peers()) {
    const auto it = std::find(members_.begin(), members_.end(), r);
    if (it != members_.end()) out.push_back(static_cast<int>(it - members_.begin()));
  }
  return out;
}

void GroupTransport::abort(FailureCause cause, int origin, const std::string& message) {
  parent_.abort(cause, origin >= 0 && origin < world() ? members_[static_cast<std::size_t>(origin)] : origin, message);
}

}  // namespace ringattn::net
