// infer — the safetensors reader. The header is untrusted input: nothing it says is used
// before it is checked against the file.
#include "safetensors.hpp"

#include <ringattn/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "input_file.hpp"
#include "json.hpp"

namespace infer {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

constexpr std::uint64_t kMaxHeader = 100u << 20;  // as the reference implementation
// The whole file is read into memory: bounded, so that a wrong path (a disk image, a
// device) fails at once with its size instead of exhausting memory.
constexpr std::uint64_t kMaxFile = std::uint64_t{64} << 30;

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& what) -> ringattn::FileError {
    return ringattn::FileError("weights " + path + ": " + what);
  };
  const std::vector<char> bytes = read_input_file(path, kMaxFile, "weights");
  if (bytes.size() < 8) throw fail("shorter than the 8-byte header length: not a safetensors file");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeader || n > bytes.size() - 8)
    throw fail("header length " + std::to_string(n) + " exceeds the file (" + std::to_string(bytes.size()) +
               " bytes) or 100 MiB: not a safetensors file, or truncated");
  Json header;
  try {
    header = parse_json(std::string_view(bytes.data() + 8, n));
  } catch (const std::runtime_error& e) {
    throw fail(std::string("header: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  data_.assign(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  const std::uint64_t size = data_.size();

  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& what) { return fail("tensor \"" + name + "\": " + what); };
    const Json* dtype = json_field(t, "dtype");
    const Json* shape = json_field(t, "shape");
    const Json* offsets = json_field(t, "data_offsets");
    if (!dtype || !shape || !offsets) throw bad("needs dtype, shape and data_offsets");
    if (!dtype->is_string() || dtype->get<std::string>() != "F32")
      throw bad("dtype " + (dtype->is_string() ? dtype->get<std::string>() : std::string("?")) +
                ", only F32 is read (convert with numpy: .astype(np.float32))");
    if (!shape->is_array() || shape->size() > 8) throw bad("shape must be an array of at most 8 sizes");
    if (!offsets->is_array() || offsets->size() != 2) throw bad("data_offsets must be [begin, end]");
    Entry e;
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
    if (e.begin > e.end || e.end > size)
      throw bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") outside the " +
                std::to_string(size) + " data bytes (truncated file?)");
    if (e.end - e.begin != elements * 4)
      throw bad("holds " + std::to_string(e.end - e.begin) + " bytes, shape " + shape_text(e.shape) + " needs " +
                std::to_string(elements * 4));
    entries_.emplace(name, std::move(e));
  }
}

std::vector<float> SafetensorsFile::take(const std::string& name, std::span<const std::int64_t> shape) {
  const auto it = entries_.find(name);
  if (it == entries_.end())
    throw ringattn::FileError("weights " + path_ + ": no tensor \"" + name + "\" (expected shape " +
                              shape_text(shape) + "; does the file match --layers and --untied?)");
  Entry& e = it->second;
  if (!std::equal(e.shape.begin(), e.shape.end(), shape.begin(), shape.end()))
    throw ringattn::FileError("weights " + path_ + ": tensor \"" + name + "\" has shape " + shape_text(e.shape) +
                              ", the model's configuration needs " + shape_text(shape));
  std::vector<float> out((e.end - e.begin) / 4);
  if (!out.empty()) std::memcpy(out.data(), data_.data() + e.begin, e.end - e.begin);
  e.used = true;
  return out;
}

std::vector<std::string> SafetensorsFile::unused() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : entries_)
    if (!e.used) names.push_back(name);
  return names;
}

}  // namespace infer
