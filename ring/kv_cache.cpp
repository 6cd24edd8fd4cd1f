// ringattn::KVCache (include/ringattn/kv_cache.hpp): one layer's cached K/V rows of this
// rank, per sequence.
#include "ringattn/kv_cache.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "kernels/dispatch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"

namespace ringattn {

namespace {

struct Sequence {
  std::vector<std::int64_t> positions;
  std::vector<std::byte> k, v;  // rows x kv_heads x head_dim elements of the dtype
};

const kernels::SoftmaxOps& ops() { return kernels::ops_for(kernels::resolve_isa(std::nullopt)); }

constexpr std::int64_t kMaxHeadsOrDim = 1 << 16;  // as the ring's limits (RingLimits)

}  // namespace

struct KVCache::Impl {
  std::int64_t kv_heads, head_dim;
  DType dtype;
  std::map<std::int32_t, Sequence> seqs;
  std::int64_t rows = 0;

  // At most 2^32 elements and 2^34 bytes a row (the constructor bounds kv_heads and head_dim).
  std::size_t row_elements() const { return static_cast<std::size_t>(kv_heads * head_dim); }
  std::size_t row_bytes() const { return row_elements() * dtype_size(dtype); }

  // Elements of `rows` rows, or InvalidArgument (`call`) where rows x a row's bytes would
  // overflow: more than memory can hold, and a wrapped product would size the copy.
  std::size_t elements(std::size_t rows, const char* call) const {
    if (rows > SIZE_MAX / row_bytes())
      bad(std::string(call) + ": " + std::to_string(rows) + " rows of " + std::to_string(row_bytes()) +
          " bytes overflow the size of memory");
    return rows * row_elements();
  }

  [[noreturn]] void bad(const std::string& what) const { throw InvalidArgument("KV cache: " + what); }

  // Checks one sequence's new rows against what it holds; throws naming the first bad row.
  void check_rows(std::int32_t seq, std::span<const std::int64_t> pos, std::size_t first_row) const {
    if (seq < 0) bad("sequence id " + std::to_string(seq) + " must be >= 0");
    auto it = seqs.find(seq);
    std::int64_t last = it == seqs.end() || it->second.positions.empty() ? -1 : it->second.positions.back();
    for (std::size_t i = 0; i < pos.size(); ++i) {
      if (pos[i] < 0) bad("row " + std::to_string(first_row + i) + ": position " + std::to_string(pos[i]) + " < 0");
      if (pos[i] <= last)
        bad("row " + std::to_string(first_row + i) + " of sequence " + std::to_string(seq) + ": position " +
            std::to_string(pos[i]) + " does not follow the sequence's last cached position " + std::to_string(last) +
            " (positions of a sequence must increase, decode tokens after its prefill)");
      last = pos[i];
    }
  }

  void check_finite(const float* k, const float* v, std::size_t n) const {
    if (ops().has_non_finite_f32(k, static_cast<std::int64_t>(n)) ||
        ops().has_non_finite_f32(v, static_cast<std::int64_t>(n)))
      bad("K or V holds NaN or inf; the cache keeps finite rows only");
  }

  // Appends checked rows; k and v in the dtype already.
  // All-or-nothing: the three arrays are grown first (what may throw), then filled.
  void put(std::int32_t seq, std::span<const std::int64_t> pos, const std::byte* k, const std::byte* v) {
    auto& s = seqs[seq];
    const std::size_t n = pos.size() * row_bytes();  // checked by the caller (elements)
    auto grow = [](auto& vec, std::size_t more) {
      if (vec.capacity() - vec.size() < more) vec.reserve(std::max(vec.size() + more, 2 * vec.capacity()));
    };
    grow(s.positions, pos.size());
    grow(s.k, n);
    grow(s.v, n);
    s.positions.insert(s.positions.end(), pos.begin(), pos.end());
    s.k.insert(s.k.end(), k, k + n);
    s.v.insert(s.v.end(), v, v + n);
    rows += static_cast<std::int64_t>(pos.size());
  }

