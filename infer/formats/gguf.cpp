// infer — the GGUF reader (gguf.hpp). The file is untrusted input: every count and length
// is checked against the bytes that remain before anything is allocated from it.
#include "gguf.hpp"

#include <ringattn/error.hpp>
#include <ringattn/tensor_types.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

namespace infer {

static_assert(std::endian::native == std::endian::little, "GGUF data is little-endian");

namespace {

constexpr std::uint64_t kMaxFile = std::uint64_t{512} << 30;  // mapped, never read whole
constexpr std::uint64_t kMaxCount = 1u << 24;                 // metadata keys, tensors, array items
constexpr std::uint64_t kMaxString = 1u << 26;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor of `elements` values of type t whose rows (innermost dimension) are
// ne0 values; nullopt if a row is not whole blocks of t.
std::optional<std::uint64_t> tensor_bytes(const ringattn::TensorType& t, std::int64_t ne0, std::int64_t elements) {
  const std::optional<std::uint64_t> row = t.row_bytes(ne0);
  const auto rows = static_cast<std::uint64_t>(elements / ne0);
  if (!row || (rows != 0 && *row > UINT64_MAX / rows)) return std::nullopt;
  return *row * rows;
}

// Reads little-endian values off the mapped bytes, never past the end.
class Cursor {
 public:
  Cursor(const std::byte* p, std::uint64_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  std::uint64_t at() const { return at_; }
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string text(const std::string& what) {
    const auto len = get<std::uint64_t>(what + " length");
    if (len > kMaxString) throw fail(what + ": a string of " + std::to_string(len) + " bytes");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), static_cast<std::size_t>(len));
    at_ += len;
    return s;
  }
  void need(std::uint64_t bytes, const std::string& what) const {
    if (bytes > n_ - at_)
      throw fail(what + " runs past the end of the file (at byte " + std::to_string(at_) + " of " +
                 std::to_string(n_) + "): truncated or not a GGUF file");
  }
  ringattn::FileError fail(const std::string& what) const { return ringattn::FileError("model " + path_ + ": " + what); }

