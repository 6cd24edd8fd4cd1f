// embed.cpp — ring attention inside a job of your own, with libringattn.
//
// Every rank runs this same program. It connects the ring once (rank, world size and
// how to find the others come from the launcher's environment), then calls forward()
// for three "layers" of different shapes and masks on its own rows of one sequence,
// and checks them against dense float64 attention that it computes itself.
//
//   c++ -std=c++20 -O2 embed.cpp $(pkg-config --cflags --libs ringattn) -o embed
//   RINGATTN_MASTER=127.0.0.1:29500 RINGATTN_TOKEN=$(openssl rand -hex 16) mpirun -n 3 ./embed
#include <ringattn/error.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/ring.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

struct Layer {
  std::int64_t tokens, heads, kv_heads, head_dim;
  ringattn::Mask mask;
};

// The whole sequence's tensor [tokens, heads, dim], the same on every rank: same seed and
// same standard library (std::normal_distribution's algorithm is the library's choice).
std::vector<float> random_tensor(std::int64_t tokens, std::int64_t heads, std::int64_t dim, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> t(static_cast<std::size_t>(tokens * heads * dim));
  for (float& x : t) x = normal(gen);
  return t;
}

// This rank's rows of a [tokens, heads, dim] tensor, in the order of `positions`.
std::vector<float> rows_of(const std::vector<float>& t, const std::vector<std::int64_t>& positions,
                           std::int64_t heads, std::int64_t dim) {
  const std::int64_t row = heads * dim;
  std::vector<float> out;
  out.reserve(positions.size() * static_cast<std::size_t>(row));
  for (std::int64_t p : positions) out.insert(out.end(), t.begin() + p * row, t.begin() + (p + 1) * row);
  return out;
}

// Dense attention in float64 for the rows at `positions` over every key of the sequence;
// returns the largest difference from the ring's o and lse.
double max_error(const Layer& L, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<std::int64_t>& positions,
                 const std::vector<float>& o, const std::vector<float>& lse) {
  const std::int64_t H = L.heads, KH = L.kv_heads, D = L.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  double err = 0;
  auto note = [&err](double e) { err = std::isnan(e) ? INFINITY : std::max(err, e); };  // a NaN fails
  std::vector<double> score(static_cast<std::size_t>(L.tokens)), acc(static_cast<std::size_t>(D));
  for (std::size_t r = 0; r < positions.size(); ++r) {
    const std::int64_t i = positions[r];
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t kh = h / (H / KH);
      const float* qi = &q[static_cast<std::size_t>((i * H + h) * D)];
      double m = -INFINITY;
      for (std::int64_t j = 0; j < L.tokens; ++j) {
        if (!L.mask.visible(i, j)) continue;
        const float* kj = &k[static_cast<std::size_t>((j * KH + kh) * D)];
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += static_cast<double>(qi[d]) * kj[d];
        score[j] = s * scale;
        m = std::max(m, score[j]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < L.tokens; ++j) {
        if (!L.mask.visible(i, j)) continue;
        const double p = std::exp(score[j] - m);
        l += p;
        const float* vj = &v[static_cast<std::size_t>((j * KH + kh) * D)];
        for (std::int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
      }
      const float* oi = &o[(r * H + h) * D];
      for (std::int64_t d = 0; d < D; ++d) note(std::abs(oi[d] - (l > 0 ? acc[d] / l : 0.0)));
      const double want = l > 0 ? m + std::log(l) : -INFINITY;  // -inf: the row sees no key
      const double got = lse[r * H + h];
      note(got == want ? 0.0 : std::abs(got - want));
    }
  }
  return err;
}

}  // namespace

int main() {
  try {
    // RINGATTN_RANK/WORLD_SIZE or what Slurm, Open MPI, PMI or torchrun set; the others'
    // addresses (RINGATTN_PEERS) or a rendezvous (RINGATTN_MASTER, MASTER_ADDR/PORT);
    // the shared secret (RINGATTN_TOKEN or RINGATTN_TOKEN_FILE).
    ringattn::Ring ring = ringattn::Ring::connect(ringattn::RingOptions::from_env());
    const int rank = ring.rank(), world = ring.world_size();

    const Layer layers[] = {
        {300, 4, 2, 64, ringattn::Mask::causal()},             // GQA, causal
        {257, 8, 1, 32, ringattn::Mask::sliding_window(50)},   // MQA, sliding window
        {300, 4, 4, 128, ringattn::Mask::none()},              // MHA, bidirectional
    };
    double worst = 0;
    for (int n = 0; n < 3; ++n) {
      const Layer& L = layers[n];
      const auto q = random_tensor(L.tokens, L.heads, L.head_dim, 100 + n);
      const auto k = random_tensor(L.tokens, L.kv_heads, L.head_dim, 200 + n);
      const auto v = random_tensor(L.tokens, L.kv_heads, L.head_dim, 300 + n);
      // Zigzag: every rank gets an equal share of the causal work.
      const std::vector<std::int64_t> positions =
          ringattn::shard_positions(ringattn::Layout::zigzag, L.tokens, world, rank).materialize();
      const auto my_q = rows_of(q, positions, L.heads, L.head_dim);
      const auto my_k = rows_of(k, positions, L.kv_heads, L.head_dim);
      const auto my_v = rows_of(v, positions, L.kv_heads, L.head_dim);
      std::vector<float> o(my_q.size()), lse(positions.size() * static_cast<std::size_t>(L.heads));

      ringattn::AttentionSpec spec;
      spec.heads = L.heads;
      spec.kv_heads = L.kv_heads;
      spec.head_dim = L.head_dim;
      spec.mask = L.mask;
      const ringattn::ForwardStats st = ring.forward({spec, my_q, my_k, my_v, positions}, o, lse);

      const double err = max_error(L, q, k, v, positions, o, lse);
      worst = std::max(worst, err);
      std::printf("rank %d/%d layer %d (%s, %lld rows): max error %.3g, %.4f s\n", rank, world, n,
                  ringattn::to_string(L.mask).c_str(), static_cast<long long>(positions.size()), err, st.seconds);
    }
    ring.close();
    if (!(worst <= 2e-5)) {
      std::fprintf(stderr, "rank %d: max error %.3g exceeds 2e-5\n", rank, worst);
      return 1;
    }
    return 0;
  } catch (const ringattn::NetworkError& e) {  // a peer died, stalled or disagreed
    std::fprintf(stderr, "ring failed: %s\n", e.what());
    return 2;
  } catch (const ringattn::Error& e) {  // bad options or arguments
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  }
}
