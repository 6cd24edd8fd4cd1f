// infer — reading the prompts file.
#include "prompts.hpp"

#include <ringattn/error.hpp>

#include <cstdio>
#include <fstream>

#include "json.hpp"

namespace infer {

namespace {

// The id as a JSON string again (the output is one line per prompt: control characters escaped).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::vector<Prompt> read_prompts(const std::string& path, std::int64_t vocab, std::int64_t max_tokens) {
  std::ifstream in(path);
  if (!in) throw ringattn::FileError("prompts " + path + ": cannot open (does it exist and is it readable?)");
  std::vector<Prompt> prompts;
  std::int64_t total = 0;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "prompts " + path + " line " + std::to_string(n) + ": ";
    Prompt p;
    try {
      const Json j = parse_json(line);
      const Json* id = j.find("id");
      const Json* tokens = j.find("tokens");
      if (!id || !tokens) throw std::runtime_error("needs {\"id\": ..., \"tokens\": [...]}");
      if (id->kind == Json::Kind::string)
        p.id = quoted(id->text);
      else if (id->kind == Json::Kind::number)
        p.id = std::to_string(id->as_int("id", INT64_MIN, INT64_MAX));
      else
        throw std::runtime_error("id must be a string or an integer");
      if (tokens->kind != Json::Kind::array || tokens->items.empty())
        throw std::runtime_error("tokens must be a non-empty array of token ids");
      if (total + static_cast<std::int64_t>(tokens->items.size()) > max_tokens)
        throw std::runtime_error("the batch exceeds " + std::to_string(max_tokens) + " tokens");
      for (const Json& t : tokens->items)
        p.tokens.push_back(static_cast<std::int32_t>(t.as_int("token id (the model's --vocab)", 0, vocab - 1)));
    } catch (const std::runtime_error& e) {
      throw ringattn::FileError(where + e.what());
    }
    total += static_cast<std::int64_t>(p.tokens.size());
    prompts.push_back(std::move(p));
  }
  if (in.bad()) throw ringattn::FileError("prompts " + path + ": read error");
  if (prompts.empty()) throw ringattn::FileError("prompts " + path + ": no prompts (one JSON object per line)");
  return prompts;
}

std::vector<std::int64_t> cu_seqlens(const std::vector<Prompt>& prompts) {
  std::vector<std::int64_t> cu{0};
  for (const Prompt& p : prompts) cu.push_back(cu.back() + static_cast<std::int64_t>(p.tokens.size()));
  return cu;
}

}  // namespace infer
