// infer — a GGUF file's own vocabulary as a tokenizer, run exactly as llama.cpp runs it.
//
// tokenizer.ggml.model "gpt2" (byte-level BPE: Llama 3, Qwen 2/3): tokenizer.ggml.tokens by
// id, tokenizer.ggml.merges ("left right", in rank order), tokenizer.ggml.token_type (1 normal,
// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), tokenizer.ggml.pre naming the
// pre-tokenizer: "llama-bpe" (Llama 3's regex; a word that is a token is that token; decode
// cleans spaces as llama.cpp does) or "qwen2" (Qwen's regex). Control and user-defined tokens
// are found in the text first (llama.cpp's parse_special), control ones being special; no
// normalizer (llama.cpp applies none, not even Qwen's NFC); add_bos_token / add_eos_token
// add tokenizer.ggml.bos_token_id / eos_token_id. The vocabulary becomes a TokenizerJson
// (tokenizer_json.hpp) and is checked as a tokenizer.json is: a merge of pieces that are not
// tokens, a byte-level vocabulary without its 256 byte characters, ids out of range, arrays
// of different lengths are refused naming the file and the key. Other kinds ("llama":
// SentencePiece scores; "bert", "t5", "rwkv") and other pre-tokenizers are refused by name.
#pragma once

#include "../formats/gguf.hpp"
#include "tokenizer_json.hpp"

namespace infer {

TokenizerJson gguf_tokenizer(const GgufFile& f);

// The ids at which llama.cpp ends generation for the file's vocabulary: its eos, eot, eom
// and fill-in-the-middle pad/repo/separator ids (metadata), and the tokens whose text is
// one of its end-of-generation spellings ("<|eot_id|>", "<|im_end|>", "<|endoftext|>",
// "</s>"...) and that stay control tokens; sorted. Empty without tokenizer.ggml.tokens.
// Throws ringattn::FileError for an id key outside the vocabulary.
std::vector<std::int32_t> gguf_end_tokens(const GgufFile& f);

}  // namespace infer
