// RingOptions::from_env (include/ringattn/ring.hpp): the variables of the launchers
// people already use — Slurm, Open MPI, PMI, torchrun — and ringattn's own.
#include <cstdlib>
#include <string>

#include "ringattn/split.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "ringattn/ring.hpp"
#include "ring/internals.hpp"
#include "ring/timeouts.hpp"

namespace ringattn {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The first of `names` that is set: its name and value.
std::pair<const char*, const char*> first_of(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = env(n)) return {n, v};
  return {nullptr, nullptr};
}

long long integer(const char* name, const char* value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi)
    throw InvalidArgument(std::string(name) + "='" + value + "' is not a whole number in " + std::to_string(lo) + ".." +
                          std::to_string(hi));
  return v;
}

double seconds(const char* name, const char* value) {
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0') throw InvalidArgument(std::string(name) + "='" + value + "' is not a number of seconds");
  ring::timeout_ms(v, std::string(name) + "='" + value + "'");  // the range every timeout has
  return v;
}

}  // namespace

RingOptions RingOptions::from_env() {
  RingOptions o;
  const auto [rank_name, rank] =
      first_of({"RINGATTN_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"});
  const auto [world_name, world] =
      first_of({"RINGATTN_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"});
  if (!rank)
    throw InvalidArgument("no rank in the environment: set RINGATTN_RANK (or start under Slurm, mpirun, a PMI launcher "
                          "or torchrun, which set SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or RANK)");
  if (!world)
    throw InvalidArgument("no world size in the environment: set RINGATTN_WORLD_SIZE (or SLURM_NTASKS, "
                          "OMPI_COMM_WORLD_SIZE, PMI_SIZE, WORLD_SIZE)");
  o.world_size = static_cast<int>(integer(world_name, world, 1, kMaxWorldSize));
  o.rank = static_cast<int>(integer(rank_name, rank, 0, o.world_size - 1));

  if (const char* peers = env("RINGATTN_PEERS")) {
    o.peers = split_commas(peers);
  } else if (const char* master = env("RINGATTN_MASTER")) {
    o.master = master;
  } else if (const char* addr = env("MASTER_ADDR")) {
    const char* port = env("MASTER_PORT");
    if (!port) throw InvalidArgument("MASTER_ADDR is set but MASTER_PORT is not");
    integer("MASTER_PORT", port, 1, 65535);
    const std::string a = addr;
    o.master = (a.find(':') != std::string::npos ? "[" + a + "]" : a) + ":" + port;
  } else if (o.world_size > 1) {  // a world of one has no others to find
    throw InvalidArgument("no way to find the other ranks: set RINGATTN_MASTER=host:port (rank 0 serves a rendezvous "
                          "there), MASTER_ADDR and MASTER_PORT, or RINGATTN_PEERS=h:p,h:p,...");
  }
  if (const char* v = env("RINGATTN_TOKEN")) o.token = v;
  else if (const char* f = env("RINGATTN_TOKEN_FILE")) o.token_file = f;
  if (const char* v = env("RINGATTN_LISTEN")) o.listen = v;
  if (const char* v = env("RINGATTN_RING_ID")) o.ring_id = static_cast<std::uint64_t>(integer("RINGATTN_RING_ID", v, 0, INT64_MAX));
  if (const char* v = env("RINGATTN_TLS")) o.tls = integer("RINGATTN_TLS", v, 0, 1) == 1;
  if (const char* v = env("RINGATTN_THREADS")) o.threads = static_cast<int>(integer("RINGATTN_THREADS", v, 0, kMaxThreads));
  if (const char* v = env("RINGATTN_ISA")) o.isa = parse_isa(v);
  if (const char* v = env("RINGATTN_TIMEOUT")) o.timeout = seconds("RINGATTN_TIMEOUT", v);
  if (const char* v = env("RINGATTN_CONNECT_TIMEOUT")) o.connect_timeout = seconds("RINGATTN_CONNECT_TIMEOUT", v);
  if (const char* v = env("RINGATTN_MAX_ROWS")) o.limits.max_rows = integer("RINGATTN_MAX_ROWS", v, 1, kMaxRankRows);
  if (const char* v = env("RINGATTN_MAX_HEADS")) o.limits.max_heads = integer("RINGATTN_MAX_HEADS", v, 1, 1 << 16);
  if (const char* v = env("RINGATTN_MAX_KV_HEADS")) o.limits.max_kv_heads = integer("RINGATTN_MAX_KV_HEADS", v, 1, 1 << 16);
  if (const char* v = env("RINGATTN_MAX_HEAD_DIM")) o.limits.max_head_dim = integer("RINGATTN_MAX_HEAD_DIM", v, 1, 1 << 16);
  if (const char* v = env("RINGATTN_ALL_PAIRS")) o.all_pairs = integer("RINGATTN_ALL_PAIRS", v, 0, 1) == 1;
  if (const char* v = env("RINGATTN_GROUP_SIZE")) o.group_size = static_cast<int>(integer("RINGATTN_GROUP_SIZE", v, 1, kMaxWorldSize));
  return o;
}

std::string RingOptions::fingerprint() const { return net::limits_fingerprint(RingInternals::link_limits(*this)); }

}  // namespace ringattn
