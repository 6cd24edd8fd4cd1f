#include "ring/block_format.hpp"

#include <cstdio>
#include <cstring>

#include "ringattn/byte_order.hpp"

namespace ringattn::ring {


std::string CallSpec::describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "heads %u/%u, head_dim %u, %s, %s, scale %g%s%s", heads, kv_heads, head_dim,
                std::string(to_string(dtype)).c_str(), to_string(mask).c_str(), static_cast<double>(scale),
                documents ? ", documents" : "", backward ? ", backward" : "");
  return buf;
}

CallSpec call_spec(const AttentionSpec& spec, float resolved_scale, bool documents) {
  CallSpec cs;
  cs.heads = static_cast<std::uint32_t>(spec.heads);
  cs.kv_heads = static_cast<std::uint32_t>(spec.kv_heads);
  cs.head_dim = static_cast<std::uint32_t>(spec.head_dim);
  cs.mask = spec.mask;
  cs.dtype = spec.dtype;
  cs.scale = resolved_scale;
  cs.documents = documents;
  return cs;
}

std::array<std::byte, kBlockPrefixBytes> encode_prefix(const BlockPrefix& p) {
  std::array<std::byte, kBlockPrefixBytes> b{};
  put_le<std::uint32_t>(b.data() + 0, p.spec.heads);
  put_le<std::uint32_t>(b.data() + 4, p.spec.kv_heads);
  put_le<std::uint32_t>(b.data() + 8, p.spec.head_dim);
  put_le<std::uint8_t>(b.data() + 12, static_cast<std::uint8_t>(p.spec.mask.kind));
  put_le<std::uint8_t>(b.data() + 13, static_cast<std::uint8_t>(p.spec.dtype));
  put_le<std::uint8_t>(b.data() + 14, static_cast<std::uint8_t>((p.spec.documents ? 1 : 0) | (p.spec.backward ? 2 : 0)));
  put_le<std::uint64_t>(b.data() + 16, static_cast<std::uint64_t>(p.spec.mask.window));
  std::uint32_t scale_bits;
  std::memcpy(&scale_bits, &p.spec.scale, 4);
  put_le<std::uint32_t>(b.data() + 24, scale_bits);
  put_le<std::uint32_t>(b.data() + 28, static_cast<std::uint32_t>(p.origin));
  return b;
}

std::string decode_prefix(std::span<const std::byte> b, BlockPrefix& out) {
  if (b.size() < kBlockPrefixBytes) return "block prefix of " + std::to_string(b.size()) + " bytes";
  BlockPrefix p;
  p.spec.heads = get_le<std::uint32_t>(b.data() + 0);
  p.spec.kv_heads = get_le<std::uint32_t>(b.data() + 4);
  p.spec.head_dim = get_le<std::uint32_t>(b.data() + 8);
  const auto mask = get_le<std::uint8_t>(b.data() + 12);
  const auto dtype = get_le<std::uint8_t>(b.data() + 13);
  const auto flags = get_le<std::uint8_t>(b.data() + 14);
  if (mask > static_cast<std::uint8_t>(MaskKind::window)) return "block prefix: unknown mask kind " + std::to_string(mask);
  if (dtype > static_cast<std::uint8_t>(DType::bf16)) return "block prefix: unknown dtype " + std::to_string(dtype);
  if (flags > 3) return "block prefix: unknown flags " + std::to_string(flags);
  if (get_le<std::uint8_t>(b.data() + 15) != 0) return "block prefix: reserved byte is not 0";
  p.spec.mask.kind = static_cast<MaskKind>(mask);
  p.spec.mask.window = static_cast<std::int64_t>(get_le<std::uint64_t>(b.data() + 16));
  p.spec.dtype = static_cast<DType>(dtype);
  const std::uint32_t scale_bits = get_le<std::uint32_t>(b.data() + 24);
  std::memcpy(&p.spec.scale, &scale_bits, 4);
  p.origin = static_cast<int>(get_le<std::uint32_t>(b.data() + 28));
  p.spec.documents = flags & 1;
  p.spec.backward = (flags & 2) != 0;
  out = p;
  return {};
}

std::string compare_specs(const CallSpec& a, int self, const CallSpec& b, int origin) {
  const std::string me = "rank " + std::to_string(self) + " calls with ";
  const std::string them = " but rank " + std::to_string(origin) + " (whose block this is) called with ";
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  if (a.backward != b.backward) {
    auto call = [](bool bwd) { return std::string(bwd ? "backward" : "forward"); };
    return "rank " + std::to_string(self) + " is in " + call(a.backward) + " but rank " + std::to_string(origin) +
           " (whose block this is) is in " + call(b.backward) + " (the ranks are not making the same calls)";
  }
  if (a.heads != b.heads) return me + "heads " + num(a.heads) + them + num(b.heads);
  if (a.kv_heads != b.kv_heads) return me + "kv_heads " + num(a.kv_heads) + them + num(b.kv_heads);
  if (a.head_dim != b.head_dim) return me + "head_dim " + num(a.head_dim) + them + num(b.head_dim);
  if (a.dtype != b.dtype)
    return me + "dtype " + std::string(to_string(a.dtype)) + them + std::string(to_string(b.dtype));
  if (a.mask.kind != b.mask.kind || (a.mask.kind == MaskKind::window && a.mask.window != b.mask.window))
    return me + "mask " + to_string(a.mask) + them + to_string(b.mask);
  if (a.documents != b.documents) {
    auto docs = [](bool d) { return std::string(d ? "documents" : "no documents"); };
    return me + docs(a.documents) + them + docs(b.documents);
  }
  if (a.scale != b.scale) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "scale %.9g%s%.9g", static_cast<double>(a.scale), them.c_str(), static_cast<double>(b.scale));
    return me + buf;
  }
  return {};
}

}  // namespace ringattn::ring