 private:
  const std::byte* p_;
  std::uint64_t n_, at_ = 0;
  const std::string& path_;
};

// One scalar of metadata type `type` as a double or an integer.
GgufFile::Value scalar(Cursor& c, std::uint32_t type, const std::string& what) {
  switch (type) {
    case 0: return std::int64_t{c.get<std::uint8_t>(what)};
    case 1: return std::int64_t{c.get<std::int8_t>(what)};
    case 2: return std::int64_t{c.get<std::uint16_t>(what)};
    case 3: return std::int64_t{c.get<std::int16_t>(what)};
    case 4: return std::int64_t{c.get<std::uint32_t>(what)};
    case 5: return std::int64_t{c.get<std::int32_t>(what)};
    case 6: return double{c.get<float>(what)};
    case 7: {
      const auto b = c.get<std::uint8_t>(what);
      if (b > 1) throw c.fail(what + ": a bool of " + std::to_string(b));
      return b == 1;
    }
    case 8: return c.text(what);
    case 10: {
      const auto u = c.get<std::uint64_t>(what);
      if (u > static_cast<std::uint64_t>(INT64_MAX)) throw c.fail(what + ": a u64 above 2^63");
      return static_cast<std::int64_t>(u);
    }
    case 11: return c.get<std::int64_t>(what);
    case 12: return c.get<double>(what);
    default: throw c.fail(what + ": unknown value type " + std::to_string(type));
  }
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : path_(path) {
  file_ = std::make_unique<MappedFile>(path, kMaxFile, "model");
  data_ = file_->data();
  size_ = file_->size();
  parse();
}

GgufFile::GgufFile(std::span<const std::byte> bytes, const std::string& name)
    : path_(name), data_(bytes.data()), size_(bytes.size()) {
  parse();
}

void GgufFile::parse() {
  Cursor c(data_, size_, path_);
  c.need(4, "the magic");
  if (std::memcmp(data_, "GGUF", 4) != 0) throw c.fail("not a GGUF file (no \"GGUF\" magic)");
  c.get<std::uint32_t>("magic");
  version_ = c.get<std::uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    throw c.fail("GGUF version " + std::to_string(version_) + ": versions 2 and 3 are read");
  const auto tensors = c.get<std::uint64_t>("tensor count"), keys = c.get<std::uint64_t>("metadata count");
  if (tensors > kMaxCount || keys > kMaxCount)
    throw c.fail(std::to_string(tensors) + " tensors and " + std::to_string(keys) + " metadata keys: more than 2^24");
  for (std::uint64_t i = 0; i < keys; ++i) {
    const std::string key = c.text("metadata key " + std::to_string(i));
    const auto type = c.get<std::uint32_t>("type of " + key);
    Value v;
    if (type == 9) {
      const auto item = c.get<std::uint32_t>("item type of " + key);
      const auto count = c.get<std::uint64_t>("length of " + key);
      if (item == 9) throw c.fail(key + ": an array of arrays (not read)");
      if (count > kMaxCount) throw c.fail(key + ": an array of " + std::to_string(count) + " items, more than 2^24");
      c.need(count, key);  // every item is at least a byte: the count cannot outrun the file
      if (item == 8) {
        std::vector<std::string> s;
        for (std::uint64_t k = 0; k < count; ++k) s.push_back(c.text(key + "[" + std::to_string(k) + "]"));
        v = std::move(s);
      } else {
        std::vector<double> d;
        for (std::uint64_t k = 0; k < count; ++k) {
          const Value x = scalar(c, item, key);
          d.push_back(std::holds_alternative<std::int64_t>(x) ? static_cast<double>(std::get<std::int64_t>(x))
                      : std::holds_alternative<bool>(x)       ? static_cast<double>(std::get<bool>(x))
                                                              : std::get<double>(x));
        }
        v = std::move(d);
      }
    } else {
      v = scalar(c, type, key);
    }
    if (!meta_.emplace(key, std::move(v)).second) throw c.fail("metadata key " + key + " appears twice");
  }
  const std::int64_t alignment = integer("general.alignment", 1, 1 << 16).value_or(32);
  if (!std::has_single_bit(static_cast<std::uint64_t>(alignment)))
    throw c.fail("general.alignment " + std::to_string(alignment) + " is not a power of two");
  struct Info {
    std::string name;
    Tensor t;
    std::uint64_t offset;
  };
  std::vector<Info> infos;
  for (std::uint64_t i = 0; i < tensors; ++i) {
    Info f;
    f.name = c.text("tensor " + std::to_string(i) + "'s name");
    const auto dims = c.get<std::uint32_t>("dimension count of " + f.name);
    if (dims < 1 || dims > 4) throw c.fail("tensor \"" + f.name + "\": " + std::to_string(dims) + " dimensions (1 to 4)");
    std::int64_t elements = 1;
    for (std::uint32_t d = 0; d < dims; ++d) {
      const auto ne = c.get<std::uint64_t>("dimension of " + f.name);
      if (ne < 1 || ne > static_cast<std::uint64_t>(kMaxElements) || static_cast<std::int64_t>(ne) > kMaxElements / elements)
        throw c.fail("tensor \"" + f.name + "\": dimension " + std::to_string(ne) + " (zero, or past 2^40 elements)");
      f.t.shape.insert(f.t.shape.begin(), static_cast<std::int64_t>(ne));  // outermost first
      elements *= static_cast<std::int64_t>(ne);
    }
    // The type by the table of tensor types (ringattn/tensor_types.hpp): one without a row
    // is refused by its id and ggml's name for it, never read as another type.
    const auto type = c.get<std::uint32_t>("type of " + f.name);
    f.t.type = ringattn::find_ggml_type(type);
    if (!f.t.type) {
      const std::string_view ggml = ringattn::ggml_type_name(type);
      throw c.fail("tensor \"" + f.name + "\": ggml type " + std::to_string(type) +
                   (ggml.empty() ? std::string() : " (" + std::string(ggml) + ")") + " is not read (" +
                   ringattn::ggml_type_names() + ")");
    }
    const std::optional<std::uint64_t> bytes = tensor_bytes(*f.t.type, f.t.shape.back(), elements);
    if (!bytes)
      throw c.fail("tensor \"" + f.name + "\": a row of " + std::to_string(f.t.shape.back()) + " is not whole " +
                   std::string(f.t.type->ggml_name) + " blocks");
    f.t.bytes = *bytes;
    f.offset = c.get<std::uint64_t>("offset of " + f.name);
    infos.push_back(std::move(f));
  }
  const std::uint64_t data = (c.at() + static_cast<std::uint64_t>(alignment) - 1) / alignment * alignment;
  for (Info& f : infos) {
    if (f.offset % static_cast<std::uint64_t>(alignment) != 0 || data > size_ || f.offset > size_ - data ||
        f.t.bytes > size_ - data - f.offset)
      throw c.fail("tensor \"" + f.name + "\": " + std::to_string(f.t.bytes) + " bytes at data offset " +
                   std::to_string(f.offset) + " are outside the file or off its " + std::to_string(alignment) +
                   "-byte alignment (truncated?)");
    f.t.begin = data + f.offset;
    if (!tensors_.emplace(f.name, std::move(f.t)).second) throw c.fail("tensor \"" + f.name + "\" appears twice");
  }
}

std::optional<std::int64_t> GgufFile::integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  const auto* v = std::get_if<std::int64_t>(&it->second);
  if (!v || *v < lo || *v > hi)
    throw ringattn::FileError("model " + path_ + ": metadata " + key + " must be an integer in [" + std::to_string(lo) +
                              ", " + std::to_string(hi) + "]" + (v ? ", got " + std::to_string(*v) : ""));
  return *v;
}

std::optional<double> GgufFile::number(const std::string& key) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*i);
  throw ringattn::FileError("model " + path_ + ": metadata " + key + " is not a number");
}

