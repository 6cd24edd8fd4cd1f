// libFuzzer target for the GGUF reader (infer/formats/gguf.cpp): any input must either parse or
// throw FileError; a crash, sanitizer report, other exception or runaway allocation is a
// bug. An accepted file's metadata is read back and every tensor taken whole (its bytes
// checked finite and decoded: F32, F16, BF16, Q8_0, Q4_K, Q6_K), so each offset and size the
// reader accepted must lie inside the input; its vocabulary, where it has one, is made a
// tokenizer (or refused) and runs a text.
//
//   ./build-fuzz/tests/fuzz/fuzz_gguf -max_total_time=60 tests/fuzz/corpus/gguf
#include <cstddef>
#include <cstdint>
#include <span>

#include "infer/formats/gguf.hpp"
#include "infer/tokenizers/tokenizer_gguf.hpp"
#include "ringattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    infer::GgufFile f(bytes, "fuzz.gguf");
    (void)f.string("general.architecture");
    (void)f.strings("tokenizer.ggml.tokens");
    try {  // the file's own vocabulary, where it has one this runtime runs
      const infer::TokenizerJson t = infer::gguf_tokenizer(f);
      (void)t.decode(t.encode("Hello, <|end|> world 12345 \xff", true));
    } catch (const ringattn::FileError&) {
    }
    for (const auto& name : f.names()) {
      try {
        (void)f.take(name, f.shape(name));
      } catch (const ringattn::FileError&) {  // NaN or inf in the data: refused, fine
      }
    }
  } catch (const ringattn::FileError&) {
  }
  return 0;
}
