// .npy files on disk: round trips, a node's row subsets, truncated and malformed files
// named in errors, and atomic output that never leaves a partial file behind.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>

#include "ringattn/error.hpp"
#include "src/io/npy.hpp"
#include "tests/unit/npy_fixtures.hpp"

using namespace ringattn::io;
using ringattn::FileError;
using ringattn::InvalidArgument;
using ringattn::test::TempDir;

namespace {

// Element (t, j) of a [tokens, row] tensor is 1000 * t + j: every value names its row.
std::vector<float> iota_tensor(std::int64_t tokens, std::int64_t row) {
  std::vector<float> v(static_cast<std::size_t>(tokens * row));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t j = 0; j < row; ++j) v[static_cast<std::size_t>(t * row + j)] = static_cast<float>(1000 * t + j);
  return v;
}

std::vector<float> expected_rows(const std::vector<std::int64_t>& rows, std::int64_t row) {
  std::vector<float> v;
  for (std::int64_t t : rows)
    for (std::int64_t j = 0; j < row; ++j) v.push_back(static_cast<float>(1000 * t + j));
  return v;
}

std::string file_error(auto&& fn) {
  try {
    fn();
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("npy files") {
  TEST_CASE("write then read back: shape, offset, bytes") {
    TempDir dir;
    const std::string path = dir.file("q.npy");
    const std::vector<std::int64_t> shape{37, 3, 5};
    const auto data = iota_tensor(37, 15);
    write_npy_atomic(path, shape, data);
    const NpyArray a = read_npy(path);
    CHECK(a.info.shape == shape);
    CHECK(a.info.data_offset % 64 == 0);
    CHECK(a.data == data);
    CHECK(std::filesystem::file_size(path) == a.info.data_offset + data.size() * 4);
    CHECK(dir.entries() == std::vector<std::string>{"q.npy"});  // no temporary left
  }

  TEST_CASE("version 2.0 and 3.0 files written by hand are read") {
    TempDir dir;
    for (int major : {2, 3}) {
      auto bytes = ringattn::test::make_npy(major, ringattn::test::f4_dict("(2, 2)") + "\n", 16);
      const float vals[4] = {1.5f, -2, 3, 4};
      std::memcpy(bytes.data() + bytes.size() - 16, vals, 16);
      const std::string path = dir.file(major == 2 ? "v2.npy" : "v3.npy");
      ringattn::test::write_bytes(path, bytes);
      const NpyArray a = read_npy(path);
      CHECK(a.info.major_version == major);
      CHECK(a.data == std::vector<float>{1.5f, -2, 3, 4});
    }
  }

  TEST_CASE("a node's rows: contiguous, zigzag, striped, arbitrary") {
    TempDir dir;
    const std::string path = dir.file("k.npy");
    const std::int64_t tokens = 64, row = 6;
    write_npy_atomic(path, std::vector<std::int64_t>{tokens, 2, 3}, iota_tensor(tokens, row));
    NpyReader r(path);

    SUBCASE("contiguous: node 2 of 4") {
      std::vector<float> dst(16 * row);
      r.read_ranges(std::array{RowRange{32, 48}}, dst);
      std::vector<std::int64_t> want(16);
      std::iota(want.begin(), want.end(), 32);
      CHECK(dst == expected_rows(want, row));
    }
    SUBCASE("zigzag: node 1 of P = 4 holds chunks 1 and 6 of 8") {
      std::vector<float> dst(16 * row);
      r.read_ranges(std::array{RowRange{8, 16}, RowRange{48, 56}}, dst);
      std::vector<std::int64_t> want;
      for (std::int64_t t = 8; t < 16; ++t) want.push_back(t);
      for (std::int64_t t = 48; t < 56; ++t) want.push_back(t);
      CHECK(dst == expected_rows(want, row));
    }
    SUBCASE("striped: every P-th row, windowed and per-row paths agree") {
      for (std::int64_t step : {1, 3, 4, 7, 63}) {
        CAPTURE(step);
        const std::int64_t first = 2 % step, count = (tokens - 1 - first) / step + 1;
        std::vector<float> dst(static_cast<std::size_t>(count * row));
        r.read_strided(first, step, count, dst);
        std::vector<std::int64_t> want;
        for (std::int64_t k = 0; k < count; ++k) want.push_back(first + k * step);
        CHECK(dst == expected_rows(want, row));
      }
      std::vector<float> dst(17 * row);
      CHECK_THROWS_AS(r.read_strided(1, 4, 17, dst), InvalidArgument);  // row 65 does not exist
    }
    SUBCASE("striped with wide rows: one pread per row") {
      const std::string wide = dir.file("wide.npy");
      const std::int64_t wide_row = 8192;  // 32 KiB rows: gaps of 3+ rows exceed the read-through limit
      write_npy_atomic(wide, std::vector<std::int64_t>{16, wide_row}, iota_tensor(16, wide_row));
      NpyReader w(wide);
      std::vector<float> dst(4 * wide_row);
      w.read_strided(1, 4, 4, dst);
      CHECK(dst == expected_rows({1, 5, 9, 13}, wide_row));
    }
    SUBCASE("arbitrary rows, runs merged, order kept") {
      const std::vector<std::int64_t> rows{5, 6, 7, 0, 63, 62, 10, 11};
      std::vector<float> dst(rows.size() * row);
      r.read_rows(rows, dst);
      CHECK(dst == expected_rows(rows, row));
      // The one-shot form checks the header still matches.
      std::vector<float> dst2(rows.size() * row);
      read_rows(path, r.info(), std::span<const std::int64_t>(rows), dst2);
      CHECK(dst2 == dst);
    }
    SUBCASE("bad requests name the file") {
      std::vector<float> dst(row);
      try {
        r.read_rows(std::vector<std::int64_t>{64}, dst);
        FAIL("row 64 accepted");
      } catch (const InvalidArgument& e) {
        CHECK(std::string(e.what()).find(path) != std::string::npos);
        CHECK(std::string(e.what()).find("row 64 is out of range") != std::string::npos);
      }
      CHECK_THROWS_AS(r.read_ranges(std::array{RowRange{0, 2}}, dst), InvalidArgument);  // dst too small
      CHECK_THROWS_AS(r.read_ranges(std::array{RowRange{5, 4}}, dst), InvalidArgument);
    }
  }

  TEST_CASE("bad files give FileError naming the file and the problem") {
    TempDir dir;
    const std::string good = dir.file("good.npy");
    write_npy_atomic(good, std::vector<std::int64_t>{8, 4}, iota_tensor(8, 4));
    const auto size = std::filesystem::file_size(good);

    SUBCASE("truncated data") {
      std::filesystem::resize_file(good, size - 4);
      const std::string msg = file_error([&] { read_npy_header(good); });
      CHECK(msg.find(good) == 0);
      CHECK(msg.find("truncated") != std::string::npos);
      CHECK(msg.find("needs " + std::to_string(size) + " bytes") != std::string::npos);
      CHECK(msg.find("has " + std::to_string(size - 4)) != std::string::npos);
    }
    SUBCASE("truncated inside the header") {
      std::filesystem::resize_file(good, 40);
      CHECK(file_error([&] { NpyReader r(good); }).find("runs past the end of the file") != std::string::npos);
    }
    SUBCASE("empty file and missing file") {
      std::filesystem::resize_file(good, 0);
      CHECK(file_error([&] { read_npy(good); }).find("not a .npy file") != std::string::npos);
      const std::string missing = dir.file("missing.npy");
      const std::string msg = file_error([&] { read_npy(missing); });
      CHECK(msg.find(missing) == 0);
      CHECK(msg.find("No such file") != std::string::npos);
    }
    SUBCASE("a wrong dtype written by hand") {
      const std::string f8 = dir.file("f8.npy");
      ringattn::test::write_bytes(f8, ringattn::test::make_npy(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }\n", 16));
      const std::string msg = file_error([&] { read_npy(f8); });
      CHECK(msg.find(f8) == 0);
      CHECK(msg.find("'<f8'") != std::string::npos);
    }
    SUBCASE("a directory is not a file") {
      CHECK(file_error([&] { read_npy(dir.path().string()); }).find(dir.path().string()) == 0);
    }
    SUBCASE("the file changed between header and data") {
      const NpyInfo info = read_npy_header(good);
      write_npy_atomic(good, std::vector<std::int64_t>{4, 4}, iota_tensor(4, 4));
      std::vector<float> dst(4);
      const std::string msg = file_error([&] { read_rows(good, info, std::array{RowRange{0, 1}}, dst); });
      CHECK(msg.find("changed since its header was read") != std::string::npos);
    }
  }

  TEST_CASE("atomic output: assembled from parts in any order") {
    TempDir dir;
    const std::string path = dir.file("o.npy");
    const auto all = iota_tensor(10, 3);
    NpyAtomicWriter w(path, {10, 3});
    CHECK_FALSE(std::filesystem::exists(path));  // nothing visible until commit
    const std::vector<std::int64_t> odd{1, 3, 5, 7, 9}, even{0, 2, 4, 6, 8};
    w.write_rows(odd, expected_rows(odd, 3));
    w.write_rows(RowRange{0, 1}, std::span(all).subspan(0, 3));
    w.write_rows(std::vector<std::int64_t>{2, 4, 6, 8}, expected_rows({2, 4, 6, 8}, 3));
    w.commit();
    CHECK(read_npy(path).data == all);
    CHECK(dir.entries() == std::vector<std::string>{"o.npy"});
  }

  TEST_CASE("atomic output: failures leave no file, and no temporary") {
    TempDir dir;
    const std::string path = dir.file("o.npy");
    const auto data = iota_tensor(4, 2);

    SUBCASE("destroyed without commit (the run failed)") {
      {
        NpyAtomicWriter w(path, {4, 2});
        w.write_rows(RowRange{0, 4}, data);
        CHECK(dir.entries().size() == 1);  // the hidden temporary
      }
      CHECK(dir.entries().empty());
    }
    SUBCASE("a missing row refuses to publish") {
      NpyAtomicWriter w(path, {4, 2});
      w.write_rows(RowRange{0, 3}, std::span(data).subspan(0, 6));
      CHECK_THROWS_WITH_AS(w.commit(), doctest::Contains("row 3 of 4 was never written"), ringattn::Error);
      CHECK(dir.entries().empty());
    }
    SUBCASE("rename fails: the destination is a directory") {
      std::filesystem::create_directory(path);
      const std::string msg = file_error([&] { write_npy_atomic(path, std::vector<std::int64_t>{4, 2}, data); });
      CHECK(msg.find(path) == 0);
      CHECK(msg.find("could not move the finished output into place") != std::string::npos);
      CHECK(dir.entries() == std::vector<std::string>{"o.npy"});  // only the directory
      CHECK(std::filesystem::is_directory(path));
    }
    SUBCASE("the directory does not exist") {
      const std::string nowhere = dir.file("no/such/dir/o.npy");
      CHECK(file_error([&] { write_npy_atomic(nowhere, std::vector<std::int64_t>{4, 2}, data); }).find("create failed") != std::string::npos);
      CHECK(dir.entries().empty());
    }
    SUBCASE("an existing output survives a failed rewrite untouched") {
      write_npy_atomic(path, std::vector<std::int64_t>{4, 2}, data);
      {
        NpyAtomicWriter w(path, {4, 2});
        w.write_rows(RowRange{0, 1}, std::vector<float>(2, -1.f));
      }  // abandoned
      CHECK(read_npy(path).data == data);
      CHECK(dir.entries() == std::vector<std::string>{"o.npy"});
    }
    SUBCASE("a wrong source size is refused before writing") {
      CHECK_THROWS_AS(write_npy_atomic(path, std::vector<std::int64_t>{4, 2}, std::span(data).subspan(0, 7)), InvalidArgument);
      CHECK(dir.entries().empty());
    }
    SUBCASE("directory not writable (skipped when running as root)") {
      if (::geteuid() == 0) return;
      std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
      CHECK(file_error([&] { write_npy_atomic(path, std::vector<std::int64_t>{4, 2}, data); }).find("Permission denied") != std::string::npos);
      std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
      CHECK(dir.entries().empty());
    }
  }
}

TEST_CASE("the fuzz seed corpus: valid_* files are accepted, every other one is refused") {
  int valid = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(RINGATTN_NPY_CORPUS)) {
    const std::string path = entry.path().string();
    const bool want_valid = entry.path().filename().string().rfind("valid_", 0) == 0;
    CAPTURE(path);
    if (want_valid) {
      CHECK_NOTHROW(read_npy(path));
      ++valid;
    } else {
      CHECK(file_error([&] { read_npy_header(path); }).find(path) == 0);
      ++refused;
    }
  }
  CHECK(valid >= 3);
  CHECK(refused >= 5);
}
