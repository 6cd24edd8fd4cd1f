// infer — the safetensors reader. The header is untrusted input: nothing it says is used
// before it is checked against the file.
#include "safetensors.hpp"

#include <ringattn/blocks.hpp>
#include <ringattn/error.hpp>
#include <ringattn/tensor_types.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>

#include "../common/json.hpp"

namespace infer {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr std::uint64_t kMaxHeader = 100u << 20;  // as the reference implementation
// A bound on one file (mapped, never read whole): a wrong path (a disk image) fails at
// once with its size. Hugging Face shards are a few GB.
constexpr std::uint64_t kMaxFile = std::uint64_t{64} << 30;

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bits of `bytes` (2 or 4) little-endian bytes at p.
std::uint32_t bits_at(const std::byte* p, std::int64_t bytes) {
  if (bytes == 4) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) -> ringattn::FileError {
    return ringattn::FileError("weights " + path + ": " + what);
  };
  file_ = std::make_unique<MappedFile>(path, kMaxFile, "weights");
  const std::uint64_t size = file_->size();
  if (size < 8) throw fail("shorter than the 8-byte header length: not a safetensors file");
  std::uint64_t n = 0;
  std::memcpy(&n, file_->data(), 8);
  if (n > kMaxHeader || n > size - 8)
    throw fail("header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size) +
               " bytes) or 100 MiB: not a safetensors file, or truncated");
  Json header;
  try {
    header = parse_json(std::string_view(reinterpret_cast<const char*>(file_->data()) + 8, n));
  } catch (const std::runtime_error& e) {
    throw fail(std::string("header: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const std::uint64_t data_at = 8 + n, data_size = size - data_at;

  for (const auto& item : header.items()) {
    const std::string name = item.key();  // (a lambda may not capture a structured binding in clang 14)
    const Json& t = item.value();
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) { return fail("tensor \"" + name + "\": " + what); };
    const Json* dtype = json_field(t, "dtype");
    const Json* shape = json_field(t, "shape");
    const Json* offsets = json_field(t, "data_offsets");
    if (!dtype || !shape || !offsets) throw bad("needs dtype, shape and data_offsets");
    Entry e;
    const std::string dt = dtype->is_string() ? dtype->get<std::string>() : std::string("?");
    // The table of tensor types (ringattn/tensor_types.hpp) names what is read; any other
    // dtype is refused by its name.
    const ringattn::TensorType* type = ringattn::find_safetensors_type(dt);
    if (!type) throw bad("dtype " + dt + ": only " + ringattn::safetensors_type_names(" and ") + " are read");
    e.dtype = type->dtype;
    if (!shape->is_array() || shape->size() > 8) throw bad("shape must be an array of at most 8 sizes");
    if (!offsets->is_array() || offsets->size() != 2) throw bad("data_offsets must be [begin, end]");
    std::uint64_t elements = 1;
    try {
      for (const Json& d : *shape) {
        const std::int64_t x = json_int(d, "shape entry", 0, std::int64_t{1} << 40);
        e.shape.push_back(x);
        if (x != 0 && elements > (std::uint64_t{1} << 40) / static_cast<std::uint64_t>(x))
          throw std::runtime_error("shape has more than 2^40 elements");
        elements *= static_cast<std::uint64_t>(x);
      }
      e.begin = static_cast<std::uint64_t>(json_int((*offsets)[0], "data_offsets begin", 0, INT64_MAX));
      e.end = static_cast<std::uint64_t>(json_int((*offsets)[1], "data_offsets end", 0, INT64_MAX));
    } catch (const std::runtime_error& x) {
      throw bad(x.what());
    }
    if (e.begin > e.end || e.end > data_size)
      throw bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") outside the " +
                std::to_string(data_size) + " data bytes (truncated file?)");
    // Safetensors' types are one value a block (a test holds the table to it): elements
    // bytes of block_bytes each, each aligned to its size.
    const auto width = static_cast<std::uint64_t>(type->block_bytes);
    const std::optional<std::uint64_t> needs = type->row_bytes(static_cast<std::int64_t>(elements));
    if (!needs || e.end - e.begin != *needs)
      throw bad("holds " + std::to_string(e.end - e.begin) + " bytes, shape " + shape_text(e.shape) + " of " + dt +
                " needs " + (needs ? std::to_string(*needs) : "whole blocks of " + std::to_string(type->block_values)));
    e.begin += data_at;
    e.end += data_at;
    if (e.begin % width != 0)
      throw bad("its data starts at byte " + std::to_string(e.begin) + " of the file, not a multiple of " +
                std::to_string(width) + " (a header not padded as safetensors writers pad it)");
    entries_.emplace(name, std::move(e));
  }
}

TensorView SafetensorsFile::view(const std::string& name, std::span<const std::int64_t> shape) {
  const auto it = entries_.find(name);
  if (it == entries_.end())
    throw ringattn::FileError("weights " + path_ + ": no tensor \"" + name + "\" (expected shape " +
                              shape_text(shape) + "; does the file match the model's configuration?)");
  Entry& e = it->second;
  if (!std::equal(e.shape.begin(), e.shape.end(), shape.begin(), shape.end()))
    throw ringattn::FileError("weights " + path_ + ": tensor \"" + name + "\" has shape " + shape_text(e.shape) +
                              ", the model's configuration needs " + shape_text(shape));
  e.used = true;
  const ringattn::TensorType& type = ringattn::tensor_type(e.dtype);
  return {e.dtype, file_->data() + e.begin,
          (e.end - e.begin) / static_cast<std::uint64_t>(type.block_bytes) * static_cast<std::uint64_t>(type.block_values)};
}

std::vector<float> SafetensorsFile::take(const std::string& name, std::span<const std::int64_t> shape) {
  const TensorView t = view(name, shape);
  check_finite(t, "weights " + path_, name);
  std::vector<float> out = widen(t);
  release(name);
  return out;
}

void SafetensorsFile::release(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it != entries_.end()) file_->release(it->second.begin, it->second.end - it->second.begin);
}

