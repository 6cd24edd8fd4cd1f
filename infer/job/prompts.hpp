// infer — the batch of prompts: a JSON lines file, one {"id": ..., "tokens": [...]} per
// line (blank lines skipped). The id is a string or an integer, echoed in the output;
// tokens are integer ids in [0, vocab), at least one per prompt. Every line is checked
// before anything is sized from it; an error names the file, the line and what to fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat.hpp"
#include "text_tokenizer.hpp"

namespace infer {

// How one prompt's tokens are chosen, when it is not the job's (a daemon's requests each
// bring their own).
struct Sampling {
  float temperature = 0;  // 0: greedy
  float top_p = 0.9f;
  std::uint64_t seed = 1;
};

// Where a kept sequence goes on (job.hpp, kept caches): the ring position and the RoPE
// position of the next token it is fed.
struct Continuation {
  std::int64_t ring_position = 0;
  std::int64_t rope_position = 0;
};

struct Prompt {
  std::string id;  // as JSON: "\"abc\"" or "17", written back verbatim
  std::vector<std::int32_t> tokens;
  std::optional<Sampling> sampling;  // none: the job's options (seed + the prompt's index)
  int max_tokens = 0;                // generated for it; 0: the job's options.tokens
  // With kept caches (a daemon's sessions, job.hpp): the KV-cache sequence its rows are
  // kept under (-1: its index in the batch); whether they stay after the batch; and, for a
  // session's next message, where its tokens continue that sequence's kept rows (then
  // they are fed through Ring::decode on the decode rank: no prefill of the history).
  std::int32_t sequence = -1;
  bool keep = false;
  std::optional<Continuation> continues;
  // A second sample of an earlier prompt of the batch (its index; -1: none): not prefilled —
  // after the prefill every rank copies that prompt's rows into this one's sequence, and its
  // first token is chosen from the same last row by its own sampler (OpenAI's n > 1). Its
  // tokens are that prompt's.
  std::int32_t copy_of = -1;
};

// Throws ringattn::FileError. max_tokens bounds the whole batch (the packed sequence). A
// line may give {"id": ..., "text": "..."} instead of tokens: encoded by `tokenizer` (its
// opening ids such as BOS, then the text's, as --prompt does), an error without one that
// ends with `missing` (why there is none); or {"id": ..., "messages": [{"role", "content"}...]}:
// a conversation rendered by the model's `chat` template (the assistant's turn opened) and
// encoded without a second BOS, as --chat does; an error naming the line when the template
// refuses it or there is none.
std::vector<Prompt> read_prompts(const std::string& path, std::int64_t vocab, std::int64_t max_tokens,
                                 const TextTokenizer* tokenizer = nullptr, const std::string& missing = "give --tokenizer FILE",
                                 const ModelChat* chat = nullptr);

// {0, n0, n0+n1, ...}: the packed batch's cumulative lengths.
std::vector<std::int64_t> cu_seqlens(const std::vector<Prompt>& prompts);

}  // namespace infer
