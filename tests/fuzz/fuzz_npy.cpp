// libFuzzer target for the .npy header parser (the one piece of the reader that
// interprets untrusted bytes). Any input must either parse or throw FileError; a
// crash, sanitizer report, other exception or runaway allocation is a bug. Passing
// the buffer size as the file size also drives the data-size and truncation checks.
//
//   ./build-fuzz/tests/fuzz/fuzz_npy -max_total_time=60 tests/fuzz/corpus/npy
#include <cstddef>
#include <cstdint>
#include <span>

#include "ringattn/error.hpp"
#include "src/io/npy_header.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto info = ringattn::io::parse_npy_header(bytes, "fuzz.npy", size);
    // An accepted header must describe data that fits in the input.
    if (info.data_offset + info.data_bytes() > size || info.descr != "<f4" || info.fortran_order) __builtin_trap();
    (void)info.row_elements();
  } catch (const ringattn::FileError&) {
  }
  return 0;
}
