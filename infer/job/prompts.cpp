// infer — reading the prompts file.
#include "prompts.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "../common/input_file.hpp"
#include "../common/json.hpp"

#include <nlohmann/json.hpp>

namespace infer {

namespace {

// The id as a JSON string again (the output is one line per prompt: control characters
// escaped; the reader already refused bytes that are not UTF-8).
std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

std::vector<Prompt> read_prompts(const std::string& path, std::int64_t vocab, std::int64_t max_tokens,
                                 const TextTokenizer* tokenizer, const std::string& missing, const ModelChat* chat) {
  // Bounded before it is parsed: the file by its size, each line by what the tokens still
  // allowed can take (a token id and its comma in 32 bytes, plus 4 KiB for the id and
  // the braces), so a huge line is refused by its length, not after building its tree.
  constexpr std::uint64_t kMaxFileBytes = std::uint64_t{256} << 20;
  const std::vector<char> bytes = read_input_file(path, kMaxFileBytes, "prompts");
  const std::string_view text(bytes.data(), bytes.size());
  std::vector<Prompt> prompts;
  std::int64_t total = 0;
  int n = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "prompts " + path + " line " + std::to_string(n) + ": ";
    const std::uint64_t max_line = 4096 + 32 * static_cast<std::uint64_t>(std::max<std::int64_t>(max_tokens - total, 0));
    if (line.size() > max_line)
      throw ringattn::FileError(where + std::to_string(line.size()) + " bytes, more than the " +
                                std::to_string(max_line) + " the " + std::to_string(max_tokens - total) +
                                " tokens the batch still allows can take");
    Prompt p;
    try {
      const Json j = parse_json(line);
      const Json* id = json_field(j, "id");
      const Json* tokens = json_field(j, "tokens");
      const Json* words = json_field(j, "text");
      const Json* messages = json_field(j, "messages");
      if (!id || (tokens != nullptr) + (words != nullptr) + (messages != nullptr) != 1)
        throw std::runtime_error("needs {\"id\": ..., \"tokens\": [...]}, {\"id\": ..., \"text\": \"...\"} or {\"id\": ..., \"messages\": [...]}");
      if (id->is_string())
        p.id = quoted(id->get<std::string>());
      else if (id->is_number())
        p.id = std::to_string(json_int(*id, "id", INT64_MIN, INT64_MAX));
      else
        throw std::runtime_error("id must be a string or an integer");
      if (messages) {  // a conversation in the model's chat template (chat.hpp), encoded without a second BOS
        if (!messages->is_array() || messages->empty()) throw std::runtime_error("messages must be a non-empty array of {\"role\", \"content\"}");
        if (!tokenizer) throw std::runtime_error("messages need the model's tokenizer: " + missing);
        if (!chat) throw std::runtime_error("messages need the model's chat template");
        for (const int t : tokenizer->encode(chat->render(*messages), false)) p.tokens.push_back(t);
        if (p.tokens.empty()) throw std::runtime_error("the messages encode to no tokens");
        if (total + static_cast<std::int64_t>(p.tokens.size()) > max_tokens)
          throw std::runtime_error("the batch exceeds " + std::to_string(max_tokens) + " tokens");
      } else if (words) {
        if (!words->is_string()) throw std::runtime_error("text must be a string");
        if (!tokenizer) throw std::runtime_error("a prompt as text needs the model's tokenizer: " + missing);
        for (const int t : tokenizer->encode(words->get<std::string>(), true)) p.tokens.push_back(t);
        if (p.tokens.empty()) throw std::runtime_error("text encodes to no tokens (an empty text, and the tokenizer adds no BOS)");
        if (total + static_cast<std::int64_t>(p.tokens.size()) > max_tokens)
          throw std::runtime_error("the batch exceeds " + std::to_string(max_tokens) + " tokens");
      } else if (!tokens->is_array() || tokens->empty())
        throw std::runtime_error("tokens must be a non-empty array of token ids");
      else {
        if (total + static_cast<std::int64_t>(tokens->size()) > max_tokens)
          throw std::runtime_error("the batch exceeds " + std::to_string(max_tokens) + " tokens");
        for (const Json& t : *tokens)
          p.tokens.push_back(static_cast<std::int32_t>(json_int(t, "token id (the model's --vocab)", 0, vocab - 1)));
      }
    } catch (const std::runtime_error& e) {
      throw ringattn::FileError(where + e.what());
    }
    total += static_cast<std::int64_t>(p.tokens.size());
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) throw ringattn::FileError("prompts " + path + ": no prompts (one JSON object per line)");
  return prompts;
}

std::vector<std::int64_t> cu_seqlens(const std::vector<Prompt>& prompts) {
  std::vector<std::int64_t> cu{0};
  for (const Prompt& p : prompts) cu.push_back(cu.back() + static_cast<std::int64_t>(p.tokens.size()));
  return cu;
}

}  // namespace infer
