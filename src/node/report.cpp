// The node <-> launcher lines (see report.hpp).
#include "src/node/report.hpp"

#include <cstdio>
#include <mutex>

#include "src/cli/json_object.hpp"
#include "src/cli/json_value.hpp"

namespace ringattn::node {
namespace {

const cli::JsonValue* field(const cli::JsonValue& v, const char* key, cli::JsonValue::Kind kind) {
  const cli::JsonValue* f = v.get(key);
  return f != nullptr && f->kind == kind ? f : nullptr;
}

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
    const cli::JsonValue v = cli::parse_json(json);
    const auto* job = field(v, "job", cli::JsonValue::Kind::string);
    const auto* token = field(v, "token", cli::JsonValue::Kind::string);
    if (!job || !token) return std::nullopt;
    return Ident{job->string, token->string};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<FailReport> parse_fail(const std::string& json) {
  try {
    const cli::JsonValue v = cli::parse_json(json);
    const auto* cause = field(v, "cause", cli::JsonValue::Kind::string);
    const auto* origin = field(v, "origin", cli::JsonValue::Kind::number);
    const auto* message = field(v, "message", cli::JsonValue::Kind::string);
    if (!cause || !origin || !message) return std::nullopt;
    return FailReport{cause_from(cause->string), static_cast<int>(origin->number), message->string};
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
