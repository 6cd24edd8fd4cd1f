#include "control_protocol.hpp"

#include <cstdlib>

#include "ringattn/launch.hpp"

namespace ringattn::serve {

std::string client_secret(const std::optional<std::string>& token_file) {
  if (token_file) return load_token(*token_file);
  if (const char* f = std::getenv("RINGATTN_TOKEN_FILE"); f && *f && !std::getenv("RINGATTN_TOKEN")) return load_token(f);
  return load_token("");
}

}  // namespace ringattn::serve
