#include "svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace ringattn::bench {

namespace {

constexpr double kLeft = 90, kRight = 30, kTop = 70, kBottom = 70, kNoteLine = 16;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string default_format(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (v > 0 && std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  bool ok() const { return lo <= hi; }
};

// Widens a data range to whole powers of the base (at least one decade/octave).
Range snap(Range r, double base) {
  if (!r.ok()) return {1, base};
  const double lb = std::log(base);
  Range s{std::pow(base, std::floor(std::log(r.lo) / lb + 1e-9)), std::pow(base, std::ceil(std::log(r.hi) / lb - 1e-9))};
  if (s.hi <= s.lo) s.hi = s.lo * base;
  return s;
}

// Tick positions: majors at base^k; for base 10 also minors at 2 and 5 × 10^k.
std::vector<std::pair<double, bool>> ticks(const Range& r, double base) {
  std::vector<std::pair<double, bool>> out;
  for (double v = r.lo; v <= r.hi * (1 + 1e-9); v *= base) {
    out.push_back({v, true});
    if (base == 10)
      for (double m : {2.0, 5.0})
        if (v * m < r.hi) out.push_back({v * m, false});
  }
  return out;
}

}  // namespace

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string format_seconds(double s) {
  char buf[32];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%g µs", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%g ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string render_svg(const LogLogPlot& p) {
  Range xr, yr;
  for (const auto& s : p.series) {
    for (double v : s.x) xr.add(v);
    for (double v : s.y) yr.add(v);
  }
  for (const auto& m : p.markers) xr.add(m.x);
  xr = snap(xr, p.x.base);
  yr = snap(yr, p.y.base);
  const double W = p.width, H = p.height + kNoteLine * static_cast<double>(p.notes.size());
  const double x0 = kLeft, x1 = W - kRight, y0 = kTop, y1 = p.height - kBottom;
  auto px = [&](double v) { return x0 + (x1 - x0) * std::log(v / xr.lo) / std::log(xr.hi / xr.lo); };
  auto py = [&](double v) { return y1 - (y1 - y0) * std::log(v / yr.lo) / std::log(yr.hi / yr.lo); };
  const auto fx = p.x.format ? p.x.format : default_format;
  const auto fy = p.y.format ? p.y.format : default_format;

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << ' ' << H << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"13\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << x0 << "\" y=\"26\" font-size=\"17\" font-weight=\"bold\">" << svg_escape(p.title) << "</text>\n";
  o << "<text x=\"" << x0 << "\" y=\"48\" fill=\"#555\">" << svg_escape(p.subtitle) << "</text>\n";

  for (auto [v, major] : ticks(xr, p.x.base)) {
    const double x = px(v);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << y0 << "\" x2=\"" << num(x) << "\" y2=\"" << y1 << "\" stroke=\""
      << (major ? "#ddd" : "#f0f0f0") << "\"/>\n";
    if (major)
      o << "<text x=\"" << num(x) << "\" y=\"" << y1 + 18 << "\" text-anchor=\"middle\">" << svg_escape(fx(v))
        << "</text>\n";
  }
  for (auto [v, major] : ticks(yr, p.y.base)) {
    const double y = py(v);
    o << "<line x1=\"" << x0 << "\" y1=\"" << num(y) << "\" x2=\"" << x1 << "\" y2=\"" << num(y) << "\" stroke=\""
      << (major ? "#ddd" : "#f0f0f0") << "\"/>\n";
    if (major || (yr.hi / yr.lo) <= 1e3)
      o << "<text x=\"" << x0 - 6 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\""
        << (major ? "" : " fill=\"#888\" font-size=\"11\"") << ">" << svg_escape(fy(v)) << "</text>\n";
  }
  o << "<rect x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << x1 - x0 << "\" height=\"" << y1 - y0
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  o << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y1 + 42 << "\" text-anchor=\"middle\">" << svg_escape(p.x.label)
    << "</text>\n";
  o << "<text transform=\"translate(22," << (y0 + y1) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << svg_escape(p.y.label) << "</text>\n";

  for (std::size_t i = 0; i < p.markers.size(); ++i) {
    const auto& m = p.markers[i];
    if (!(m.x > 0)) continue;
    const double x = px(m.x);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << y0 << "\" x2=\"" << num(x) << "\" y2=\"" << y1 << "\" stroke=\""
      << m.color << "\" stroke-width=\"1.5\"" << (m.dashed ? " stroke-dasharray=\"6,4\"" : "") << "/>\n";
    o << "<text x=\"" << num(x + 5) << "\" y=\"" << y1 - 10 - 16 * static_cast<double>(i) << "\" fill=\"" << m.color
      << "\">" << svg_escape(m.label) << "</text>\n";
  }

  for (const auto& s : p.series) {
    std::string pts;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (s.x[i] > 0 && s.y[i] > 0) pts += num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"" << s.width << "\""
      << (s.dashed ? " stroke-dasharray=\"7,4\"" : "") << " points=\"" << pts << "\"/>\n";
    if (s.markers)
      for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
        if (s.x[i] > 0 && s.y[i] > 0)
          o << "<circle cx=\"" << num(px(s.x[i])) << "\" cy=\"" << num(py(s.y[i])) << "\" r=\"3\" fill=\"" << s.color
            << "\"/>\n";
  }

  // Legend, top left inside the plot area (curves that grow with x leave it empty).
  const double lx = x0 + 12, ly = y0 + 12;
  o << "<rect x=\"" << lx - 6 << "\" y=\"" << ly - 6 << "\" width=\"250\" height=\""
    << 18 * static_cast<double>(p.series.size()) + 8 << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n";
  for (std::size_t i = 0; i < p.series.size(); ++i) {
    const auto& s = p.series[i];
    const double y = ly + 18 * static_cast<double>(i) + 6;
    o << "<line x1=\"" << lx << "\" y1=\"" << y << "\" x2=\"" << lx + 28 << "\" y2=\"" << y << "\" stroke=\"" << s.color
      << "\" stroke-width=\"" << s.width << "\"" << (s.dashed ? " stroke-dasharray=\"7,4\"" : "") << "/>\n";
    o << "<text x=\"" << lx + 36 << "\" y=\"" << y + 4 << "\">" << svg_escape(s.label) << "</text>\n";
  }
  for (std::size_t i = 0; i < p.notes.size(); ++i)
    o << "<text x=\"" << x0 << "\" y=\"" << p.height - 12 + kNoteLine * static_cast<double>(i)
      << "\" font-size=\"11\" fill=\"#555\">" << svg_escape(p.notes[i]) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace ringattn::bench
