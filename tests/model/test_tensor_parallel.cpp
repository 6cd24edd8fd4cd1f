// Tensor parallelism in the model (infer/model/tensor_parallel.hpp): T parts of a seeded model,
// each on a thread of an in-process group (the sum and gather in rank order, as the ring's
// give the same bits on every rank), against the whole model. A part's q, k and v are the
// whole model's columns of its heads to the bit; the hidden rows and logits after the sums
// agree with the whole model's within 1e-5 relative (only the order of the sums after O and
// down differs), the same bits on every rank of the group. No model files needed.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <ringattn/error.hpp>
#include <ringattn/tensor_types.hpp>

#include "job/fingerprint.hpp"
#include "model/model.hpp"
#include "infer/job/model_files.hpp"
#include "model/tensor_parallel.hpp"

using infer::Model;
using infer::ModelConfig;
using infer::TpShard;
using infer::files_fingerprint;
using infer::JobOptions;
using infer::model_fingerprint;
using ringattn::DType;

namespace {

ModelConfig small() {
  ModelConfig c;
  c.vocab = 301;  // not a multiple of T: uneven vocabulary parts
  c.dim = 96;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 24;
  c.ffn = 200;
  c.tied = false;
  return c;
}

// T threads as a tensor-parallel group: each call's data lands in a shared slot per rank,
// and every rank sums (or gathers) the slots in rank order.
class ThreadGroup {
 public:
  explicit ThreadGroup(int T) : T_(T), slots_(static_cast<std::size_t>(T)), sync_(T) {}

  class Member : public infer::TpGroup {
   public:
    Member(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
    void sum(std::span<float> data) override {
      g_.slots_[static_cast<std::size_t>(rank_)].assign(data.begin(), data.end());
      g_.sync_.arrive_and_wait();
      for (std::size_t i = 0; i < data.size(); ++i) {
        float s = 0;
        for (const auto& slot : g_.slots_) s += slot[i];
        data[i] = s;
      }
      g_.sync_.arrive_and_wait();
    }
    void gather(std::span<float> data, std::span<const std::size_t> counts) override {
      std::size_t at = 0;
      for (int r = 0; r < rank_; ++r) at += counts[static_cast<std::size_t>(r)];
      g_.slots_[static_cast<std::size_t>(rank_)].assign(data.begin() + static_cast<std::ptrdiff_t>(at),
                                                        data.begin() + static_cast<std::ptrdiff_t>(at + counts[static_cast<std::size_t>(rank_)]));
      g_.sync_.arrive_and_wait();
      at = 0;
      for (std::size_t r = 0; r < g_.slots_.size(); ++r) {
        std::copy(g_.slots_[r].begin(), g_.slots_[r].end(), data.begin() + static_cast<std::ptrdiff_t>(at));
        at += counts[r];
      }
      g_.sync_.arrive_and_wait();
    }

   private:
    ThreadGroup& g_;
    int rank_;
  };

  // Runs body(rank, member) on T threads.
  void run(const std::function<void(int, Member&)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < T_; ++r)
      threads.emplace_back([&, r] {
        Member m(*this, r);
        body(r, m);
      });
    for (auto& t : threads) t.join();
  }

 private:
  int T_;
  std::vector<std::vector<float>> slots_;
  std::barrier<> sync_;
};

// Every layer of the model over `tokens`, attention stood in by o := q (each head's own q:
// the same on a part, whose heads are a run of the whole's). Returns the q, k, v of the first
// layer (the later layers' inputs carry the sums' rounding), the hidden rows and the logits.
struct Pass {
  std::vector<float> q, k, v, h, logits;
};
Pass run(const Model& m, const std::vector<std::int32_t>& tokens, infer::TpGroup* group) {
  const ModelConfig& c = m.config();
  const std::size_t n = tokens.size(), qd = std::size_t(m.parts().heads.count * c.head_dim),
                    kd = std::size_t(m.parts().kv_heads.count * c.head_dim);
  Pass p{std::vector<float>(n * qd), std::vector<float>(n * kd), std::vector<float>(n * kd),
         std::vector<float>(n * std::size_t(c.dim)), std::vector<float>(n * std::size_t(c.vocab))};
  std::vector<std::int64_t> positions(n);
  for (std::size_t i = 0; i < n; ++i) positions[i] = static_cast<std::int64_t>(i);
  m.embed(tokens, p.h, group);
  std::vector<float> q(p.q.size()), k(p.k.size()), v(p.v.size());
  for (int l = 0; l < c.layers; ++l) {
    m.attention_inputs(l, p.h, positions, l == 0 ? p.q : q, l == 0 ? p.k : k, l == 0 ? p.v : v);
    m.attention_output_and_mlp(l, l == 0 ? p.q : q, p.h, group);
  }
  m.logits(p.h, p.logits, group);
  return p;
}

double relative(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : INFINITY);
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return err / scale;
}

