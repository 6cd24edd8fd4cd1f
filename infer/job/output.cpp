// infer — writing a rank's results.
#include "output.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <span>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace infer {

void write_results(const std::string& dir, int rank, const std::vector<Prompt>& prompts,
                   const std::vector<SequenceResult>& results, const JobOptions& options, const TextTokenizer* tokenizer) {
  const std::int64_t vocab = options.model.vocab;
  namespace fs = std::filesystem;
  const fs::path final_path = fs::path(dir) / ("rank-" + std::to_string(rank) + ".jsonl");
  const fs::path tmp = fs::path(dir) / (".rank-" + std::to_string(rank) + ".jsonl." + std::to_string(getpid()));
  auto fail = [&](const std::string& what) {
    return ringattn::FileError("rank " + std::to_string(rank) + ": output " + final_path.string() + ": " + what);
  };
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw fail("cannot create the directory: " + ec.message());
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw fail("cannot create " + tmp.string() + " (is the directory writable?)");
  for (const SequenceResult& s : results) {
    const Prompt& p = prompts[static_cast<std::size_t>(s.prompt)];
    nlohmann::ordered_json line;
    line["id"] = nlohmann::ordered_json::parse(p.id);  // the id's own JSON text (a string or an integer)
    line["prompt"] = s.prompt;
    line["prompt_tokens"] = p.tokens.size();
    line["rank"] = rank;
    line["tokens"] = s.tokens;
    nlohmann::ordered_json logits = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < s.tokens.size(); ++i)
      logits.push_back(std::vector<float>(s.logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                                          s.logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab)));
    line["logits"] = std::move(logits);
    if (tokenizer) {  // the prompt's text, then the generated one up to an end token
      std::vector<int> all(p.tokens.begin(), p.tokens.end());
      all.insert(all.end(), s.tokens.begin(),
                 std::find_if(s.tokens.begin(), s.tokens.end(), [&](std::int32_t t) { return options.ends_text(t); }));
      line["text"] = tokenizer->text(all);
    }
    const std::string text = line.dump() + "\n";
    if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) break;  // ferror(f): reported below
  }
  const bool ok = !std::ferror(f) && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  if (std::fclose(f) != 0 || !ok) {
    fs::remove(tmp, ec);
    throw fail("write failed (disk full?)");
  }
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw fail("cannot rename into place: " + ec.message());
  }
}

}  // namespace infer
