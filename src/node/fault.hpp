// ringattn — fault injection for the multi-process tests. A node reads
// RINGATTN_FAULT=<rank>:<fault>[:<step>] and, if <rank> is its own, misbehaves:
//   exit:S     dies abruptly (_exit) at ring step S, like a killed process
//   hang:S     stops at step S and never sends again (until killed): busy, but its
//              progress counter stands still, so its neighbours see a stall
//   slow:S     its fold at step S takes 3x --timeout, progressing all along (a slow but
//              healthy kernel): the ring must wait for it, not time out
//   corrupt:S  flips one payload byte of the block it relays at step S >= 1 (the frame
//              keeps the CRC it arrived with, so the successor sees a bad CRC)
//   silent     binds and reports its port but never connects
//   token      uses a different shared secret
//   shape      claims different job options (its HELLO digest differs)
// exit, hang, slow and corrupt are the library's Ring::inject_fault (ringattn/ring.hpp);
// silent, token and shape the node plays itself. Unset in production; a malformed value
// is an error, not ignored.
#pragma once

#include <optional>
#include <string>

namespace ringattn::node {

struct Fault {
  enum class Kind { exit, hang, slow, corrupt, silent, token, shape } kind;
  int step = 0;
};

// The fault for `rank`, if RINGATTN_FAULT names it.
std::optional<Fault> fault_for_rank(int rank);

}  // namespace ringattn::node
