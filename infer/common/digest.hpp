// infer — FNV-1a, 64 bits: the digest ranks compare to prove they hold the same model and
// tokenizer (not a cryptographic hash: it tells files apart, it does not authenticate them;
// the ring's token does that).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace infer {

struct Fnv1a {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void floats(const std::vector<float>& v) {  // its length, then its values
    const std::uint64_t n = v.size();
    bytes(&n, sizeof n);
    bytes(v.data(), v.size() * sizeof(float));
  }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
};

}  // namespace infer
