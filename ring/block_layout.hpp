// ringattn — the one owner of a row block's payload layout (the K/V blocks of the ring's
// passes and decode's queries, carried as opaque DATA frames: net/wire.hpp): where the
// prefix, the tags, the groups and the bodies start and how many bytes the whole takes.
// A receiver asks it how many rows a payload of the size that came holds (rows_of: a size
// no whole number of rows makes is refused), the schedules where to write and read; nobody
// else spells out the arithmetic.
//
//   [0, 32)                prefix: the caller's description of the call (ring/block_format)
//   [32, 32 + 8 rows)      tags:   each row's global position, i64 little-endian
//   then 4 rows, or none   groups: each row's document (or sequence) id, i32 little-endian
//   then `bodies` x        body:   rows x cols elements of dtype, row-major
//        rows x cols x esz         (K then V for a KV_BLOCK; the tokens' q|k|v for a QUERY)
//
// Sizes are computed overflow-checked from 32-bit rows and cols: `fits` is false when the
// payload cannot be represented, and a decoder then refuses the frame.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringattn/byte_order.hpp"
#include "ringattn/types.hpp"

namespace ringattn::ring {

inline constexpr std::size_t kBlockPrefixBytes = 32;

struct BlockLayout {
  static constexpr std::size_t kTagBytes = 8, kGroupBytes = 4;

  std::uint64_t rows = 0;
  std::uint64_t body_bytes = 0;  // one body: rows x cols x esz
  std::uint64_t row_body_bytes = 0;  // one row of one body: cols x esz
  bool groups = false;
  unsigned bodies = 1;
  bool fits = true;

  // A KV_BLOCK: K and V bodies, the group column when the call has documents.
  static BlockLayout kv(DType dtype, std::uint32_t cols, std::uint32_t rows, bool groups) {
    return make(dtype, cols, rows, groups, 2);
  }
  // A QUERY: one body of each token's concatenated q|k|v, always with the group column.
  static BlockLayout query(DType dtype, std::uint32_t cols, std::uint32_t rows) {
    return make(dtype, cols, rows, true, 1);
  }

  // The rows of a payload of `bytes` laid out like `shape` (its rows ignored): false when
  // no whole number of rows up to `max_rows` gives exactly those bytes.
  static bool rows_of(const BlockLayout& shape, std::uint64_t bytes, std::uint32_t max_rows, std::uint32_t& rows) {
    const std::uint64_t per_row = kTagBytes + (shape.groups ? kGroupBytes : 0) + shape.row_body_bytes * shape.bodies;
    if (!shape.fits || bytes < kBlockPrefixBytes || (bytes - kBlockPrefixBytes) % per_row != 0) return false;
    const std::uint64_t n = (bytes - kBlockPrefixBytes) / per_row;
    if (n > max_rows) return false;
    rows = static_cast<std::uint32_t>(n);
    return true;
  }

  std::size_t tags() const { return kBlockPrefixBytes; }
  std::size_t group_offset() const { return tags() + static_cast<std::size_t>(rows) * kTagBytes; }
  // Prefix, tags and groups: what precedes the first body.
  std::size_t head_bytes() const { return group_offset() + (groups ? static_cast<std::size_t>(rows) * kGroupBytes : 0); }
  std::size_t body(unsigned i) const { return head_bytes() + i * static_cast<std::size_t>(body_bytes); }
  // The whole payload; 0 when it does not fit.
  std::uint64_t bytes() const { return fits ? head_bytes() + std::uint64_t{bodies} * body_bytes : 0; }

  void put_tag(std::byte* payload, std::size_t row, std::int64_t position) const {
    put_le<std::uint64_t>(payload + tags() + row * kTagBytes, static_cast<std::uint64_t>(position));
  }
  std::int64_t tag(const std::byte* payload, std::size_t row) const {
    return static_cast<std::int64_t>(get_le<std::uint64_t>(payload + tags() + row * kTagBytes));
  }
  void put_group(std::byte* payload, std::size_t row, std::int32_t id) const {
    put_le<std::uint32_t>(payload + group_offset() + row * kGroupBytes, static_cast<std::uint32_t>(id));
  }
  std::int32_t group(const std::byte* payload, std::size_t row) const {
    return static_cast<std::int32_t>(get_le<std::uint32_t>(payload + group_offset() + row * kGroupBytes));
  }

 private:
  static BlockLayout make(DType dtype, std::uint32_t cols, std::uint32_t rows, bool groups, unsigned bodies) {
    BlockLayout l;
    l.rows = rows;
    l.groups = groups;
    l.bodies = bodies;
    std::uint64_t body = 0, all = 0, total = 0;
    const std::uint64_t head = kBlockPrefixBytes + std::uint64_t{rows} * (kTagBytes + (groups ? kGroupBytes : 0));
    l.fits = !__builtin_mul_overflow(std::uint64_t{rows}, std::uint64_t{cols}, &body) &&
             !__builtin_mul_overflow(body, std::uint64_t{dtype_size(dtype)}, &body) &&
             !__builtin_mul_overflow(body, std::uint64_t{bodies}, &all) && !__builtin_add_overflow(head, all, &total);
    l.body_bytes = l.fits ? body : 0;
    l.fits = l.fits && !__builtin_mul_overflow(std::uint64_t{cols}, std::uint64_t{dtype_size(dtype)}, &l.row_body_bytes);
    return l;
  }
};

}  // namespace ringattn::ring
