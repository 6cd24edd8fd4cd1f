// Reading a command's --json output in checks that go on when it is not what they expect.
// `field(j, "key")` is the field, or — if j is not an object or has no such field — one
// failed check naming the key and what j was, and a null value (false, 0, "", no items),
// so the checks after it run and report too instead of the suite dying on a null pointer.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "src/cli/json_value.hpp"

namespace ringattn::itest {

inline const cli::JsonValue& field(const cli::JsonValue& j, std::string_view key) {
  static const cli::JsonValue null_value;
  if (const cli::JsonValue* f = j.get(key)) return *f;
  std::string seen;
  if (j.kind != cli::JsonValue::Kind::object) {
    seen = "not an object";
  } else {
    for (const auto& [name, value] : j.fields) {
      seen += seen.empty() ? "fields: " : ", ";
      seen += name;
      if (value.kind == cli::JsonValue::Kind::string) seen += " = \"" + value.string + "\"";
    }
    if (seen.empty()) seen = "an empty object";
  }
  const std::string what = "the JSON has no field '" + std::string(key) + "' (" + seen + ")";
  FAIL_CHECK(what);
  return null_value;
}

}  // namespace ringattn::itest