std::optional<bool> GgufFile::boolean(const std::string& key) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&it->second)) return *b;
  throw ringattn::FileError("model " + path_ + ": metadata " + key + " is not a bool");
}

std::optional<std::string> GgufFile::string(const std::string& key) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  throw ringattn::FileError("model " + path_ + ": metadata " + key + " is not a string");
}

const std::vector<std::string>* GgufFile::strings(const std::string& key) const {
  const auto it = meta_.find(key);
  return it == meta_.end() ? nullptr : std::get_if<std::vector<std::string>>(&it->second);
}

const std::vector<double>* GgufFile::numbers(const std::string& key) const {
  const auto it = meta_.find(key);
  return it == meta_.end() ? nullptr : std::get_if<std::vector<double>>(&it->second);
}

std::vector<std::string> GgufFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

const std::vector<std::int64_t>& GgufFile::shape(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw ringattn::FileError("model " + path_ + ": no tensor \"" + name + "\"");
  return it->second.shape;
}

ringattn::DType GgufFile::type(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw ringattn::FileError("model " + path_ + ": no tensor \"" + name + "\"");
  return it->second.type->dtype;
}

TensorView GgufFile::view(const std::string& name, std::span<const std::int64_t> shape) {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw ringattn::FileError("model " + path_ + ": no tensor \"" + name + "\" (expected shape " + shape_text(shape) +
                              "; does the metadata describe these weights?)");
  Tensor& t = it->second;
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    throw ringattn::FileError("model " + path_ + ": tensor \"" + name + "\" has shape " + shape_text(t.shape) +
                              ", the model's configuration needs " + shape_text(shape));
  t.used = true;  // (parse refused every type without a row: t.type is one)
  return {t.type->dtype, data_ + t.begin,
          t.bytes / static_cast<std::uint64_t>(t.type->block_bytes) * static_cast<std::uint64_t>(t.type->block_values)};
}

std::vector<float> GgufFile::take(const std::string& name, std::span<const std::int64_t> shape) {
  const TensorView t = view(name, shape);
  check_finite(t, "model " + path_, name);
  std::vector<float> out = widen(t);
  release(name);
  return out;
}

void GgufFile::release(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it != tensors_.end() && file_) file_->release(it->second.begin, it->second.bytes);
}

std::vector<std::string> GgufFile::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_)
    if (!t.used) out.push_back(name);
  return out;
}

}  // namespace infer
