#include "npy_writer.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringattn/error.hpp"

namespace ringattn::io {
namespace {

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// ".o.npy.tmp-<pid>-<n>" beside the destination (or in `temp_dir`, which must be on the
// same file system): hidden, unique per process and call, recognisable if a crash
// (SIGKILL) ever leaves one behind.
PosixFile create_temp_beside(const std::string& path, const std::string& temp_dir) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path p(path);
  if (p.filename().empty()) throw FileError(path + ": output path names a directory, not a file");
  const std::filesystem::path dir = temp_dir.empty() ? p.parent_path() : std::filesystem::path(temp_dir);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = std::string(".") + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter.fetch_add(1));
    PosixFile f = PosixFile::create_new((dir / name).string());
    if (f.valid()) return f;
  }
  throw FileError(path + ": could not create a temporary file beside it (100 names taken)");
}

}  // namespace

NpyAtomicWriter::NpyAtomicWriter(std::string path, std::vector<std::int64_t> shape, const std::string& temp_dir)
    : path_(std::move(path)), shape_(std::move(shape)) {
  if (shape_.empty()) throw InvalidArgument(path_ + ": the writer needs at least one dimension");
  const std::string header = format_npy_header(shape_);  // validates the shape
  row_elements_ = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) row_elements_ *= static_cast<std::uint64_t>(shape_[i]);
  data_offset_ = header.size();
  written_.assign(static_cast<std::size_t>(shape_[0]), false);
  file_ = create_temp_beside(path_, temp_dir);
  try {
    file_.pwrite_all(header.data(), header.size(), 0);
    // Size the file now: a full disk shows up here rather than halfway through.
    file_.truncate(data_offset_ + static_cast<std::uint64_t>(shape_[0]) * row_elements_ * 4);
  } catch (...) {
    abort();
    throw;
  }
}

NpyAtomicWriter::~NpyAtomicWriter() { abort(); }

void NpyAtomicWriter::abort() noexcept {
  if (done_) return;
  done_ = true;
  const std::string temp = finished_ ? temp_ : file_.path();
  file_ = PosixFile();  // closes
  if (!temp.empty()) std::remove(temp.c_str());
}

void NpyAtomicWriter::write_rows(RowRange rows, std::span<const float> src) {
  if (done_) throw InvalidArgument(path_ + ": write after commit or abort");
  if (rows.begin < 0 || rows.end < rows.begin || rows.end > shape_[0])
    throw InvalidArgument(path_ + ": rows [" + std::to_string(rows.begin) + ", " + std::to_string(rows.end) +
                          ") are out of range for shape " + shape_to_string(shape_));
  const std::uint64_t n = static_cast<std::uint64_t>(rows.size()) * row_elements_;
  if (src.size() != n)
    throw InvalidArgument(path_ + ": " + std::to_string(rows.size()) + " rows need " + std::to_string(n) +
                          " floats, got " + std::to_string(src.size()));
  try {
    file_.pwrite_all(src.data(), n * 4, data_offset_ + static_cast<std::uint64_t>(rows.begin) * row_elements_ * 4);
  } catch (...) {
    abort();
    throw;
  }
  for (std::int64_t r = rows.begin; r < rows.end; ++r) written_[static_cast<std::size_t>(r)] = true;
}

void NpyAtomicWriter::write_rows(std::span<const std::int64_t> rows, std::span<const float> src) {
  if (src.size() != rows.size() * row_elements_)
    throw InvalidArgument(path_ + ": " + std::to_string(rows.size()) + " rows need " +
                          std::to_string(rows.size() * row_elements_) + " floats, got " + std::to_string(src.size()));
  std::size_t i = 0;
  while (i < rows.size()) {
    if (rows[i] < 0 || rows[i] >= shape_[0])
      throw InvalidArgument(path_ + ": row " + std::to_string(rows[i]) + " is out of range for shape " + shape_to_string(shape_));
    std::size_t j = i + 1;
    while (j < rows.size() && rows[j - 1] + 1 < shape_[0] && rows[j] == rows[j - 1] + 1) ++j;
    write_rows(RowRange{rows[i], rows[i] + static_cast<std::int64_t>(j - i)},
               src.subspan(i * row_elements_, (j - i) * row_elements_));
    i = j;
  }
}

void NpyAtomicWriter::finish() {
  if (done_) throw InvalidArgument(path_ + ": finish after commit or abort");
  if (finished_) return;
  for (std::size_t r = 0; r < written_.size(); ++r) {
    if (!written_[r]) {
      abort();
      throw Error(path_ + ": internal error: row " + std::to_string(r) + " of " + std::to_string(written_.size()) +
                  " was never written; refusing to publish an incomplete file");
    }
  }
  try {
    file_.sync();
    temp_ = file_.path();
    file_.close();
  } catch (...) {
    abort();
    throw;
  }
  finished_ = true;
}

void NpyAtomicWriter::commit() {
  if (done_) throw InvalidArgument(path_ + ": commit after commit or abort");
  finish();
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abort();
    throw FileError(path_ + ": could not move the finished output into place (rename from " + temp_ + "): " +
                    std::strerror(err));
  }
  done_ = true;
  sync_directory(directory_of(path_));
}

void write_npy_atomic(const std::string& path, std::span<const std::int64_t> shape, std::span<const float> data) {
  std::vector<std::int64_t> dims(shape.begin(), shape.end());
  NpyAtomicWriter w(path, dims);
  w.write_rows(RowRange{0, dims[0]}, data);
  w.commit();
}

}  // namespace ringattn::io
