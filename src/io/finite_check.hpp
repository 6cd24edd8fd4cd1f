// ringattn — refusing NaN and inf in input tensors at the file boundary.
//
// Dense attention is NaN for every query row that sees a NaN or an inf, so a job fed
// one would spend the whole ring computing NaN rows (the kernel keeps them exact, see
// block_attention.hpp, but that is for library callers who skip this check). A node
// therefore scans what it reads before it joins the ring and names the first bad value
// precisely enough to find it: file, token, head, element. The scan is O(N d) against
// the O(N^2 d) of the job, one OR per element unless something is found.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "npy_header.hpp"
#include "npy_reader.hpp"

namespace ringattn::io {

// `data` holds the rows of `ranges` (token indices of the file at `path`, in order,
// packed) of the tensor `info` describes: [tokens, heads, head_dim] floats. If one is
// NaN or +-inf, throws FileError naming the file, the token, the head (called
// `head_name`: "head" for Q, "kv head" for K and V), the element and the value, e.g.
//   v.npy: token 200, kv head 1, element 5 is nan (non-finite inputs are refused; ...)
// For a tensor of another rank the head is left out and the element counts along the row.
void check_finite(const std::string& path, std::span<const float> data, std::span<const RowRange> ranges,
                  const NpyInfo& info, std::string_view head_name);

}  // namespace ringattn::io
