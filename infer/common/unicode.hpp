// infer — the Unicode a Hugging Face tokenizer.json needs, matched to the tokenizer's oracle,
// transformers.js on Node: UTF-8 decoded the way the WHATWG Encoding Standard (Node's
// TextDecoder and Buffer.toString('utf8')) decodes it, the character classes JavaScript's
// regular expressions with the u flag use in pre-tokenizer patterns, and NFC. The data are
// generated (unicode_tables.cpp, by gen_unicode_tables.py): the classes from Node itself,
// the normalization data from Python's unicodedata (their Unicode versions are named there).
// Nothing here throws; code points are char32_t scalar values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infer::unicode {

// UTF-8 decoded as the WHATWG Encoding Standard's decoder does (JavaScript's TextDecoder,
// Node's Buffer.toString('utf8')): every maximal subpart of an ill-formed sequence becomes
// one U+FFFD (surrogates D800-DFFF, overlongs, > U+10FFFF are ill-formed).
std::u32string decode_utf8(std::string_view bytes);
// The same, one code point at a time: the one starting at bytes[at] (at < bytes.size()), with
// `at` moved past it.
char32_t next_utf8(std::string_view bytes, std::size_t& at);

// Appends c's 1-4 UTF-8 bytes to out; c must be a scalar value (not a surrogate, <= U+10FFFF).
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(std::u32string_view text);

// The length of the longest prefix of `bytes` that does not end inside an incomplete but
// so-far-valid UTF-8 sequence (for streaming decode: the held tail is at most 3 bytes that
// could still become one character). Ill-formed bytes count as complete (they will be U+FFFD).
std::size_t complete_utf8_prefix(std::string_view bytes);

// Character classes as JavaScript regular expressions with the u flag see them (the
// tokenizer oracle is transformers.js on Node): \p{L}, \p{N}, \s.
bool is_letter(char32_t c);
bool is_number(char32_t c);
bool is_space(char32_t c);

// Unicode Normalization Form C (canonical decomposition, canonical ordering by combining
// class, canonical composition with the composition exclusions; Hangul algorithmically).
std::u32string nfc(std::u32string_view text);

}  // namespace infer::unicode
