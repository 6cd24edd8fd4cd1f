// infer — the safetensors reader. The header is untrusted input: nothing it says is used
// before it is checked against the file.
#include "safetensors.hpp"

#include <ringattn/blocks.hpp>
#include <ringattn/error.hpp>
#include <ringattn/half.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "json.hpp"

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

// Element i of an fp32, bf16 or fp16 tensor, as fp32 (exact).
float element(const TensorView& t, std::uint64_t i) {
  if (t.dtype == ringattn::DType::f32) {
    float f;
    std::memcpy(&f, t.data + i * 4, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, t.data + i * 2, 2);
  if (t.dtype == ringattn::DType::f16) return ringattn::from_f16(h);
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
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
    if (dt == "F32") e.dtype = ringattn::DType::f32;
    else if (dt == "BF16") e.dtype = ringattn::DType::bf16;
    else if (dt == "F16") e.dtype = ringattn::DType::f16;
    else throw bad("dtype " + dt + ": only F32, BF16 and F16 are read");
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
    const std::uint64_t width = ringattn::dtype_size(e.dtype);
    if (e.end - e.begin != elements * width)
      throw bad("holds " + std::to_string(e.end - e.begin) + " bytes, shape " + shape_text(e.shape) + " of " + dt +
                " needs " + std::to_string(elements * width));
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
  return {e.dtype, file_->data() + e.begin, (e.end - e.begin) / ringattn::dtype_size(e.dtype)};
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

void check_finite(const TensorView& t, const std::string& what, const std::string& name) {
  // Exponent all ones: inf or NaN, in each format's bits.
  bool bad = false;
  if (t.dtype == ringattn::DType::f32) {
    for (std::uint64_t i = 0; i < t.elements && !bad; ++i) bad = !std::isfinite(element(t, i));
  } else if (t.dtype == ringattn::DType::q8_0 || t.dtype == ringattn::DType::q4_k || t.dtype == ringattn::DType::q6_k) {
    // The blocks' fp16 scales: q8_0's d at byte 0, q4_k's d and dmin at 0 and 2, q6_k's d at 208.
    const std::int64_t n = ringattn::block_values(t.dtype), size = ringattn::block_bytes(t.dtype);
    const std::vector<int> at = t.dtype == ringattn::DType::q4_k   ? std::vector<int>{0, 2}
                                : t.dtype == ringattn::DType::q6_k ? std::vector<int>{208}
                                                                   : std::vector<int>{0};
    for (std::uint64_t b = 0; b < t.elements / static_cast<std::uint64_t>(n) && !bad; ++b)
      for (const int o : at) {
        std::uint16_t h;
        std::memcpy(&h, t.data + b * static_cast<std::uint64_t>(size) + o, 2);
        bad = bad || (h & 0x7C00) == 0x7C00;
      }
  } else {
    const std::uint16_t mask = t.dtype == ringattn::DType::f16 ? 0x7C00 : 0x7F80;
    for (std::uint64_t i = 0; i < t.elements && !bad; ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      bad = (h & mask) == mask;
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
