// Outputs are all or nothing, and nothing that cannot work is started: path collisions,
// missing directories, a file size limit hit while writing, a shape that needs more
// memory than the machine has. Each ends with one error line and the directory as it was.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

const std::vector<std::string> kInputs = {"k.npy", "q.npy", "v.npy"};

Outcome run_with(const ScratchDir& dir, std::vector<std::string> outputs, const Env& env = {}) {
  Job job;
  job.nodes = 3;
  job.timeout = 10;
  std::vector<std::string> args = {"run",          "--q",      dir.file("q.npy"), "--k", dir.file("k.npy"), "--v",
                                   dir.file("v.npy"), "--nodes", "3",              "--timeout", "10",        "--quiet"};
  args.insert(args.end(), outputs.begin(), outputs.end());
  return run_ringattn(args, env, 120);
}

void check_refused(const Outcome& o, const std::string& word) {
  INFO(o.err);
  CHECK(o.exit_code != 0);
  CHECK(o.group_empty);
  const auto lines = o.error_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find(word) != std::string::npos);
}

}  // namespace

TEST_CASE("outputs: collisions and missing directories are refused before any node starts") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  SUBCASE("--out and --lse the same file") {
    check_refused(run_with(dir, {"--out", dir.file("x.npy"), "--lse", dir.file("./x.npy")}), "same file");
  }
  SUBCASE("--out is an input") { check_refused(run_with(dir, {"--out", dir.file("q.npy")}), "input"); }
  SUBCASE("--lse is an input through a hard link") {
    REQUIRE(::link(dir.file("k.npy").c_str(), dir.file("k-link.npy").c_str()) == 0);
    check_refused(run_with(dir, {"--out", dir.file("o.npy"), "--lse", dir.file("k-link.npy")}), "input");
    std::filesystem::remove(dir.file("k-link.npy"));
  }
  SUBCASE("--lse in a directory that does not exist") {
    check_refused(run_with(dir, {"--out", dir.file("o.npy"), "--lse", dir.file("missing/lse.npy")}), "does not exist");
  }
  SUBCASE("--out under a file") {
    check_refused(run_with(dir, {"--out", dir.file("q.npy") + "/o.npy"}), "not a directory");
  }
  CHECK(dir.entries() == kInputs);
  const auto q = read_npy_floats(dir.file("q.npy"));
  CHECK(q.size() == static_cast<std::size_t>(203 * 4 * 64));  // inputs untouched
}

TEST_CASE("outputs: a write that fails half-way (file size limit) publishes neither O nor lse") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  // O is 208 KB, each node's shard 70 KB and lse 3 KB: with a 150 KB limit on every file
  // the nodes succeed and the coordinator fails writing O — like a disk that fills up.
  std::vector<std::string> args = {"--fsize=150000", ringattn_exe(), "run",  "--q",     dir.file("q.npy"), "--k",
                                   dir.file("k.npy"), "--v",           dir.file("v.npy"), "--nodes", "3", "--out",
                                   dir.file("o.npy"), "--lse",         dir.file("lse.npy"), "--quiet"};
  Spawned p(args, {}, "/usr/bin/prlimit");
  const Outcome o = p.wait(120);
  INFO(o.err);
  CHECK(o.exit_code == 1);
  REQUIRE(!o.error_lines().empty());
  CHECK(o.error_lines().back().find("File too large") != std::string::npos);
  CHECK(dir.entries() == kInputs);  // no o.npy, no lse.npy, no temporary file, no work dir
}

TEST_CASE("outputs: a shape that needs more memory than the machine has is refused with both numbers") {
  ScratchDir dir;
  // A sparse Q that declares 2^30 heads (512 GiB), and K, V to match: nothing is read.
  auto write_header_only = [&](const std::string& name, const std::string& shape, std::uint64_t payload) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + dict.size() + 1) % 64) dict += ' ';
    dict += '\n';
    std::string s = "\x93NUMPY\x01";
    s += '\0';
    s += static_cast<char>(dict.size() & 0xff);
    s += static_cast<char>(dict.size() >> 8);
    s += dict;
    {
      std::ofstream f(dir.file(name), std::ios::binary);
      f.write(s.data(), static_cast<std::streamsize>(s.size()));
    }
    REQUIRE(::truncate(dir.file(name).c_str(), static_cast<off_t>(s.size() + payload)) == 0);
  };
  write_header_only("q.npy", "(4, 1073741824, 64)", 4ull * (1ull << 30) * 64 * 4);
  write_header_only("k.npy", "(4, 1, 64)", 4 * 64 * 4);
  write_header_only("v.npy", "(4, 1, 64)", 4 * 64 * 4);
  const Outcome o = run_with(dir, {"--out", dir.file("o.npy")});
  INFO(o.err);
  CHECK(o.exit_code == 1);
  CHECK(o.group_empty);
  REQUIRE(o.error_lines().size() == 1);
  const std::string line = o.error_lines()[0];
  CHECK(line.find("needs about") != std::string::npos);
  CHECK(line.find("available") != std::string::npos);
  CHECK(line.find("bad_alloc") == std::string::npos);
}

}  // namespace ringattn::itest
