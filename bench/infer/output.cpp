// infer — writing a rank's results.
#include "output.hpp"

#include <ringattn/error.hpp>

#include <cstdio>
#include <filesystem>
#include <unistd.h>

namespace infer {

void write_results(const std::string& dir, int rank, const std::vector<Prompt>& prompts,
                   const std::vector<SequenceResult>& results, std::int64_t vocab) {
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
    std::fprintf(f, "{\"id\": %s, \"prompt\": %d, \"prompt_tokens\": %zu, \"rank\": %d, \"tokens\": [",
                 prompts[static_cast<std::size_t>(s.prompt)].id.c_str(), s.prompt,
                 prompts[static_cast<std::size_t>(s.prompt)].tokens.size(), rank);
    for (std::size_t i = 0; i < s.tokens.size(); ++i) std::fprintf(f, "%s%d", i ? ", " : "", s.tokens[i]);
    std::fputs("], \"logits\": [", f);
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      std::fputs(i ? ", [" : "[", f);
      for (std::int64_t j = 0; j < vocab; ++j)
        std::fprintf(f, "%s%.9g", j ? ", " : "", static_cast<double>(s.logits[i * vocab + j]));
      std::fputs("]", f);
    }
    std::fputs("]}\n", f);
  }
  const bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
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
