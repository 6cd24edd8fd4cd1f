// The scan that refuses NaN and inf in a node's input rows: clean data passes, and the
// first bad value is named by file, global token, head, element and value.
#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "src/io/finite_check.hpp"

using namespace ringattn::io;
using ringattn::FileError;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

NpyInfo tensor(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim) {
  NpyInfo i;
  i.descr = "<f4";
  i.shape = {tokens, heads, head_dim};
  return i;
}

// What check_finite throws, or "" if it passes.
std::string message(const std::vector<float>& data, const std::vector<RowRange>& ranges, const NpyInfo& info,
                    const char* head_name = "head") {
  try {
    check_finite("dir/v.npy", data, ranges, info, head_name);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("finite rows pass, including the extremes of float32") {
  std::vector<float> data(5 * 2 * 4, 1.0f);
  data[3] = std::numeric_limits<float>::max();
  data[4] = -std::numeric_limits<float>::max();
  data[5] = std::numeric_limits<float>::denorm_min();
  data[6] = -0.0f;
  CHECK(message(data, {{10, 15}}, tensor(100, 2, 4)) == "");
  CHECK(message({}, {}, tensor(100, 2, 4)) == "");
}

TEST_CASE("a bad value is named by file, global token, head, element and value") {
  // Rows 0..2 are tokens 40..42, rows 3..4 tokens 90..91 (a zigzag shard's two runs).
  const std::vector<RowRange> ranges = {{40, 43}, {90, 92}};
  const NpyInfo info = tensor(128, 2, 4);
  std::vector<float> data(5 * 2 * 4, 0.5f);
  const auto at = [](std::int64_t row, std::int64_t head, std::int64_t e) {
    return static_cast<std::size_t>((row * 2 + head) * 4 + e);
  };

  auto d = data;
  d[at(4, 1, 3)] = kNaN;
  CHECK(message(d, ranges, info, "kv head") ==
        "dir/v.npy: token 91, kv head 1, element 3 is nan (non-finite inputs are refused; dense attention would be "
        "NaN for every row that sees it)");

  d = data;
  d[at(1, 0, 2)] = kInf;
  CHECK(message(d, ranges, info).rfind("dir/v.npy: token 41, head 0, element 2 is inf (", 0) == 0);

  d = data;
  d[at(3, 1, 0)] = -kInf;
  d[at(4, 0, 0)] = kNaN;  // later: the first one is named
  CHECK(message(d, ranges, info).rfind("dir/v.npy: token 90, head 1, element 0 is -inf (", 0) == 0);

  d = data;
  d[at(0, 0, 0)] = -kNaN;  // the sign of a NaN is not news
  CHECK(message(d, ranges, info).rfind("dir/v.npy: token 40, head 0, element 0 is nan (", 0) == 0);
}

TEST_CASE("a tensor that is not [tokens, heads, head_dim] is named by element along the row") {
  NpyInfo flat;
  flat.descr = "<f4";
  flat.shape = {50, 8};
  std::vector<float> data(2 * 8, 0.0f);
  data[13] = kNaN;
  CHECK(message(data, {{7, 9}}, flat).rfind("dir/v.npy: token 8, element 5 is nan (", 0) == 0);
}
