// ringattn — the outputs of `ringattn run`, checked before any node starts: a job that
// cannot publish its result must not run for an hour first, and must never clobber an
// input or write O and lse into one file.
#pragma once

#include <string>
#include <vector>

namespace ringattn::run {

// Throws InvalidArgument / FileError naming the path if: O and lse are the same file;
// either is one of the inputs (same path, or the same inode through a link); or a
// parent directory is missing, not a directory, or not writable. `lse` may be empty.
void check_output_paths(const std::string& out, const std::string& lse, const std::vector<std::string>& inputs);

}  // namespace ringattn::run
