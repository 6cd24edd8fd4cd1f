// Test fixtures for .npy files, built in C++ (tests must not need numpy).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ringattn::test {

// Magic, version, little-endian header length (2 bytes for 1.x, 4 otherwise), the dict
// exactly as given (no padding added), then `payload`.
inline std::vector<std::byte> make_npy(int major, const std::string& dict, std::size_t payload_bytes = 0,
                                       int minor = 0) {
  std::string s = "\x93NUMPY";
  s += static_cast<char>(major);
  s += static_cast<char>(minor);
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i) s += static_cast<char>((dict.size() >> (8 * i)) & 0xFF);
  s += dict;
  std::vector<std::byte> out(s.size() + payload_bytes);
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

inline std::string f4_dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ringattn-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace ringattn::test
