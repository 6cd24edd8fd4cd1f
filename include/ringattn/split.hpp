// ringattn/split.hpp — split_commas: "a,b,,c" -> {"a", "b", "", "c"}; "" -> {""}. One way to read every comma
// list (--peers, RINGATTN_PEERS, SPDLOG_LEVEL, count lists, benchmark sweeps); callers
// validate the items, an empty one included, with their own words. Public so that a
// program reads its lists exactly as the library reads RINGATTN_PEERS.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ringattn {

inline std::vector<std::string> split_commas(std::string_view list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    out.emplace_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace ringattn
