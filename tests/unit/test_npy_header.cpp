// The .npy header parser on in-memory bytes: the versions and dict spellings numpy
// writes are accepted, and every malformed header is refused with a FileError that
// names the source and the problem.
#include <doctest/doctest.h>

#include <string>

#include "ringattn/error.hpp"
#include "src/io/npy_header.hpp"
#include "tests/unit/npy_fixtures.hpp"

using ringattn::FileError;
using ringattn::io::parse_npy_header;
using ringattn::test::f4_dict;
using ringattn::test::make_npy;

namespace {

// The FileError message for `bytes`, or "" if it parsed.
std::string error_of(const std::vector<std::byte>& bytes, std::optional<std::uint64_t> size = std::nullopt) {
  try {
    parse_npy_header(bytes, "q.npy", size);
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

void check_refused(const std::vector<std::byte>& bytes, const std::string& problem,
                   std::optional<std::uint64_t> size = std::nullopt) {
  const std::string msg = error_of(bytes, size);
  INFO("message: " << msg);
  CHECK(msg.rfind("q.npy: ", 0) == 0);
  CHECK(msg.find(problem) != std::string::npos);
}

}  // namespace

TEST_SUITE("npy header") {
  TEST_CASE("versions 1.0, 2.0 and 3.0 parse to the same info") {
    for (int major : {1, 2, 3}) {
      CAPTURE(major);
      const std::string dict = f4_dict("(4, 2, 3)") + "      \n";
      const auto bytes = make_npy(major, dict, 4 * 2 * 3 * 4);
      const auto info = parse_npy_header(bytes, "q.npy", bytes.size());
      CHECK(info.major_version == major);
      CHECK(info.descr == "<f4");
      CHECK_FALSE(info.fortran_order);
      CHECK(info.shape == std::vector<std::int64_t>{4, 2, 3});
      CHECK(info.data_offset == (major == 1 ? 10u : 12u) + dict.size());
      CHECK(info.rows() == 4);
      CHECK(info.row_elements() == 6);
      CHECK(info.data_bytes() == 96);
    }
  }

  TEST_CASE("keys in any order, double quotes, no trailing comma, Python 2 longs") {
    const auto a = parse_npy_header(make_npy(1, "{\"shape\": (3L, 5L), \"fortran_order\": False, \"descr\": \"<f4\"}\n"), "q.npy");
    CHECK(a.shape == std::vector<std::int64_t>{3, 5});
    const auto b = parse_npy_header(make_npy(1, "{ 'fortran_order' : False ,\n 'shape':(7,),'descr':'<f4' }   "), "q.npy");
    CHECK(b.shape == std::vector<std::int64_t>{7});
  }

  TEST_CASE("scalars and empty arrays") {
    const auto scalar = parse_npy_header(make_npy(1, f4_dict("()")), "q.npy");
    CHECK(scalar.shape.empty());
    CHECK(scalar.elements() == 1);
    const auto empty = parse_npy_header(make_npy(1, f4_dict("(0, 8)")), "q.npy");
    CHECK(empty.elements() == 0);
  }

  TEST_CASE("the writer's header parses back and aligns the data to 64 bytes") {
    for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{16384, 8, 128}, {5}, {3, 4}, {}}) {
      const std::string h = ringattn::io::format_npy_header(shape);
      CHECK(h.size() % 64 == 0);
      CHECK(h.back() == '\n');
      std::vector<std::byte> bytes(h.size());
      for (std::size_t i = 0; i < h.size(); ++i) bytes[i] = static_cast<std::byte>(h[i]);
      const auto info = parse_npy_header(bytes, "q.npy");
      CHECK(info.shape == shape);
      CHECK(info.data_offset == h.size());
    }
    CHECK(ringattn::io::shape_to_string(std::vector<std::int64_t>{5}) == "(5,)");
  }

  TEST_CASE("bad magic and versions") {
    auto bytes = make_npy(1, f4_dict("(2,)"), 8);
    bytes[1] = std::byte{'X'};
    check_refused(bytes, "not a .npy file");
    check_refused({}, "not a .npy file");
    check_refused(make_npy(4, f4_dict("(2,)"), 8), "unsupported .npy format version 4.0");
    check_refused(make_npy(1, f4_dict("(2,)"), 8, 1), "version 1.1");
    auto cut = make_npy(2, f4_dict("(2,)"));
    cut.resize(10);
    check_refused(cut, "header length field is cut off");
  }

  TEST_CASE("wrong dtypes are refused, naming the dtype") {
    for (const char* descr : {"<f8", "<i4", ">f4", "<f2", "|u1"}) {
      CAPTURE(descr);
      const std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }";
      check_refused(make_npy(1, dict, 64), std::string("dtype '") + descr + "' is not supported");
    }
    check_refused(make_npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), "structured dtypes");
  }

  TEST_CASE("fortran order is refused") {
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), "fortran_order is True");
  }

  TEST_CASE("malformed dicts") {
    check_refused(make_npy(1, "'descr': '<f4'}"), "must start with '{'");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False}"), "missing key 'shape'");
    check_refused(make_npy(1, "{'fortran_order': False, 'shape': (2,)}"), "missing key 'descr'");
    check_refused(make_npy(1, "{'descr': '<f4', 'shape': (2,)}"), "missing key 'fortran_order'");
    check_refused(make_npy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}"), "duplicate key 'descr'");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}"), "unexpected key 'extra'");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}"), "expected True or False");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}"), "a 1-D shape is written (n,)");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}"), "expected a tuple");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}"), "negative dimension");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}"), "non-negative integer");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk"), "after the closing '}'");
    check_refused(make_npy(1, "{'descr': '<f4"), "unterminated string");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False 'shape': (2,)}"), "expected ',' or '}'");
    check_refused(make_npy(1, "{'descr' '<f4'}"), "expected ':' after key 'descr'");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,"), "expected a non-negative integer");
    check_refused(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}"), "expected ',' or ')'");
    check_refused(make_npy(1, ""), "must start with '{'");
  }

  TEST_CASE("shape overflow is refused before anything is sized") {
    check_refused(make_npy(1, f4_dict("(99999999999999999999,)")), "does not fit in 64 bits");
    check_refused(make_npy(1, f4_dict("(4294967296, 4294967296)")), "too large");
    check_refused(make_npy(1, f4_dict("(2305843009213693952,)")), "too large");  // 2^61 * 4 bytes
    // Zero elements, but a row would count 2^64: refused so that no sub-product overflows.
    check_refused(make_npy(1, f4_dict("(0, 4294967296, 4294967296)")), "too large");
  }

  TEST_CASE("header length past the end of the file") {
    auto bytes = make_npy(1, f4_dict("(2,)"));
    bytes.resize(bytes.size() - 5);
    check_refused(bytes, "runs past the end of the file");
    auto big = make_npy(2, f4_dict("(2,)"));
    big[8] = std::byte{0xFF}, big[9] = std::byte{0xFF}, big[10] = std::byte{0xFF}, big[11] = std::byte{0x7F};
    check_refused(big, "exceeds the limit");
  }

  TEST_CASE("truncated data names expected and actual bytes") {
    const auto bytes = make_npy(1, f4_dict("(4, 4)"), 64);
    const std::uint64_t full = bytes.size();
    CHECK(error_of(bytes, full).empty());
    const std::string msg = error_of(bytes, full - 1);
    CHECK(msg.find("truncated") != std::string::npos);
    CHECK(msg.find("needs " + std::to_string(full) + " bytes") != std::string::npos);
    CHECK(msg.find("the file has " + std::to_string(full - 1)) != std::string::npos);
  }
}
