// Faults and bad input end the job cleanly: `ringattn run` exits non-zero with one
// error line naming the cause (and, for a peer fault, the rank), within the job's
// --timeout plus a margin, with every process it started gone and nothing left next to
// the output: no o.npy, no lse.npy, no temporary file, no .ringattn-run-* directory.
//
// Peer faults are injected into one node through RINGATTN_FAULT (src/node/fault.hpp).
// A different protocol version and an oversized length field cannot be produced by a
// real node; the net suite covers them in-process with a raw peer (tests/net/
// test_faults.cpp, test_wire.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

constexpr double kTimeout = 3;  // the job's --timeout
// A hang guard, not a speed target: every fault ends within about one timeout plus the
// coordinator's 1.5 s grace, but these tests also run five times in a row beside other
// suites and a CPU burner (deploy/test.sh), so the bound leaves room for a slow machine
// while still failing a launcher that waits for its old backstop, timeout*(P+2)+10 s.
constexpr double kHangGuard = 4 * kTimeout + 6;

bool contains_any(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s.find(w) != std::string::npos) return true;
  return false;
}

void check_clean_failure(const ScratchDir& dir, const Outcome& o, const std::vector<std::string>& inputs) {
  INFO("stderr: " << o.err);
  CHECK(!o.timed_out);
  CHECK(o.exit_code != 0);
  CHECK(o.exit_code != -1);
  CHECK(o.group_empty);  // every node and the coordinator have ended
  CHECK(o.wall_seconds < kHangGuard);
  CHECK(o.error_lines().size() == 1);
  CHECK(dir.entries() == inputs);
}

struct PeerFault {
  const char* fault;  // RINGATTN_FAULT
  int nodes;
  const char* rank;   // the rank the error must name
  std::initializer_list<const char*> cause;  // one of these words names the cause
};

}  // namespace

TEST_CASE("faults: a misbehaving peer ends the whole ring with its rank and the cause") {
  const PeerFault faults[] = {
      {"1:exit:1", 3, "rank 1", {"exiting abruptly", "closed the connection", "EOF", "reset"}},
      {"3:exit:2", 4, "rank 3", {"exiting abruptly", "closed the connection", "EOF", "reset"}},
      {"1:silent", 3, "rank 1", {"no connection", "did not complete", "timed out"}},
      {"1:hang:1", 3, "rank 1", {"timed out"}},
      {"1:token", 3, "rank 1", {"token", "authentication"}},
      {"1:shape", 3, "rank 1", {"job shape"}},
      {"1:corrupt:1", 3, "rank 1", {"CRC"}},  // step >= 1: a relayed block, so P >= 3
  };
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  for (const auto& f : faults) {
    Job job;
    job.nodes = f.nodes;
    job.layout = "zigzag";
    job.mask = Mask::causal();
    job.timeout = kTimeout;
    INFO("RINGATTN_FAULT=" << std::string(f.fault) << ", " << describe(job, shape));
    const Outcome o = run_ringattn(run_args(dir, job), {{"RINGATTN_FAULT", f.fault}}, 60);
    check_clean_failure(dir, o, {"k.npy", "q.npy", "v.npy"});
    const auto lines = o.error_lines();
    if (lines.empty()) continue;
    INFO("error line: " << lines.back());
    CHECK(lines.back().rfind("ringattn run: error: ", 0) == 0);
    CHECK(lines.back().find(f.rank) != std::string::npos);
    CHECK(contains_any(lines.back(), f.cause));
  }
}

TEST_CASE("faults: the same ring without a fault succeeds (the fault tests fail for their fault)") {
  const Shape shape{203, 4, 2, 64};
  ScratchDir dir;
  Inputs(shape, 3, DType::f32).write(dir);
  Job job;
  job.nodes = 3;
  job.layout = "zigzag";
  job.mask = Mask::causal();
  job.timeout = kTimeout;
  const Outcome o = run_ringattn(run_args(dir, job), {}, 60);
  INFO(o.err);
  CHECK(o.exit_code == 0);
  CHECK(o.group_empty);
}

namespace {

// A .npy file with any descr, written byte by byte (the writer under test only
// writes float32).
void write_raw_npy(const std::string& path, const std::string& descr, const std::string& shape, std::size_t payload) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::string s = "\x93NUMPY\x01";
  s += '\0';
  s += static_cast<char>(dict.size() & 0xff);
  s += static_cast<char>(dict.size() >> 8);
  s += dict;
  s.append(payload, '\0');
  std::ofstream(path, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
}

struct BadInput {
  const char* what;
  std::function<void(const ScratchDir&)> spoil;
  const char* file;                           // the file the error must name
  std::initializer_list<const char*> cause;  // one of these words names the cause
};

}  // namespace

