// infer — each rank's results as JSON lines, one per prompt it owns:
//   {"id": <as in the prompts file>, "prompt": i, "prompt_tokens": n, "rank": r,
//    "tokens": [generated ids], "logits": [[vocab floats] per generated token],
//    "text": the prompt and the generated tokens up to an end token, as the tokenizer
//    prints them (llama2.c's: as run.c does; a tokenizer.json's: without special tokens)}
// written to DIR/rank-R.jsonl through a temporary file and a rename, so a reader never
// sees half a file (floats with 9 significant digits: fp32 round-trips exactly).
#pragma once

#include <string>
#include <vector>

#include "job.hpp"
#include "options.hpp"
#include "text_tokenizer.hpp"

namespace infer {

// Throws ringattn::FileError naming the file.
void write_results(const std::string& dir, int rank, const std::vector<Prompt>& prompts,
                   const std::vector<SequenceResult>& results, const JobOptions& options, const TextTokenizer* tokenizer = nullptr);

}  // namespace infer
