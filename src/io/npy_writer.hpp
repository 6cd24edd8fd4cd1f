// ringattn — writing float32 `.npy` outputs atomically.
//
// The output of a run (O, lse) must never exist half-written: a reader would take a
// truncated or partly zero file for a result. So the writer fills a hidden temporary
// file in the destination's own directory (rename is atomic only within one file
// system), fsyncs it and renames it over the destination only on commit(). If the
// writer is destroyed uncommitted, or any step fails, the temporary file is removed
// and the destination is untouched.
//
// Rows may arrive in any order (each node's shard lands at its tokens' global
// positions), so commit() also checks that every row was written exactly once or
// more, refusing to publish a file with holes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "npy_reader.hpp"
#include "posix_file.hpp"

namespace ringattn::io {

class NpyAtomicWriter {
 public:
  // Creates the temporary file and writes the header. `shape` must have at least one
  // dimension (rows are indexed along the first). The temporary file goes beside `path`,
  // or into `temp_dir` (same file system: the commit is a rename), e.g. a work directory
  // that is removed whatever happens.
  NpyAtomicWriter(std::string path, std::vector<std::int64_t> shape, const std::string& temp_dir = "");
  NpyAtomicWriter(const NpyAtomicWriter&) = delete;
  NpyAtomicWriter& operator=(const NpyAtomicWriter&) = delete;
  ~NpyAtomicWriter();  // removes the temporary file unless committed

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return finished_ ? temp_ : file_.path(); }
  std::uint64_t row_elements() const { return row_elements_; }

  // Writes src (rows.size() * row_elements() floats) as rows [begin, end).
  void write_rows(RowRange rows, std::span<const float> src);
  // Writes src as the listed rows, in that order; consecutive runs in one pwrite.
  void write_rows(std::span<const std::int64_t> rows, std::span<const float> src);

  // Checks that every row was written, fsyncs and closes the temporary file: after it,
  // commit() only renames, so a caller publishing several files together finishes all
  // of them first. Throws (and removes the temporary file) if a row is missing or a step fails.
  void finish();
  // finish() if not done yet, rename over path(), fsync the directory. Throws (and
  // removes the temporary file) if any step fails.
  void commit();
  // Drops the temporary file now; the destination is untouched.
  void abort() noexcept;

 private:
  std::string path_;
  std::vector<std::int64_t> shape_;
  std::uint64_t row_elements_ = 0;
  std::uint64_t data_offset_ = 0;
  std::vector<bool> written_;
  PosixFile file_;
  std::string temp_;  // the temporary file's path once finished
  bool finished_ = false;
  bool done_ = false;
};

// The whole array in one call: data.size() must equal the product of shape.
void write_npy_atomic(const std::string& path, std::span<const std::int64_t> shape, std::span<const float> data);

}  // namespace ringattn::io
