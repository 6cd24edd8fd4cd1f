// ringattn — NumPy `.npy` I/O at the file boundary of the ring: float32 little-endian,
// C order, [tokens, heads, head_dim] for Q, K, V, O and [tokens, heads] for lse.
//   npy_header.hpp  parse/format the header (from bytes; fuzzed)
//   npy_reader.hpp  read a whole tensor or a node's rows with pread
//   npy_writer.hpp  write outputs atomically (temporary file + rename)
#pragma once

#include "npy_header.hpp"
#include "npy_reader.hpp"
#include "npy_writer.hpp"
