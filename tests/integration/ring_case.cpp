#include "tests/integration/ring_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include "src/oracle/reference.hpp"
#include "ringattn/block_attention.hpp"
#include "src/io/npy_reader.hpp"
#include "src/io/npy_writer.hpp"

namespace ringattn::itest {

namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  std::string tmpl = (fs::temp_directory_path() / "ringattn-itest-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<std::string> ScratchDir::entries() const {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Inputs::Inputs(const Shape& s, unsigned seed, DType dtype) : shape(s) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto make = [&](std::int64_t heads) {
    std::vector<float> x(static_cast<std::size_t>(s.tokens * heads * s.head_dim));
    for (auto& e : x) e = nd(rng);
    if (dtype == DType::bf16) {
      std::vector<std::uint16_t> tmp(x.size());
      to_bf16(x.data(), tmp.data(), static_cast<std::int64_t>(x.size()));
      from_bf16(tmp.data(), x.data(), static_cast<std::int64_t>(x.size()));
    }
    return x;
  };
  q = make(s.heads);
  k = make(s.kv_heads);
  v = make(s.kv_heads);
}

void Inputs::write(const ScratchDir& dir) const {
  io::write_npy_atomic(dir.file("q.npy"), std::vector<std::int64_t>{shape.tokens, shape.heads, shape.head_dim}, q);
  io::write_npy_atomic(dir.file("k.npy"), std::vector<std::int64_t>{shape.tokens, shape.kv_heads, shape.head_dim}, k);
  io::write_npy_atomic(dir.file("v.npy"), std::vector<std::int64_t>{shape.tokens, shape.kv_heads, shape.head_dim}, v);
}

Reference dense_reference(const Inputs& in, Mask mask) {
  const auto& s = in.shape;
  Reference r;
  r.o.resize(in.q.size());
  r.lse.resize(static_cast<std::size_t>(s.tokens * s.heads));
  const auto all = Positions::contiguous(0, s.tokens);
  oracle::dense_attention_f64({s.heads, s.kv_heads, s.head_dim, mask, 0.0}, in.q.data(), all, in.k.data(),
                               in.v.data(), all, r.o.data(), r.lse.data());
  return r;
}

std::vector<std::string> run_args(const ScratchDir& dir, const Job& job) {
  std::vector<std::string> a = {"run",     "--nodes",  std::to_string(job.nodes),      "--q",     dir.file("q.npy"),
                                "--k",     dir.file("k.npy"), "--v",                   dir.file("v.npy"),
                                "--out",   dir.file("o.npy"), "--lse",                 dir.file("lse.npy"),
                                "--layout", job.layout,   "--dtype", std::string(to_string(job.dtype)),
                                "--threads", "1",         "--quiet"};
  char t[32];
  std::snprintf(t, sizeof t, "%g", job.timeout);
  a.insert(a.end(), {"--timeout", t});
  if (job.mask.kind == MaskKind::causal) a.push_back("--causal");
  if (job.mask.kind == MaskKind::window) a.insert(a.end(), {"--window", std::to_string(job.mask.window)});
  a.insert(a.end(), job.extra.begin(), job.extra.end());
  return a;
}

RingOutput run_job(const ScratchDir& dir, const Job& job) {
  RingOutput r;
  // The deadline is the test's own backstop; the job's --timeout is what is under test.
  r.outcome = run_ringattn(run_args(dir, job), {}, 60 + 4 * job.timeout);
  if (r.outcome.exit_code == 0) {
    r.o = io::read_npy(dir.file("o.npy")).data;
    r.lse = io::read_npy(dir.file("lse.npy")).data;
  }
  return r;
}

std::vector<float> read_npy_floats(const std::string& path) { return io::read_npy(path).data; }

double max_abs_error(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double e = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(got[i]) && std::isinf(want[i]) && (got[i] < 0) == (want[i] < 0)) continue;
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    e = std::isnan(d) ? INFINITY : std::max(e, d);
  }
  return e;
}

std::string describe(const Job& job, const Shape& s) {
  return "P=" + std::to_string(job.nodes) + " " + job.layout + " mask=" + to_string(job.mask) + " " +
         std::string(to_string(job.dtype)) + " N=" + std::to_string(s.tokens) + " H=" + std::to_string(s.heads) + "/" +
         std::to_string(s.kv_heads) + " D=" + std::to_string(s.head_dim);
}

}  // namespace ringattn::itest
