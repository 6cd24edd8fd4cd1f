#include "npy_header.hpp"

#include <bit>
#include <cstring>
#include <limits>

#include "ringattn/error.hpp"

// Elements are read and written by memcpy of the file bytes; a big-endian host would
// need a byte swap on every element, which nobody has asked for yet.
static_assert(std::endian::native == std::endian::little,
              "ringattn's .npy I/O assumes a little-endian host");

namespace ringattn::io {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
constexpr std::uint64_t kMaxFileBytes = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

[[noreturn]] void fail(std::string_view source, const std::string& what) {
  throw FileError(std::string(source) + ": " + what);
}

// A recursive-descent reader for the one dict shape numpy writes. It accepts any key
// order, either quote style, Python whitespace, an optional trailing comma, and the
// 'L' suffix Python 2 numpy wrote after shape integers; it refuses everything else.
class DictParser {
 public:
  DictParser(std::string_view text, std::string_view source) : s_(text), source_(source) {}

  NpyInfo parse() {
    NpyInfo info;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{', "the header dict must start with '{'");
    skip_ws();
    while (!at('}')) {
      const std::string key = string_literal("a quoted key");
      skip_ws();
      expect(':', "expected ':' after key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        once(have_descr, key);
        if (at('[')) error("structured dtypes (a list descr) are not supported; ringattn reads plain float32 ('<f4')");
        info.descr = string_literal("a quoted dtype string for 'descr'");
      } else if (key == "fortran_order") {
        once(have_order, key);
        info.fortran_order = boolean(key);
      } else if (key == "shape") {
        once(have_shape, key);
        info.shape = tuple_of_dims();
      } else {
        error("unexpected key '" + key + "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
      }
      skip_ws();
      if (at(',')) {
        ++pos_;
        skip_ws();
      } else if (!at('}')) {
        error("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    ++pos_;  // '}'
    skip_ws();
    if (pos_ != s_.size()) error("unexpected text after the closing '}' (only padding spaces and '\\n' may follow)");
    if (!have_descr) error("missing key 'descr'");
    if (!have_order) error("missing key 'fortran_order'");
    if (!have_shape) error("missing key 'shape'");
    return info;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(source_, "bad .npy header dict at byte " + std::to_string(pos_) + " of the dict: " + what);
  }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  void expect(char c, const std::string& what) {
    if (!at(c)) error(what);
    ++pos_;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void once(bool& seen, const std::string& key) {
    if (seen) error("duplicate key '" + key + "'");
    seen = true;
  }

  // Python string literal without escapes: numpy never writes any in these fields.
  std::string string_literal(const std::string& what) {
    if (!at('\'') && !at('"')) error("expected " + what);
    const char quote = s_[pos_++];
    const std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\' || s_[pos_] == '\n') error("unsupported character in a string literal");
      ++pos_;
    }
    if (pos_ >= s_.size()) error("unterminated string literal");
    return std::string(s_.substr(start, pos_++ - start));
  }

  bool boolean(const std::string& key) {
    for (std::string_view word : {std::string_view("True"), std::string_view("False")}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return word == "True";
      }
    }
    error("expected True or False for '" + key + "'");
  }

  std::vector<std::int64_t> tuple_of_dims() {
    std::vector<std::int64_t> dims;
    expect('(', "expected a tuple like (4096, 8, 128) for 'shape'");
    skip_ws();
    bool trailing_comma = false;
    while (!at(')')) {
      dims.push_back(dimension());
      skip_ws();
      trailing_comma = at(',');
      if (trailing_comma) {
        ++pos_;
        skip_ws();
      } else if (!at(')')) {
        error("expected ',' or ')' in 'shape'");
      }
    }
    ++pos_;  // ')'
    // In Python "(5)" is the integer 5, not a tuple; numpy writes "(5,)".
    if (dims.size() == 1 && !trailing_comma) error("'shape' (n) is not a tuple; a 1-D shape is written (n,)");
    return dims;
  }

  std::int64_t dimension() {
    if (at('-')) error("negative dimension in 'shape'");
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') error("expected a non-negative integer in 'shape'");
    std::int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      const int digit = s_[pos_] - '0';
      if (v > (std::numeric_limits<std::int64_t>::max() - digit) / 10) error("dimension in 'shape' does not fit in 64 bits");
      v = v * 10 + digit;
      ++pos_;
    }
    if (at('L')) ++pos_;  // Python 2 long literal
    return v;
  }

  std::string_view s_;
  std::string_view source_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(const std::byte* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

// Product of dims times 4 bytes, or nullopt if it would not fit a file offset. The
// product of the non-zero dims must fit too, so that any sub-product (a row's
// elements) is safe to compute even when a zero dimension empties the array.
std::optional<std::uint64_t> checked_data_bytes(std::span<const std::int64_t> shape, std::uint64_t offset) {
  std::uint64_t nonzero = 1;
  bool empty = false;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto u = static_cast<std::uint64_t>(d);
    if (u == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMaxFileBytes / u) return std::nullopt;
    nonzero *= u;
  }
  const std::uint64_t elems = empty ? 0 : nonzero;
  if (elems > (kMaxFileBytes - offset) / 4) return std::nullopt;
  return elems * 4;
}

}  // namespace

std::uint64_t NpyInfo::elements() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::int64_t NpyInfo::rows() const { return shape.empty() ? 1 : shape[0]; }

std::uint64_t NpyInfo::row_elements() const {
  std::uint64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= static_cast<std::uint64_t>(shape[i]);
  return n;
}

NpyInfo parse_npy_header(std::span<const std::byte> bytes, std::string_view source,
                         std::optional<std::uint64_t> file_size) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    fail(source, "not a .npy file (it does not start with the magic bytes \\x93NUMPY)");
  const int major = static_cast<int>(bytes[6]);
  const int minor = static_cast<int>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(source, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                     " (supported: 1.0, 2.0, 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t preamble = kMagicLen + 2 + len_bytes;
  if (bytes.size() < preamble) fail(source, "truncated .npy preamble: the header length field is cut off");
  const std::uint32_t header_len = read_le(bytes.data() + kMagicLen + 2, len_bytes);
  if (header_len > kMaxNpyHeaderBytes)
    fail(source, ".npy header length " + std::to_string(header_len) + " bytes exceeds the limit of " +
                     std::to_string(kMaxNpyHeaderBytes) + " (corrupt file?)");
  const std::uint64_t offset = preamble + static_cast<std::uint64_t>(header_len);
  const std::uint64_t available = file_size ? *file_size : bytes.size();
  if (offset > available || offset > bytes.size())
    fail(source, ".npy header length " + std::to_string(header_len) + " runs past the end of the file (header ends at byte " +
                     std::to_string(offset) + ", the file has " + std::to_string(available) + " bytes)");

  const auto* text = reinterpret_cast<const char*>(bytes.data() + preamble);
  NpyInfo info = DictParser(std::string_view(text, header_len), source).parse();
  info.major_version = major;
  info.minor_version = minor;
  info.data_offset = offset;

  if (info.descr != kNpyFloat32Descr)
    fail(source, "dtype '" + info.descr + "' is not supported: ringattn reads float32 little-endian ('<f4'); convert with a.astype('<f4')");
  if (info.fortran_order)
    fail(source, "fortran_order is True: ringattn reads C-order arrays; save np.ascontiguousarray(a) instead");
  const auto data = checked_data_bytes(info.shape, offset);
  if (!data) fail(source, "shape " + shape_to_string(info.shape) + " is too large: its byte count overflows a 64-bit file offset");
  if (file_size && *file_size < offset + *data)
    fail(source, "truncated .npy file: shape " + shape_to_string(info.shape) + " needs " + std::to_string(offset + *data) +
                     " bytes (header " + std::to_string(offset) + " + data " + std::to_string(*data) + ") but the file has " +
                     std::to_string(*file_size));
  return info;
}

std::string shape_to_string(std::span<const std::int64_t> shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string format_npy_header(std::span<const std::int64_t> shape) {
  for (std::int64_t d : shape)
    if (d < 0) throw InvalidArgument("npy: negative dimension in shape " + shape_to_string(shape));
  if (!checked_data_bytes(shape, 0))
    throw InvalidArgument("npy: shape " + shape_to_string(shape) + " is too large for a file");

  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_to_string(shape) + ", }";
  // numpy pads with spaces and ends with '\n' so that the data is 64-byte aligned.
  // Version 1.0 only: a dict too long for its uint16 length would also exceed the
  // reader's header limit, so version 2.0 output would be unreadable here anyway.
  constexpr std::size_t kAlign = 64, kPreamble = 10;
  const std::size_t unpadded = kPreamble + dict.size() + 1;
  const std::size_t hlen = dict.size() + 1 + (kAlign - unpadded % kAlign) % kAlign;
  if (hlen > 0xFFFF) throw InvalidArgument("npy: shape " + shape_to_string(shape) + " has too many dimensions for a .npy header");

  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\0';
  out += static_cast<char>(hlen & 0xFF);
  out += static_cast<char>(hlen >> 8);
  out += dict;
  out.append(hlen - dict.size() - 1, ' ');
  out += '\n';
  return out;
}

}  // namespace ringattn::io
