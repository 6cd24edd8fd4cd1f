// libFuzzer target for tokenizer.json (infer/tokenizer_json*.cpp) and the text side of it.
// An input that starts with '{' is a tokenizer.json: it must load or throw FileError (a
// crash, sanitizer report, other exception or runaway allocation is a bug), and a loaded
// one must encode and decode a few texts. Any other input is text for the two tokenizers of
// the seed corpus, built in: encoded (with and without special tokens) and decoded, where a
// byte-level tokenizer without a normalizer must give back the text as a JavaScript string
// holds it (ill-formed UTF-8 as U+FFFD): a property, not just "no crash".
//
//   ./build-fuzz/tests/fuzz/fuzz_tokenizer_json -max_total_time=60 tests/fuzz/corpus/tokenizer_json
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "infer/tokenizers/tokenizer_json.hpp"
#include "infer/common/unicode.hpp"
#include "ringattn/error.hpp"

namespace {

// The seed corpus' tiny tokenizers, read once (the fuzzer runs from the checkout).
const infer::TokenizerJson* builtin(const char* file) {
  try {
    return new infer::TokenizerJson(infer::TokenizerJson::load(std::string(RINGATTN_SOURCE_ROOT "/tests/fuzz/corpus/tokenizer_json/") + file));
  } catch (const std::exception&) {
    std::abort();  // the corpus is part of the target
  }
}

void exercise(const infer::TokenizerJson& t, std::string_view text) {
  const std::vector<int> ids = t.encode(text, true);
  (void)t.decode(ids);
  (void)t.decode(ids, true);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    std::optional<infer::TokenizerJson> t;
    try {
      t.emplace(infer::TokenizerJson::from_json(infer::parse_json_map(input), "fuzz.json"));
    } catch (const ringattn::FileError&) {
      return 0;
    } catch (const std::runtime_error&) {  // parse_json_map: not JSON
      return 0;
    }
    for (const char* text : {"", " ", "Hello world, it's 12345!\n\n", "\xff\xfe", "<s><|end|>\xe2\x96\x81"}) exercise(*t, text);
    return 0;
  }
  static const infer::TokenizerJson* byte_level = builtin("tiny-byte-level.json");
  static const infer::TokenizerJson* sentencepiece = builtin("tiny-sentencepiece.json");
  exercise(*sentencepiece, input);
  const std::vector<int> ids = byte_level->encode(input, false);
  // The byte-level one has an NFC normalizer: its round trip is the NFC of the text.
  const std::string want = infer::unicode::encode_utf8(infer::unicode::nfc(infer::unicode::decode_utf8(input)));
  if (byte_level->decode(ids) != want) std::abort();
  return 0;
}
