// ringattn — what a K/V block says about itself on the wire, beyond net's frame header:
// the 32-byte prefix of a KV_BLOCK payload (net/wire.hpp) describes the call it belongs
// to and the rank whose rows it holds; the tags that follow are those rows' global
// positions. A receiver checks both before the block reaches the kernel, so a rank that
// calls with another spec, or a peer that sends positions out of order, fails the call
// with a message naming both sides instead of computing garbage.
//
// Prefix (little-endian, byte by byte):
//   0 heads u32 | 4 kv_heads u32 | 8 head_dim u32 | 12 mask u8 | 13 dtype u8 | 14 flags u8
//   15 reserved u8 | 16 window i64 | 24 scale f32 (bits) | 28 origin rank u32
// flags bit 0: the block carries a group (document id, i32) per row after the positions:
// the call has documents (packed batches). Every rank must agree, so it is part of the
// call's spec, compared like the others. Bit 1: the block belongs to a backward call
// (Ring::backward), so a rank in forward() meeting a rank in backward() fails naming both.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ring/block_layout.hpp"
#include "ringattn/ring.hpp"
#include "ringattn/types.hpp"

namespace ringattn::ring {

// The part of a call every rank must pass identically.
struct CallSpec {
  std::uint32_t heads = 0, kv_heads = 0, head_dim = 0;
  Mask mask;
  DType dtype = DType::f32;
  float scale = 0;  // resolved: never 0
  bool documents = false;  // the rows carry document ids (the blocks' groups column)
  bool backward = false;   // a Ring::backward call (its blocks carry gradients too)

  friend bool operator==(const CallSpec&, const CallSpec&) = default;
  std::string describe() const;  // "heads 8/2, head_dim 128, bf16, causal, scale 0.0884"
};

// The CallSpec of a call of `spec`, with the kernel's resolved scale (so every rank
// compares the same number) and whether its rows carry documents.
CallSpec call_spec(const AttentionSpec& spec, float resolved_scale, bool documents = false);

struct BlockPrefix {
  CallSpec spec;   // spec.documents: a group per row follows the positions
  int origin = 0;  // the rank whose rows these are
};

std::array<std::byte, kBlockPrefixBytes> encode_prefix(const BlockPrefix& p);
// "" or what is wrong with the bytes (unknown mask or dtype, reserved not 0).
std::string decode_prefix(std::span<const std::byte> bytes, BlockPrefix& out);

// "" if the specs agree, else one line naming the field and both ranks' values, e.g.
// "rank 1 calls with head_dim 64 but rank 0 (whose block this is) called with 128".
std::string compare_specs(const CallSpec& ours, int self, const CallSpec& theirs, int origin);

}  // namespace ringattn::ring
