#include "npy_reader.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "ringattn/error.hpp"

namespace ringattn::io {
namespace {

// Reading through a gap costs less than another syscall while the gap is small;
// above this a striped read issues one pread per row.
constexpr std::uint64_t kMaxGapBytesToReadThrough = 64 * 1024;
constexpr std::uint64_t kStridedWindowBytes = 4 * 1024 * 1024;

NpyInfo read_header(const PosixFile& file) {
  const std::uint64_t size = file.size();
  std::vector<std::byte> head(static_cast<std::size_t>(std::min<std::uint64_t>(size, kNpyPreambleBytes + kMaxNpyHeaderBytes)));
  file.pread_exact(head.data(), head.size(), 0);
  return parse_npy_header(head, file.path(), size);
}

std::string range_text(RowRange r) {
  // std::string first: GCC 12 misreports -Wrestrict on "literal" + std::string&&.
  return std::string("[") + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

}  // namespace

NpyInfo read_npy_header(const std::string& path) { return read_header(PosixFile::open_read(path)); }

NpyReader::NpyReader(const std::string& path)
    : file_(PosixFile::open_read(path)), info_(read_header(file_)), row_bytes_(info_.row_elements() * 4) {}

void NpyReader::check_range(RowRange r) const {
  if (info_.shape.empty()) throw InvalidArgument(path() + ": a 0-d array has no rows to select");
  if (r.begin < 0 || r.end < r.begin || r.end > info_.rows())
    throw InvalidArgument(path() + ": rows " + range_text(r) + " are out of range; the file has " +
                          std::to_string(info_.rows()) + " rows (shape " + shape_to_string(info_.shape) + ")");
}

void NpyReader::throw_row_out_of_range(std::int64_t row) const {
  throw InvalidArgument(path() + ": row " + std::to_string(row) + " is out of range; the file has " +
                        std::to_string(info_.rows()) + " rows (shape " + shape_to_string(info_.shape) + ")");
}

void NpyReader::check_dst(std::uint64_t rows, std::span<float> dst) const {
  if (dst.size() != rows * info_.row_elements())
    throw InvalidArgument(path() + ": destination holds " + std::to_string(dst.size()) + " floats but " +
                          std::to_string(rows) + " rows of " + std::to_string(info_.row_elements()) + " need " +
                          std::to_string(rows * info_.row_elements()));
}

void NpyReader::read_ranges(std::span<const RowRange> ranges, std::span<float> dst) const {
  std::uint64_t total = 0;
  for (RowRange r : ranges) {
    check_range(r);
    total += static_cast<std::uint64_t>(r.size());
  }
  check_dst(total, dst);
  float* out = dst.data();
  for (RowRange r : ranges) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(r.size()) * row_bytes_;
    file_.pread_exact(out, bytes, row_offset(r.begin));
    out += bytes / 4;
  }
}

void NpyReader::read_rows(std::span<const std::int64_t> rows, std::span<float> dst) const {
  std::vector<RowRange> runs;
  for (std::int64_t row : rows) {
    if (row < 0 || row >= info_.rows()) throw_row_out_of_range(row);
    if (!runs.empty() && runs.back().end == row)
      ++runs.back().end;
    else
      runs.push_back({row, row + 1});
  }
  read_ranges(runs, dst);
}

void NpyReader::read_strided(std::int64_t first, std::int64_t step, std::int64_t count, std::span<float> dst) const {
  if (step < 1 || count < 0) throw InvalidArgument(path() + ": strided read needs step >= 1 and count >= 0");
  if (count == 0) return check_dst(0, dst);
  if (first < 0 || first >= info_.rows()) throw_row_out_of_range(first);
  if ((info_.rows() - 1 - first) / step < count - 1)
    throw InvalidArgument(path() + ": strided rows " + std::to_string(first) + " + k*" + std::to_string(step) + " for " +
                          std::to_string(count) + " rows run past the " + std::to_string(info_.rows()) + " rows of the file");
  check_dst(static_cast<std::uint64_t>(count), dst);
  const auto ustep = static_cast<std::uint64_t>(step);
  if (step == 1) return read_ranges(std::array{RowRange{first, first + count}}, dst);
  if ((ustep - 1) * row_bytes_ > kMaxGapBytesToReadThrough || row_bytes_ == 0) {
    for (std::int64_t k = 0; k < count; ++k)
      file_.pread_exact(dst.data() + static_cast<std::uint64_t>(k) * info_.row_elements(), row_bytes_, row_offset(first + k * step));
    return;
  }
  // Each window spans `per_window` wanted rows and the gaps between them.
  const std::uint64_t per_window = std::max<std::uint64_t>(1, kStridedWindowBytes / (ustep * row_bytes_));
  std::vector<std::byte> window(static_cast<std::size_t>(((per_window - 1) * ustep + 1) * row_bytes_));
  for (std::int64_t k = 0; k < count;) {
    const std::uint64_t n = std::min<std::uint64_t>(per_window, static_cast<std::uint64_t>(count - k));
    const std::uint64_t span_bytes = ((n - 1) * ustep + 1) * row_bytes_;
    file_.pread_exact(window.data(), span_bytes, row_offset(first + k * step));
    for (std::uint64_t j = 0; j < n; ++j)
      std::memcpy(dst.data() + (static_cast<std::uint64_t>(k) + j) * info_.row_elements(), window.data() + j * ustep * row_bytes_, row_bytes_);
    k += static_cast<std::int64_t>(n);
  }
}

std::vector<float> NpyReader::read_all() const {
  std::vector<float> data(static_cast<std::size_t>(info_.elements()));
  file_.pread_exact(data.data(), data.size() * 4, info_.data_offset);
  return data;
}

namespace {

NpyReader reopen_expecting(const std::string& path, const NpyInfo& expected) {
  NpyReader reader(path);
  if (reader.info().shape != expected.shape || reader.info().data_offset != expected.data_offset)
    throw FileError(path + ": the file changed since its header was read (shape " + shape_to_string(expected.shape) +
                    " became " + shape_to_string(reader.info().shape) + ")");
  return reader;
}

}  // namespace

void read_rows(const std::string& path, const NpyInfo& expected, std::span<const RowRange> ranges, std::span<float> dst) {
  reopen_expecting(path, expected).read_ranges(ranges, dst);
}

void read_rows(const std::string& path, const NpyInfo& expected, std::span<const std::int64_t> rows, std::span<float> dst) {
  reopen_expecting(path, expected).read_rows(rows, dst);
}

NpyArray read_npy(const std::string& path) {
  NpyReader reader(path);
  return {reader.info(), reader.read_all()};
}

}  // namespace ringattn::io
