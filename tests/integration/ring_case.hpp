// Integration tests — one ring job end to end: inputs written as .npy by the test,
// `ringattn run` on real processes, outputs read back and compared with the float64
// dense reference computed here, in the test process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ringattn/types.hpp"
#include "tests/integration/spawn.hpp"

namespace ringattn::itest {

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> entries() const;  // file names, sorted

 private:
  std::filesystem::path path_;
};

struct Shape {
  std::int64_t tokens = 203, heads = 8, kv_heads = 8, head_dim = 64;
};

// Unit-normal Q, K, V from `seed`. With bf16 they are rounded to bf16 first, so the
// reference sees exactly what the ring's kernels see.
struct Inputs {
  Shape shape;
  std::vector<float> q, k, v;
  Inputs(const Shape& s, unsigned seed, DType dtype);
  // Writes q.npy, k.npy, v.npy into dir.
  void write(const ScratchDir& dir) const;
};

// Dense float64 attention over the whole sequence at global positions 0..N-1.
struct Reference {
  std::vector<double> o, lse;
};
Reference dense_reference(const Inputs& in, Mask mask);

struct Job {
  int nodes = 2;
  std::string layout = "contiguous";
  Mask mask = Mask::none();
  DType dtype = DType::f32;
  double timeout = 20;
  std::vector<std::string> extra;  // more `run` options
};

// The `ringattn run` arguments for `job` over the inputs in dir, writing o.npy / lse.npy.
std::vector<std::string> run_args(const ScratchDir& dir, const Job& job);

struct RingOutput {
  Outcome outcome;
  std::vector<float> o, lse;  // empty unless the run succeeded
};
RingOutput run_job(const ScratchDir& dir, const Job& job);

// The float32 data of an .npy file.
std::vector<float> read_npy_floats(const std::string& path);

// max |a - b| over all elements; lse entries that are -inf in both count as equal.
double max_abs_error(const std::vector<float>& got, const std::vector<double>& want);

std::string describe(const Job& job, const Shape& s);

}  // namespace ringattn::itest
