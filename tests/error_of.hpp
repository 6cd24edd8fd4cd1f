// What `fn` threw ("" if it returned): for tests that check an error's message.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace ringattn::test {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace ringattn::test
