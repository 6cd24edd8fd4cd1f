// ringattn — the NumPy `.npy` header: parse it from bytes, format it for writing.
//
// Layout (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version
// byte, a little-endian header length (uint16 for 1.0, uint32 for 2.0 and 3.0), then
// that many bytes of a Python dict literal padded with spaces and ending in '\n':
//
//     {'descr': '<f4', 'fortran_order': False, 'shape': (4096, 8, 128), }
//
// The data follows at offset 10 + len (1.0) or 12 + len (2.0, 3.0). Version 3.0 only
// allows UTF-8 in the dict, which matters for structured dtypes we refuse anyway.
//
// The parser works on a memory buffer so the libFuzzer target can drive it without
// files; read_npy_header() in npy_reader.hpp is the thin file wrapper. Every length and
// dimension is validated before it sizes anything: a hostile header cannot make the
// reader allocate or overflow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ringattn::io {

// The one element type at ringattn's file boundary: float32, little-endian.
inline constexpr std::string_view kNpyFloat32Descr = "<f4";
// numpy itself refuses headers over 10,000 bytes by default; we allow more room for
// long shapes but still bound what a header can make us read.
inline constexpr std::uint32_t kMaxNpyHeaderBytes = 65536;

struct NpyInfo {
  int major_version = 1;
  int minor_version = 0;
  std::string descr;                 // dtype descriptor, always "<f4" once validated
  bool fortran_order = false;        // always false once validated
  std::vector<std::int64_t> shape;   // () for a scalar
  std::uint64_t data_offset = 0;     // bytes from the start of the file to element 0

  std::uint64_t elements() const;       // product of shape (1 for a scalar)
  std::uint64_t data_bytes() const { return elements() * 4; }
  // First axis (tokens) and the elements of one row along it: a [tokens, heads,
  // head_dim] tensor has rows() == tokens and row_elements() == heads * head_dim.
  std::int64_t rows() const;
  std::uint64_t row_elements() const;
};

// Parses and validates the header at the start of `bytes`. `source` names the input
// in error messages (the file path). If `file_size` is given, the data must fit in
// it (a truncated file is refused with the expected and actual byte counts).
// Throws FileError naming the source and the problem.
NpyInfo parse_npy_header(std::span<const std::byte> bytes, std::string_view source,
                         std::optional<std::uint64_t> file_size = std::nullopt);

// Bytes before the dict that a reader must fetch to learn the header length.
inline constexpr std::size_t kNpyPreambleBytes = 12;

// The complete header (magic through '\n') for a C-order float32 array of `shape`:
// version 1.0, padded so that the data starts on a 64-byte boundary, as numpy does.
// Throws InvalidArgument on a negative dimension, an element count that overflows,
// or a shape too long for a 1.0 header.
std::string format_npy_header(std::span<const std::int64_t> shape);

// "(4096, 8, 128)" — the shape as numpy prints it, for messages.
std::string shape_to_string(std::span<const std::int64_t> shape);

}  // namespace ringattn::io
