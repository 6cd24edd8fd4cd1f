// A transport over some of another transport's ranks: a group of a mesh (the ranks of one
// Ulysses or tensor-parallel group, or the ranks that hold the same place in every group).
// Its ranks are numbered 0 .. members.size()-1 in the order given; every call goes to the
// parent with the member's rank there, on the parent's links (opened when the parent
// connected: a mesh connects with all_pairs), so successor() and predecessor() are the
// group's and a schedule written for a transport runs on a group unchanged.
//
// A view: it owns nothing. connect() and close() are the parent's business (connect
// throws, close does nothing); wait, test, stats, liveness, failure and abort are the
// parent's (one failure fails every group, as it fails the ring). Tags are the caller's
// to keep apart: two groups of one mesh share no pair of ranks, so their frames never
// meet on a link.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "net/transport.hpp"

namespace ringattn::net {

class GroupTransport final : public Transport {
 public:
  // members: the parent's ranks of this group, distinct, this rank among them.
  // Throws InvalidArgument otherwise.
  GroupTransport(Transport& parent, std::vector<int> members);

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(members_.size()); }
  std::uint16_t listen_port() const override { return parent_.listen_port(); }
  void connect(const std::vector<PeerAddress>& peers) override;
  Request isend(int to, const Tag& tag, Payload payload, std::optional<std::uint32_t> crc = {}) override;
  Request irecv(int from, const Tag& tag, std::span<std::byte> buffer) override;
  Request irecv(int from, const Tag& tag, BufferFor buffer_for) override;
  FrameHeader wait(Request& request) override { return parent_.wait(request); }
  bool test(const Request& request) const override { return parent_.test(request); }
  TransportStats stats() const override { return parent_.stats(); }
  Liveness& liveness() override { return parent_.liveness(); }
  void announce_leaving() override { parent_.announce_leaving(); }
  std::vector<int> leaving_peers() const override;  // in the group's numbering
  std::string failure() const override { return parent_.failure(); }
  // `origin`: a rank of the group; the parent is told the member's rank.
  void abort(FailureCause cause, int origin, const std::string& message) override;
  void close() override {}

  int parent_rank(int group_rank) const;  // throws InvalidArgument outside 0..world()-1
  int ring_rank(int r) const override { return r >= 0 && r < world() ? parent_.ring_rank(members_[static_cast<std::size_t>(r)]) : r; }
  const std::vector<int>& members() const { return members_; }

 private:
  Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace ringattn::net
