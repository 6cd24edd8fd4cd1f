#include "ringattn/positions.hpp"

#include <string>

#include "ringattn/error.hpp"

namespace ringattn {

Positions::Positions(std::vector<PositionRun> runs) : runs_(std::move(runs)) {
  bool have_last = false;
  std::int64_t last = 0;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    const auto& r = runs_[i];
    const std::string where = "positions: run " + std::to_string(i);
    if (r.count < 0) throw InvalidArgument(where + " has count " + std::to_string(r.count) + " < 0");
    if (r.stride < 1) throw InvalidArgument(where + " has stride " + std::to_string(r.stride) + " < 1");
    if (r.first < 0) throw InvalidArgument(where + " starts at " + std::to_string(r.first) + " < 0");
    if (r.count == 0) continue;
    if (have_last && r.first <= last)
      throw InvalidArgument(where + " starts at " + std::to_string(r.first) +
                            ", not after the previous position " + std::to_string(last) +
                            " (positions must increase)");
    if (r.count - 1 > (INT64_MAX - r.first) / r.stride)
      throw InvalidArgument(where + " overflows int64");
    last = r.first + (r.count - 1) * r.stride;
    have_last = true;
    if (r.count > INT64_MAX - size_)  // increasing non-negative int64s: 2^63 of them at most
      throw InvalidArgument(where + " brings the rows past INT64_MAX");
    size_ += r.count;
  }
}

Positions Positions::contiguous(std::int64_t first, std::int64_t count) {
  return Positions({PositionRun{first, 1, count}});
}

Positions Positions::strided(std::int64_t first, std::int64_t stride, std::int64_t count) {
  return Positions({PositionRun{first, stride, count}});
}

Positions Positions::from_sorted(const std::int64_t* p, std::int64_t n) {
  std::vector<PositionRun> runs;
  std::int64_t i = 0;
  while (i < n) {
    if (p[i] < 0) throw InvalidArgument("positions: row " + std::to_string(i) + " is " + std::to_string(p[i]) + " < 0");
    PositionRun r{p[i], 1, 1};
    if (i + 1 < n) {
      if (p[i + 1] <= p[i])
        throw InvalidArgument("positions: row " + std::to_string(i + 1) + " is " + std::to_string(p[i + 1]) +
                              ", not after row " + std::to_string(i) + "'s " + std::to_string(p[i]) +
                              " (positions must strictly increase)");
      r.stride = p[i + 1] - p[i];
      r.count = 2;
      while (i + r.count < n && p[i + r.count] - p[i + r.count - 1] == r.stride) ++r.count;
    }
    i += r.count;
    runs.push_back(r);
  }
  return Positions(std::move(runs));  // checks the order between runs
}

void Positions::materialize_into(std::vector<std::int64_t>& out) const {
  out.resize(static_cast<std::size_t>(size_));
  std::size_t k = 0;
  for (const auto& run : runs_)
    for (std::int64_t i = 0; i < run.count; ++i) out[k++] = run.first + i * run.stride;
}

std::int64_t Positions::at(std::int64_t r) const {
  if (r < 0 || r >= size_)
    throw InvalidArgument("positions: row " + std::to_string(r) + " is out of range (" + std::to_string(size_) +
                          " rows)");
  for (const auto& run : runs_) {
    if (r < run.count) return run.first + r * run.stride;
    r -= run.count;
  }
  return 0;  // not reached: r < size_
}

std::vector<std::int64_t> Positions::materialize() const {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(size_));
  for (const auto& run : runs_)
    for (std::int64_t i = 0; i < run.count; ++i) out.push_back(run.first + i * run.stride);
  return out;
}

}  // namespace ringattn
