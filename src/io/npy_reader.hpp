// ringattn — reading float32 `.npy` tensors, whole or a node's shard of rows.
//
// A ring node needs only its own tokens: contiguous layout is one row range, zigzag
// two ranges (chunk i and chunk 2P-1-i), striped every P-th row. NpyReader keeps the
// file open and reads those rows with pread straight into the caller's buffer, one
// pread per contiguous run, so a node never loads the whole tensor.
//
// "Row" means one index along the first (token) axis: for [tokens, heads, head_dim]
// a row is heads * head_dim floats.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "npy_header.hpp"
#include "posix_file.hpp"

namespace ringattn::io {

// Rows [begin, end) of the first axis.
struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};

// Opens, validates (header and size) and reads the header of the .npy at `path`.
NpyInfo read_npy_header(const std::string& path);

class NpyReader {
 public:
  explicit NpyReader(const std::string& path);

  const NpyInfo& info() const { return info_; }
  const std::string& path() const { return file_.path(); }

  // The rows of every range, in the given order, packed into dst, which must hold
  // exactly (sum of range sizes) * row_elements() floats. One pread per range.
  void read_ranges(std::span<const RowRange> ranges, std::span<float> dst) const;
  // The listed rows in the given order; runs of consecutive indices are merged into
  // one pread each.
  void read_rows(std::span<const std::int64_t> rows, std::span<float> dst) const;
  // Rows first, first + step, ... (count rows): the striped layout. When the gaps are
  // small it reads windows and picks rows out of them instead of one call per row.
  void read_strided(std::int64_t first, std::int64_t step, std::int64_t count, std::span<float> dst) const;
  // The whole tensor.
  std::vector<float> read_all() const;

 private:
  void check_range(RowRange r) const;
  [[noreturn]] void throw_row_out_of_range(std::int64_t row) const;
  void check_dst(std::uint64_t rows, std::span<float> dst) const;
  std::uint64_t row_offset(std::int64_t row) const { return info_.data_offset + static_cast<std::uint64_t>(row) * row_bytes_; }

  PosixFile file_;
  NpyInfo info_;
  std::uint64_t row_bytes_ = 0;
};

// One-shot forms for callers that read a header first and the data later (e.g. the
// coordinator checks shapes, then a node reads its shard). The file is reopened and
// must still have the header `expected` describes; otherwise FileError.
void read_rows(const std::string& path, const NpyInfo& expected, std::span<const RowRange> ranges, std::span<float> dst);
void read_rows(const std::string& path, const NpyInfo& expected, std::span<const std::int64_t> rows, std::span<float> dst);

struct NpyArray {
  NpyInfo info;
  std::vector<float> data;
};
NpyArray read_npy(const std::string& path);

}  // namespace ringattn::io
