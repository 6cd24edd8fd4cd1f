// The node <-> launcher lines (see report.hpp).
#include "report.hpp"

#include <cstdio>
#include <mutex>

#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"

namespace ringattn::node {
namespace {

FailureCause cause_from(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(FailureCause::protocol); ++c)
    if (to_string(static_cast<FailureCause>(c)) == name) return static_cast<FailureCause>(c);
  return FailureCause::unknown;
}

}  // namespace

void emit_line(const std::string& line) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string ident_line(const Ident& id) {
  return "IDENT " + cli::JsonObject().add("job", id.job).add("token", id.token).str();
}

std::string fail_line(const FailReport& f) {
  return "FAIL " + cli::JsonObject()
                       .add("cause", to_string(f.cause))
                       .add("origin", static_cast<std::int64_t>(f.origin))
                       .add("message", f.message)
                       .str();
}

std::optional<Ident> parse_ident(const std::string& json) {
  try {
    const infer::Json v = infer::parse_json(json);
    const std::string* job = infer::json_string(v, "job");
    const std::string* token = infer::json_string(v, "token");
    if (!job || !token) return std::nullopt;
    return Ident{*job, *token};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<FailReport> parse_fail(const std::string& json) {
  try {
    const infer::Json v = infer::parse_json(json);
    const std::string* cause = infer::json_string(v, "cause");
    const std::optional<double> origin = infer::json_number(v, "origin");
    const std::string* message = infer::json_string(v, "message");
    if (!cause || !origin || !message) return std::nullopt;
    return FailReport{cause_from(*cause), static_cast<int>(*origin), *message};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

FailReport fail_report_for(const std::exception& e, int rank) {
  if (const auto* n = dynamic_cast<const NetworkError*>(&e); n != nullptr && n->cause() != FailureCause::unknown)
    return {n->cause(), n->origin_rank(), e.what()};
  return {FailureCause::local, rank, e.what()};
}

}  // namespace ringattn::node
