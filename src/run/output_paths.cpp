#include "output_paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ringattn/error.hpp"

namespace ringattn::run {
namespace {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec) && !ec) return true;
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_parent(const std::string& path, const char* what) {
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw FileError(std::string(what) + " '" + path + "': its directory '" + dir.string() + "' " +
                    (errno == ENOENT ? "does not exist (create it first)" : std::string("cannot be read: ") + std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw FileError(std::string(what) + " '" + path + "': '" + dir.string() + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw FileError(std::string(what) + " '" + path + "': cannot write into '" + dir.string() + "': " + std::strerror(errno));
  if (fs::is_directory(path)) throw FileError(std::string(what) + " '" + path + "' is a directory");
}

}  // namespace

void check_output_paths(const std::string& out, const std::string& lse, const std::vector<std::string>& inputs) {
  if (out.empty()) throw InvalidArgument("--out is required");
  check_parent(out, "--out");
  if (!lse.empty()) {
    check_parent(lse, "--lse");
    if (same_file(out, lse))
      throw InvalidArgument("--out and --lse name the same file ('" + out + "', '" + lse + "'); O and lse need one each");
  }
  for (const auto& in : inputs) {
    if (same_file(out, in)) throw InvalidArgument("--out '" + out + "' is the input '" + in + "'; refusing to overwrite an input");
    if (!lse.empty() && same_file(lse, in))
      throw InvalidArgument("--lse '" + lse + "' is the input '" + in + "'; refusing to overwrite an input");
  }
}

}  // namespace ringattn::run