  // fp32 rows into the dtype (a copy for bf16), then put.
  void put_f32(std::int32_t seq, std::span<const std::int64_t> pos, const float* k, const float* v,
               std::vector<std::uint16_t>& scratch) {
    const std::size_t n = pos.size() * row_elements();  // checked by the caller (elements)
    if (dtype == DType::f32) {
      put(seq, pos, reinterpret_cast<const std::byte*>(k), reinterpret_cast<const std::byte*>(v));
      return;
    }
    scratch.resize(2 * n);
    to_bf16(k, scratch.data(), static_cast<std::int64_t>(n));
    to_bf16(v, scratch.data() + n, static_cast<std::int64_t>(n));
    put(seq, pos, reinterpret_cast<const std::byte*>(scratch.data()),
        reinterpret_cast<const std::byte*>(scratch.data() + n));
  }
};

KVCache::KVCache(std::int64_t kv_heads, std::int64_t head_dim, DType dtype) : impl_(std::make_unique<Impl>()) {
  if (kv_heads < 1 || head_dim < 1 || kv_heads > kMaxHeadsOrDim || head_dim > kMaxHeadsOrDim)
    throw InvalidArgument("KV cache: kv_heads = " + std::to_string(kv_heads) + " and head_dim = " +
                          std::to_string(head_dim) + " must be in 1.." + std::to_string(kMaxHeadsOrDim));
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw InvalidArgument("KV cache: dtype " + std::string(to_string(dtype)) + ": K and V are held in fp32 or bf16");
  impl_->kv_heads = kv_heads;
  impl_->head_dim = head_dim;
  impl_->dtype = dtype;
}

KVCache::KVCache(KVCache&&) noexcept = default;
KVCache& KVCache::operator=(KVCache&&) noexcept = default;
KVCache::~KVCache() = default;

std::int64_t KVCache::kv_heads() const { return impl_->kv_heads; }
std::int64_t KVCache::head_dim() const { return impl_->head_dim; }
DType KVCache::dtype() const { return impl_->dtype; }

void KVCache::append(std::int32_t sequence, std::span<const std::int64_t> positions, std::span<const float> k,
                     std::span<const float> v) {
  auto& im = *impl_;
  const std::size_t n = im.elements(positions.size(), "append");
  if (k.size() != n || v.size() != n)
    im.bad("k has " + std::to_string(k.size()) + " and v " + std::to_string(v.size()) + " elements, expected " +
           std::to_string(n) + " (" + std::to_string(positions.size()) + " rows)");
  im.check_rows(sequence, positions, 0);
  im.check_finite(k.data(), v.data(), n);
  std::vector<std::uint16_t> scratch;
  im.put_f32(sequence, positions, k.data(), v.data(), scratch);
}

void KVCache::append_packed(std::span<const std::int64_t> positions, std::span<const std::int32_t> documents,
                            std::span<const float> k, std::span<const float> v) {
  auto& im = *impl_;
  const std::size_t row = im.row_elements();
  const std::size_t n = im.elements(positions.size(), "append_packed");
  if (documents.size() != positions.size())
    im.bad(std::to_string(documents.size()) + " document ids for " + std::to_string(positions.size()) + " rows");
  if (k.size() != n || v.size() != n)
    im.bad("k has " + std::to_string(k.size()) + " and v " + std::to_string(v.size()) + " elements, expected " +
           std::to_string(n) + " (" + std::to_string(positions.size()) + " rows)");
  // Runs of one document: all checked before any is appended.
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t i = 0; i < documents.size();) {
    std::size_t j = i + 1;
    while (j < documents.size() && documents[j] == documents[i]) ++j;
    for (const auto& r : runs)
      if (documents[r.first] == documents[i])
        im.bad("rows of document " + std::to_string(documents[i]) + " are not contiguous (row " + std::to_string(i) +
               "); pass each document's rows together, as a packed prefill has them");
    im.check_rows(documents[i], positions.subspan(i, j - i), i);
    runs.emplace_back(i, j);
    i = j;
  }
  im.check_finite(k.data(), v.data(), n);
  std::vector<std::uint16_t> scratch;
  std::size_t done = 0;
  try {
    for (; done < runs.size(); ++done) {
      const auto [b, e] = runs[done];
      im.put_f32(documents[b], positions.subspan(b, e - b), k.data() + b * row, v.data() + b * row, scratch);
    }
  } catch (...) {  // out of memory part way: take back the runs already appended
    for (std::size_t i = 0; i < done; ++i) {
      const auto [b, e] = runs[i];
      truncate(documents[b], rows(documents[b]) - static_cast<std::int64_t>(e - b));
    }
    throw;
  }
}

