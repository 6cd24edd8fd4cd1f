// Packed variable-length batches end to end: `ringattn verify --docs` and `ringattn run
// --cu-seqlens` on real processes against float64 dense attention within each document.
#include <doctest/doctest.h>

#include <fstream>

#include "ringattn/packing.hpp"
#include "src/oracle/reference.hpp"
#include "tests/integration/ring_case.hpp"

namespace ringattn::itest {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::vector<std::string> verify_docs(const std::string& docs, int nodes, std::vector<std::string> more) {
  std::vector<std::string> a = {"verify", "--docs", docs, "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                                "--nodes", std::to_string(nodes), "--timeout", "20", "--quiet"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("documents: verify --docs is exact at P = 2 and 3 (causal, window; fp32 and bf16)") {
  // Long documents over several shards, tiny ones (1 and 2 tokens, shorter than 2P).
  const std::string docs = "100,37,900,1,2,260";
  struct Case {
    int nodes;
    std::vector<std::string> more;
    const char* verdict;
  };
  const Case cases[] = {{2, {"--causal"}, "-> exact"},
                        {3, {"--causal"}, "-> exact"},
                        {3, {"--window", "50"}, "-> exact"},
                        {2, {}, "-> exact"},
                        {3, {"--causal", "--dtype", "bf16"}, "within bf16 tolerance"}};
  for (const auto& c : cases) {
    const Outcome o = run_ringattn(verify_docs(docs, c.nodes, c.more));
    INFO("P=" << c.nodes << " " << (c.more.empty() ? "none" : c.more[0]) << "\n" << o.out << o.err);
    CHECK(o.exit_code == 0);
    CHECK(has(o.out, "packed: 6 documents"));
    CHECK(has(o.out, c.verdict));
  }
}

TEST_CASE("documents: run --cu-seqlens writes O and lse equal to per-document float64 attention") {
  const std::vector<std::int64_t> cu = {0, 100, 137, 1037, 1038, 1040, 1203};
  const Shape shape{cu.back(), 4, 2, 64};
  ScratchDir dir;
  const Inputs in(shape, 17, DType::f32);
  in.write(dir);
  {
    std::ofstream f(dir.file("cu.txt"));
    f << "0, 100, 137,1037\n1038,1040,1203\n";  // commas, spaces and newlines
  }
  Job job;
  job.nodes = 3;
  job.mask = Mask::causal();
  job.extra = {"--cu-seqlens", dir.file("cu.txt")};
  const RingOutput r = run_job(dir, job);
  INFO(r.outcome.err);
  REQUIRE(r.outcome.exit_code == 0);
  const auto ids = document_ids(cu);
  Reference ref;
  ref.o.resize(in.q.size());
  ref.lse.resize(static_cast<std::size_t>(shape.tokens * shape.heads));
  const auto all = Positions::contiguous(0, shape.tokens);
  oracle::dense_attention_f64({shape.heads, shape.kv_heads, shape.head_dim, job.mask, 0.0}, in.q.data(), all,
                              in.k.data(), in.v.data(), all, ref.o.data(), ref.lse.data(), ids.data(), ids.data());
  CHECK(max_abs_error(r.o, ref.o) <= 2e-5);
  CHECK(max_abs_error(r.lse, ref.lse) <= 2e-5);
  // Without the documents the answer is a different one: the masks really were applied.
  const Reference whole = dense_reference(in, job.mask);
  CHECK(max_abs_error(r.o, whole.o) > 1e-2);

  // A file that does not cover the inputs is refused before any node starts.
  {
    std::ofstream f(dir.file("short.txt"));
    f << "0,100,137\n";
  }
  job.extra = {"--cu-seqlens", dir.file("short.txt")};
  const RingOutput bad = run_job(dir, job);
  CHECK(bad.outcome.exit_code != 0);
  CHECK(has(bad.outcome.err, "covers 137 tokens but Q"));
  {
    std::ofstream f(dir.file("junk.txt"));
    f << "0,100,x7\n";
  }
  job.extra = {"--cu-seqlens", dir.file("junk.txt")};
  const RingOutput junk = run_job(dir, job);
  CHECK(junk.outcome.exit_code != 0);
  CHECK(has(junk.outcome.err, "entry 2 = 'x7'"));
}

TEST_CASE("decode: verify --decode K generates the last K tokens of each document exactly at P = 1..4") {
  // Every document's last K tokens go through Ring::decode on the ranks' KV caches; the
  // result must still be per-document float64 attention.
  const std::string docs = "100,37,900,2,260";
  struct Case {
    int nodes;
    std::vector<std::string> more;
    const char* verdict;
  };
  const Case cases[] = {{1, {"--causal", "--decode", "1"}, "-> exact"},
                        {2, {"--causal", "--decode", "1"}, "-> exact"},
                        {3, {"--causal", "--decode", "1"}, "-> exact"},
                        {4, {"--window", "40", "--decode", "1"}, "-> exact"},
                        {3, {"--causal", "--dtype", "bf16", "--decode", "1"}, "within bf16 tolerance"}};
  for (const auto& c : cases) {
    const Outcome o = run_ringattn(verify_docs(docs, c.nodes, c.more));
    INFO("P=" << c.nodes << " " << c.more[0] << "\n" << o.out << o.err);
    CHECK(o.exit_code == 0);
    CHECK(has(o.out, "the last 1 tokens of each decoded"));
    CHECK(has(o.out, c.verdict));
  }
  // More steps than one, and the whole sequence as one document.
  for (int nodes : {2, 3}) {
    const Outcome o = run_ringattn({"verify", "--seq", "500", "--decode", "12", "--causal", "--heads", "4", "--kv-heads",
                                    "1", "--head-dim", "64", "--nodes", std::to_string(nodes), "--timeout", "20", "--quiet"});
    INFO(o.out << o.err);
    CHECK(o.exit_code == 0);
    CHECK(has(o.out, "-> exact"));
  }
  // A generated token sees only the tokens before it: no mask is refused, and so is a
  // document without a prompt.
  const Outcome none = run_ringattn(verify_docs(docs, 2, {"--decode", "2"}));
  CHECK(none.exit_code == 2);
  CHECK(has(none.err, "needs --causal or --window"));
  const Outcome empty = run_ringattn(verify_docs(docs, 2, {"--causal", "--decode", "2"}));
  CHECK(empty.exit_code == 2);
  CHECK(has(empty.err, "document 3 has 2 tokens"));
}

}  // namespace ringattn::itest