TEST_CASE("bad input: refused before any node starts, naming the file and the cause") {
  const Shape shape{203, 4, 2, 64};
  const Inputs in(shape, 9, DType::f32);
  const BadInput cases[] = {
      {"truncated K",
       [](const ScratchDir& d) { REQUIRE(::truncate(d.file("k.npy").c_str(), 4096) == 0); },
       "k.npy", {"truncated", "bytes", "size"}},
      {"float64 V",
       [](const ScratchDir& d) { write_raw_npy(d.file("v.npy"), "<f8", "(203, 2, 64)", 203 * 2 * 64 * 8); },
       "v.npy", {"<f8"}},
      {"K with fewer tokens than Q",
       [&](const ScratchDir& d) {
         write_raw_npy(d.file("k.npy"), "<f4", "(202, 2, 64)", 202 * 2 * 64 * 4);
         write_raw_npy(d.file("v.npy"), "<f4", "(202, 2, 64)", 202 * 2 * 64 * 4);
       },
       "k.npy", {"tokens"}},
      {"V with other kv_heads than K",
       [&](const ScratchDir& d) { write_raw_npy(d.file("v.npy"), "<f4", "(203, 1, 64)", 203 * 1 * 64 * 4); },
       "v.npy", {"shape"}},
      {"K with another head_dim than Q",
       [&](const ScratchDir& d) {
         write_raw_npy(d.file("k.npy"), "<f4", "(203, 2, 32)", 203 * 2 * 32 * 4);
         write_raw_npy(d.file("v.npy"), "<f4", "(203, 2, 32)", 203 * 2 * 32 * 4);
       },
       "k.npy", {"head_dim"}},
      {"Q as a 2-D array",
       [&](const ScratchDir& d) { write_raw_npy(d.file("q.npy"), "<f4", "(203, 256)", 203 * 256 * 4); },
       "q.npy", {"shape"}},
  };
  for (const auto& c : cases) {
    ScratchDir dir;
    in.write(dir);
    c.spoil(dir);
    Job job;
    job.nodes = 3;
    job.timeout = kTimeout;
    INFO(std::string(c.what));
    const Outcome o = run_ringattn(run_args(dir, job), {}, 60);
    check_clean_failure(dir, o, {"k.npy", "q.npy", "v.npy"});
    const auto lines = o.error_lines();
    if (lines.empty()) continue;
    INFO("error line: " << lines.back());
    CHECK(lines.back().find(c.file) != std::string::npos);
    CHECK(contains_any(lines.back(), c.cause));
  }
}

TEST_CASE("bad input: a NaN or inf in Q, K or V is refused by the node that reads it, by token and head") {
  // The coordinator checks headers only; each node scans the rows it reads (in fp32,
  // before any bf16 rounding) and refuses before it joins the ring. Tokens map back
  // through the layout: 150 is row 14 of rank 2's contiguous shard, 40 row 6 of rank
  // 1's first zigzag chunk, 202 row 67 of rank 1's striped rows.
  struct NonFinite {
    const char* what;
    char tensor;
    std::int64_t token, head, elem;
    float value;
    const char* layout;
    DType dtype;
    const char* expect;
  };
  const NonFinite cases[] = {
      {"NaN in Q", 'q', 150, 3, 7, std::numeric_limits<float>::quiet_NaN(), "contiguous", DType::f32,
       "q.npy: token 150, head 3, element 7 is nan"},
      {"inf in V, bf16", 'v', 40, 1, 5, std::numeric_limits<float>::infinity(), "zigzag", DType::bf16,
       "v.npy: token 40, kv head 1, element 5 is inf"},
      {"-inf in K, last token", 'k', 202, 0, 63, -std::numeric_limits<float>::infinity(), "striped", DType::f32,
       "k.npy: token 202, kv head 0, element 63 is -inf"},
  };
  const Shape shape{203, 4, 2, 64};
  for (const auto& c : cases) {
    Inputs in(shape, 12, c.dtype);
    auto& t = c.tensor == 'q' ? in.q : c.tensor == 'k' ? in.k : in.v;
    const std::int64_t heads = c.tensor == 'q' ? shape.heads : shape.kv_heads;
    t[static_cast<std::size_t>((c.token * heads + c.head) * shape.head_dim + c.elem)] = c.value;
    ScratchDir dir;
    in.write(dir);
    Job job;
    job.nodes = 3;
    job.layout = c.layout;
    job.dtype = c.dtype;
    job.timeout = kTimeout;
    INFO(std::string(c.what));
    const Outcome o = run_ringattn(run_args(dir, job), {}, 60);
    check_clean_failure(dir, o, {"k.npy", "q.npy", "v.npy"});
    const auto lines = o.error_lines();
    if (lines.empty()) continue;
    INFO("error line: " << lines.back());
    CHECK(lines.back().find(c.expect) != std::string::npos);
    CHECK(lines.back().find("non-finite") != std::string::npos);
  }
}

}  // namespace ringattn::itest
