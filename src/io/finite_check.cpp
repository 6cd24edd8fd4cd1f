// The NaN/inf scan of input rows; see finite_check.hpp.
#include "finite_check.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

#include "ringattn/error.hpp"

namespace ringattn::io {

namespace {

// Bit 31 set iff x is NaN or +-inf: adding one to the exponent field carries out of it
// only when it is all ones. ORed over the data, with no branch per element.
std::uint32_t non_finite_bit(float x) { return (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) + 0x00800000u; }

std::string describe(float x) {
  if (std::isnan(x)) return "nan";
  return x > 0 ? "inf" : "-inf";
}

}  // namespace

void check_finite(const std::string& path, std::span<const float> data, std::span<const RowRange> ranges,
                  const NpyInfo& info, std::string_view head_name) {
  std::uint32_t bits = 0;
  for (const float x : data) bits |= non_finite_bit(x);
  if (!(bits & 0x80000000u)) return;

  std::size_t at = 0;
  while (!(non_finite_bit(data[at]) & 0x80000000u)) ++at;
  const std::uint64_t width = info.row_elements();
  std::uint64_t row = at / width;  // row within data
  const std::uint64_t in_row = at % width;
  std::int64_t token = -1;
  for (const auto& r : ranges) {
    if (row < static_cast<std::uint64_t>(r.size())) {
      token = r.begin + static_cast<std::int64_t>(row);
      break;
    }
    row -= static_cast<std::uint64_t>(r.size());
  }
  std::string where = path + ": token " + std::to_string(token) + ", ";
  if (info.shape.size() == 3) {
    const auto head_dim = static_cast<std::uint64_t>(info.shape[2]);
    where += std::string(head_name) + " " + std::to_string(in_row / head_dim) + ", element " +
             std::to_string(in_row % head_dim);
  } else {
    where += "element " + std::to_string(in_row);
  }
  throw FileError(where + " is " + describe(data[at]) +
                  " (non-finite inputs are refused; dense attention would be NaN for every row that sees it)");
}

}  // namespace ringattn::io