ringattn::DType SafetensorsFile::dtype(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw ringattn::FileError("weights " + path_ + ": no tensor \"" + name + "\"");
  return it->second.dtype;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

std::vector<std::string> SafetensorsFile::unused() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : entries_)
    if (!e.used) names.push_back(name);
  return names;
}

namespace {

// Whether any of the n values of `Bits` at p has every bit of `exponent` set: one pass the
// compiler vectorizes (no branch per value), a chunk at a time so a bad tensor stops early.
template <class Bits>
bool any_exponent_all_ones(const std::byte* p, std::uint64_t n, Bits exponent) {
  constexpr std::uint64_t kChunk = 1 << 16;
  for (std::uint64_t first = 0; first < n; first += kChunk) {
    const std::uint64_t last = std::min(n, first + kChunk);
    unsigned bad = 0;
    for (std::uint64_t i = first; i < last; ++i) {
      Bits v;
      std::memcpy(&v, p + i * sizeof(Bits), sizeof(Bits));
      bad |= static_cast<unsigned>((v & exponent) == exponent);
    }
    if (bad) return true;
  }
  return false;
}

}  // namespace

void check_finite(const TensorView& t, const std::string& what, const std::string& name) {
  // Exponent all ones: inf or NaN, in each format's bits, where its row of the table of
  // tensor types says they are: each value's (fp32, bf16, fp16), or each block's fp16
  // scales (q8_0's d at byte 0, q4_k's d and dmin at 0 and 2, q6_k's d at 208).
  const ringattn::TensorType& type = ringattn::tensor_type(t.dtype);
  const auto blocks = t.elements / static_cast<std::uint64_t>(type.block_values);
  const auto size = static_cast<std::uint64_t>(type.block_bytes);
  bool bad = false;
  if (type.scales == 0 && type.block_bytes == 4) {
    bad = any_exponent_all_ones<std::uint32_t>(t.data, blocks, type.exponent);
  } else if (type.scales == 0 && type.block_bytes == 2) {
    bad = any_exponent_all_ones<std::uint16_t>(t.data, blocks, static_cast<std::uint16_t>(type.exponent));
  } else {
    for (std::uint64_t b = 0; b < blocks && !bad; ++b) {
      const std::byte* block = t.data + b * size;
      if (type.scales == 0) {
        bad = (bits_at(block, type.block_bytes) & type.exponent) == type.exponent;
      } else {
        for (int s = 0; s < type.scales; ++s) bad = bad || (bits_at(block + type.scale_at[s], 2) & 0x7C00u) == 0x7C00u;
      }
    }
  }
  if (bad) throw ringattn::FileError(what + ": tensor \"" + name + "\" holds NaN or inf");
}

std::vector<float> widen(const TensorView& t) {
  std::vector<float> out(static_cast<std::size_t>(t.elements));
  ringattn::decode_blocks(t.dtype, t.data, static_cast<std::int64_t>(t.elements), out.data());
  return out;
}

}  // namespace infer