// Columns [first, first + count) of each row of t [rows, width].
std::vector<float> columns(const std::vector<float>& t, std::size_t width, std::size_t first, std::size_t count) {
  std::vector<float> out;
  for (std::size_t r = 0; r < t.size() / width; ++r)
    out.insert(out.end(), t.begin() + static_cast<std::ptrdiff_t>(r * width + first),
               t.begin() + static_cast<std::ptrdiff_t>(r * width + first + count));
  return out;
}

}  // namespace

TEST_CASE("tensor parallelism: T parts of a model give the whole model's q, k, v to the bit and its logits within 1e-5") {
  const std::vector<std::int32_t> tokens = {1, 17, 300, 42, 150, 151, 0, 299, 7, 88, 120};
  for (DType d : {DType::f32, DType::bf16, DType::q8_0})  // q8_0: the integer arithmetic (int8 activations)
    for (bool tied : {false, true})
      for (int T : {1, 2, 4}) {  // 4: fewer K/V heads (2) than ranks, each read by two parts
        ModelConfig c = small();
        c.tied = tied;
        if (d == DType::q8_0) {  // every part's columns whole blocks of 32 at T = 4
          c.head_dim = 32;
          c.ffn = 256;
        }
        CAPTURE(ringattn::to_string(d));
        CAPTURE(tied);
        CAPTURE(T);
        const Model whole = Model::from_seed(c, 7, d);
        const Pass want = run(whole, tokens, nullptr);
        std::vector<Pass> got(static_cast<std::size_t>(T));
        std::vector<std::string> errors(static_cast<std::size_t>(T));
        ThreadGroup g(T);
        g.run([&](int r, ThreadGroup::Member& member) {
          try {
            const Model part = Model::from_seed(c, 7, d, TpShard{r, T});
            got[static_cast<std::size_t>(r)] = run(part, tokens, T > 1 ? &member : nullptr);
          } catch (const std::exception& e) {
            errors[static_cast<std::size_t>(r)] = e.what();
          }
        });
        for (const auto& e : errors) REQUIRE(e == "");
        const std::size_t hd = std::size_t(c.head_dim);
        for (int r = 0; r < T; ++r) {
          const infer::TpParts parts = infer::TpParts::of(c, {r, T});
          const Pass& p = got[static_cast<std::size_t>(r)];
          CHECK(p.q == columns(want.q, hd * std::size_t(c.heads), hd * std::size_t(parts.heads.first), hd * std::size_t(parts.heads.count)));
          CHECK(p.k == columns(want.k, hd * std::size_t(c.kv_heads), hd * std::size_t(parts.kv_heads.first),
                               hd * std::size_t(parts.kv_heads.count)));
          CHECK(p.v == columns(want.v, hd * std::size_t(c.kv_heads), hd * std::size_t(parts.kv_heads.first),
                               hd * std::size_t(parts.kv_heads.count)));
          CHECK(relative(p.h, want.h) <= 1e-5);
          CHECK(relative(p.logits, want.logits) <= 1e-5);
          CHECK(p.h == got[0].h);  // every rank of the group holds the same rows
          CHECK(p.logits == got[0].logits);
          if (T == 1) CHECK(p.logits == want.logits);  // one part is the whole model, bit for bit
        }
      }
}

TEST_CASE("tensor parallelism: a part holds its share of the weights, and its digest names it") {
  ModelConfig c = small();
  c.dim = 128;
  c.ffn = 256;
  c.vocab = 512;
  c.head_dim = 32;  // every split a whole number of 32-column panels
  const Model whole = Model::from_seed(c, 3, DType::bf16);
  const Model a = Model::from_seed(c, 3, DType::bf16, {0, 2}), b = Model::from_seed(c, 3, DType::bf16, {1, 2});
  const std::size_t norms = (2 * std::size_t(c.layers) + 1) * std::size_t(c.dim) * sizeof(float);
  CHECK(a.weight_bytes() - norms == (whole.weight_bytes() - norms) / 2);
  CHECK(b.weight_bytes() == a.weight_bytes());
  CHECK(a.digest() != b.digest());
  CHECK(a.digest() != whole.digest());
  CHECK(Model::from_seed(c, 3, DType::bf16, {1, 2}).digest() == b.digest());
  CHECK(Model::from_seed(c, 3, DType::bf16, {0, 1}).digest() == whole.digest());
}