void KVCache::append_raw(std::int32_t sequence, std::span<const std::int64_t> positions, const void* k, const void* v) {
  auto& im = *impl_;
  const auto n = static_cast<std::int64_t>(im.elements(positions.size(), "append_raw"));
  im.check_rows(sequence, positions, 0);
  if (n > 0 && (!k || !v)) im.bad("k or v is a null pointer");
  const bool bad = im.dtype == DType::bf16
                       ? ops().has_non_finite_bf16(static_cast<const std::uint16_t*>(k), n) ||
                             ops().has_non_finite_bf16(static_cast<const std::uint16_t*>(v), n)
                       : ops().has_non_finite_f32(static_cast<const float*>(k), n) ||
                             ops().has_non_finite_f32(static_cast<const float*>(v), n);
  if (bad) im.bad("K or V holds NaN or inf; the cache keeps finite rows only");
  im.put(sequence, positions, static_cast<const std::byte*>(k), static_cast<const std::byte*>(v));
}

void KVCache::reserve(std::int32_t sequence, std::int64_t rows) {
  auto& im = *impl_;
  if (sequence < 0 || rows < 0) im.bad("reserve: sequence and rows must be >= 0");
  const std::size_t bytes = im.elements(static_cast<std::size_t>(rows), "reserve") * dtype_size(im.dtype);
  auto& s = im.seqs[sequence];
  s.positions.reserve(static_cast<std::size_t>(rows));
  s.k.reserve(bytes);
  s.v.reserve(bytes);
}

void KVCache::shrink(std::int32_t sequence) {
  auto it = impl_->seqs.find(sequence);
  if (it == impl_->seqs.end()) return;
  auto& s = it->second;
  if (s.positions.empty()) {  // reserved here, but its rows went to other ranks
    impl_->seqs.erase(it);
    return;
  }
  s.positions.shrink_to_fit();
  s.k.shrink_to_fit();
  s.v.shrink_to_fit();
}

void KVCache::erase(std::int32_t sequence) {
  auto it = impl_->seqs.find(sequence);
  if (it == impl_->seqs.end()) return;
  impl_->rows -= static_cast<std::int64_t>(it->second.positions.size());
  impl_->seqs.erase(it);
}

void KVCache::truncate(std::int32_t sequence, std::int64_t keep) {
  auto it = impl_->seqs.find(sequence);
  if (keep < 0) impl_->bad("truncate: rows " + std::to_string(keep) + " < 0");
  if (it == impl_->seqs.end() || static_cast<std::int64_t>(it->second.positions.size()) <= keep) return;
  auto& s = it->second;
  impl_->rows -= static_cast<std::int64_t>(s.positions.size()) - keep;
  s.positions.resize(static_cast<std::size_t>(keep));
  s.k.resize(static_cast<std::size_t>(keep) * impl_->row_bytes());
  s.v.resize(static_cast<std::size_t>(keep) * impl_->row_bytes());
}

void KVCache::clear() {
  impl_->seqs.clear();
  impl_->rows = 0;
}

std::int64_t KVCache::rows() const { return impl_->rows; }

std::int64_t KVCache::rows(std::int32_t sequence) const {
  auto it = impl_->seqs.find(sequence);
  return it == impl_->seqs.end() ? 0 : static_cast<std::int64_t>(it->second.positions.size());
}

std::size_t KVCache::bytes() const { return 2 * static_cast<std::size_t>(impl_->rows) * impl_->row_bytes(); }

std::vector<std::int32_t> KVCache::sequences() const {
  std::vector<std::int32_t> out;
  for (const auto& [id, s] : impl_->seqs)
    if (!s.positions.empty()) out.push_back(id);
  return out;
}

KVCache::View KVCache::view(std::int32_t sequence) const {
  auto it = impl_->seqs.find(sequence);
  if (it == impl_->seqs.end()) return {};
  return {it->second.positions, it->second.k.data(), it->second.v.data()};
}

int decode_store_rank(std::int32_t sequence, std::int64_t position, int world_size) {
  if (world_size < 1) throw InvalidArgument("decode_store_rank: world size " + std::to_string(world_size) + " < 1");
  if (sequence < 0 || position < 0) throw InvalidArgument("decode_store_rank: sequence and position must be >= 0");
  return static_cast<int>((static_cast<std::uint64_t>(sequence) + static_cast<std::uint64_t>(position)) %
                          static_cast<std::uint64_t>(world_size));
}

}  // namespace ringattn
