#include "fault.hpp"

#include <cstdlib>

#include "ringattn/error.hpp"
#include "../cli/args.hpp"

namespace ringattn::node {

std::optional<Fault> fault_for_rank(int rank) {
  const char* env = std::getenv("RINGATTN_FAULT");
  if (!env || !*env) return std::nullopt;
  const std::string spec = env;
  const auto c1 = spec.find(':');
  if (c1 == std::string::npos) throw InvalidArgument("RINGATTN_FAULT='" + spec + "': expected <rank>:<fault>[:<step>]");
  if (cli::parse_count(spec.substr(0, c1), "RINGATTN_FAULT rank") != rank) return std::nullopt;
  const auto c2 = spec.find(':', c1 + 1);
  const std::string what = spec.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
  Fault f{Fault::Kind::exit, 0};
  if (what == "exit") f.kind = Fault::Kind::exit;
  else if (what == "hang") f.kind = Fault::Kind::hang;
  else if (what == "slow") f.kind = Fault::Kind::slow;
  else if (what == "corrupt") f.kind = Fault::Kind::corrupt;
  else if (what == "silent") f.kind = Fault::Kind::silent;
  else if (what == "token") f.kind = Fault::Kind::token;
  else if (what == "shape") f.kind = Fault::Kind::shape;
  else throw InvalidArgument("RINGATTN_FAULT='" + spec + "': unknown fault '" + what + "'");
  if (c2 != std::string::npos) f.step = cli::parse_integer_as(spec.substr(c2 + 1), "RINGATTN_FAULT step", 0, INT32_MAX);
  return f;
}

}  // namespace ringattn::node
