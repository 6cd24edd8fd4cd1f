// infer — reading an input file whole, bounded: a regular file (a FIFO would block, and
// /dev/zero never ends), no larger than the reader allows, its size checked before a byte
// is read or allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace infer {

// The bytes of `path`; throws ringattn::FileError "<what> <path>: ..." if it is not a
// regular file, is larger than `max_bytes`, or cannot be read.
std::vector<char> read_input_file(const std::string& path, std::uint64_t max_bytes, const std::string& what);

}  // namespace infer