TEST_CASE("tensor parallelism: a split the model cannot take is refused naming it; a part needs its group") {
  const ModelConfig c = small();  // 4 query heads, 2 K/V heads
  auto refusal = [&](TpShard s) {
    try {
      (void)Model::from_seed(c, 1, DType::f32, s);
    } catch (const ringattn::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal({0, 3}).find("4 query heads do not split in 3") != std::string::npos);
  CHECK(refusal({2, 2}).find("rank 2 is outside the group") != std::string::npos);
  ModelConfig odd = c;
  odd.heads = 6;
  odd.kv_heads = 3;
  CHECK_THROWS_WITH_AS(Model::from_seed(odd, 1, DType::f32, {0, 2}), doctest::Contains("3 K/V heads neither split"),
                       ringattn::InvalidArgument);
  const Model part = Model::from_seed(c, 1, DType::f32, {0, 2});
  std::vector<float> x(std::size_t(c.dim));
  const std::vector<std::int32_t> token = {5};
  CHECK_THROWS_WITH_AS(part.embed(token, x), doctest::Contains("needs its tensor-parallel group"), ringattn::InvalidArgument);
}

TEST_CASE("tensor parallelism: the whole checkpoint's fingerprint tells two files apart, sampled, whatever part a rank holds") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("ringattn-fp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Gone {
    std::filesystem::path p;
    ~Gone() { std::filesystem::remove_all(p); }
  } gone{dir};
  auto write = [&](const std::string& name, std::size_t n, std::size_t flip) {
    std::string bytes(n, '\0');
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
    if (flip < n) bytes[flip] = static_cast<char>(bytes[flip] ^ 1);
    std::ofstream(dir / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
    return (dir / name).string();
  };
  const std::string a = write("a.bin", 300000, SIZE_MAX), same = write("same.bin", 300000, SIZE_MAX);
  const std::string flipped = write("flipped.bin", 300000, 150000);  // small: every byte is sampled
  const std::string shorter = write("shorter.bin", 299999, SIZE_MAX);
  CHECK(files_fingerprint({a}) == files_fingerprint({same}));
  CHECK(files_fingerprint({a}) != files_fingerprint({flipped}));
  CHECK(files_fingerprint({a}) != files_fingerprint({shorter}));
  CHECK(files_fingerprint({a, same}) != files_fingerprint({a}));
  // Large: 64 samples of 64 KiB, the first and last included; another checkpoint of the
  // same size differs in them.
  const std::string big = write("big.bin", 40 << 20, SIZE_MAX), big_tail = write("big_tail.bin", 40 << 20, (40 << 20) - 1);
  CHECK(files_fingerprint({big}) != files_fingerprint({big_tail}));
  // The model's: the seed and shape when no file holds it; the held dtype counts.
  JobOptions o;
  ModelConfig c;
  infer::ModelFiles none("", "");
  const std::uint64_t seeded = model_fingerprint(o, none, c);
  o.seed = 2;
  CHECK(model_fingerprint(o, none, c) != seeded);
  o.seed = 1;
  o.weights_dtype = ringattn::DType::bf16;
  CHECK(model_fingerprint(o, none, c) != seeded);
  CHECK_THROWS_WITH_AS(files_fingerprint({(dir / "absent.bin").string()}), doctest::Contains("absent.bin"), ringattn::FileError);
}

TEST_CASE("tensor parallelism: a part's columns of a quantized row must be whole blocks of its type (the table's split rule)") {
  using infer::column_cut;
  using infer::Part;
  const ringattn::TensorType& q4 = ringattn::tensor_type(DType::q4_k);
  // A row of 512 q4_k values: 2 blocks of 144 bytes; the second part starts at byte 144.
  const infer::ColumnCut cut = column_cut(q4, 512, Part{256, 256}, "model m.gguf: tensor w");
  CHECK(cut.row == 288);
  CHECK(cut.skip == 144);
  CHECK(cut.take == 144);
  CHECK_THROWS_WITH_AS(column_cut(q4, 512, Part{0, 128}, "model m.gguf: tensor w"),
                       doctest::Contains("model m.gguf: tensor w: this rank's tensor-parallel part holds its columns [0, 128), "
                                         "which do not start and end on the q4_k blocks of 256 values along a row"),
                       ringattn::FileError);
  CHECK_THROWS_AS(column_cut(q4, 512, Part{128, 256}, "w"), ringattn::FileError);  // starts inside a block
  CHECK_THROWS_AS(column_cut(ringattn::tensor_type(DType::q6_k), 768, Part{256, 384}, "w"), ringattn::FileError);
  CHECK_THROWS_WITH_AS(column_cut(ringattn::tensor_type(DType::q8_0), 96, Part{48, 48}, "w"),
                       doctest::Contains("[48, 96), which do not start and end on the q8_0 blocks of 32"), ringattn::FileError);
  // Element-wise types cut anywhere; a part outside the row is refused.
  const infer::ColumnCut f = column_cut(ringattn::tensor_type(DType::bf16), 10, Part{3, 5}, "w");
  CHECK(f.row == 20);
  CHECK(f.skip == 6);
  CHECK(f.take == 10);
  CHECK_THROWS_WITH_AS(column_cut(q4, 512, Part{256, 512}, "w"), doctest::Contains("columns [256, 768) of a row of 512 q4_k values"),
                       ringattn::InvalidArgument);
  CHECK_THROWS_AS(column_cut(q4, 512, Part{-256, 256}, "w"), ringattn::InvalidArgument);
}
