// Reading a command's --json output in checks that go on when it is not what they expect.
// `field(j, "key")` is the field, or — if j is not an object or has no such field — one
// failed check naming the key and what j was, and a null value (its size is 0; reading it
// as a string or number throws inside the check that does, which fails that check only),
// so the checks after it run and report too instead of the suite dying.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "infer/common/json.hpp"

namespace ringattn::itest {

inline const infer::Json& field(const infer::Json& j, std::string_view key) {
  static const infer::Json null_value;
  if (const infer::Json* f = infer::json_field(j, key)) return *f;
  std::string seen;
  if (!j.is_object()) {
    seen = "not an object";
  } else {
    for (const auto& [name, value] : j.items()) {
      seen += seen.empty() ? "fields: " : ", ";
      seen += name;
      if (value.is_string()) seen += " = \"" + value.get<std::string>() + "\"";
    }
    if (seen.empty()) seen = "an empty object";
  }
  const std::string what = "the JSON has no field '" + std::string(key) + "' (" + seen + ")";
  FAIL_CHECK(what);
  return null_value;
}

}  // namespace ringattn::itest
