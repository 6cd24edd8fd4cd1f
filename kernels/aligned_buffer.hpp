// ringattn kernels — a 64-byte-aligned buffer that only grows (the kernels' per-thread
// scratch and K/V panels: repeated calls of one shape allocate nothing).
#pragma once

#include <cstddef>
#include <cstdlib>

#include "ringattn/error.hpp"

namespace ringattn::kernels {

template <class T>
struct AlignedBuffer {
  T* data = nullptr;
  std::size_t size = 0;
  void resize(std::size_t n) {
    if (n <= size) return;
    std::free(data);
    data = static_cast<T*>(std::aligned_alloc(64, ((n * sizeof(T) + 63) / 64) * 64));
    if (!data) throw Error("kernels: out of memory for scratch");
    size = n;
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr; o.size = 0; }
};

}  // namespace ringattn::kernels
