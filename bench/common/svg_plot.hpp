// ringattn bench — a small log-log line plot written as SVG text, so a benchmark can
// draw its figure without Python or any plotting package at run time.
//
// Kept rather than replaced by a matplotlib script (issue 17 weighed it): the benchmark
// draws its plot on the machine that ran it, as the sweep ends, with nothing installed
// beside ringattn; python3-matplotlib would add 51 Debian packages to every node that
// runs `bench overlap`, for one figure this file draws in under 60 lines (measured with
// apt-get install -s on Debian 12, 2026-12-01). The JSON lines stay the source of truth:
// any plotting tool can redraw from them.
//
// What it draws: both axes logarithmic, major ticks at powers of the axis base with
// grid lines, minor ticks at 2× and 5× for base 10, each series as a polyline with
// optional markers and dashes, labelled vertical markers (e.g. crossovers), a title,
// a subtitle and a legend. Non-positive values cannot sit on a log axis and are skipped.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ringattn::bench {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  double width = 2;
  bool dashed = false;
  bool markers = true;
};

struct PlotMarker {  // a vertical line at x
  double x = 0;
  std::string label;
  std::string color = "#444";
  bool dashed = true;
};

struct PlotAxis {
  std::string label;
  double base = 10;                                  // 2 or 10: where the major ticks sit
  std::function<std::string(double)> format;        // tick text; default %g
};

struct LogLogPlot {
  std::string title, subtitle;
  PlotAxis x, y;
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;
  std::vector<std::string> notes;  // lines of small text under the plot area
  int width = 960, height = 600;
};

std::string render_svg(const LogLogPlot& plot);

// "250 µs", "12 ms", "3.1 s": seconds as a tick label.
std::string format_seconds(double s);

// Escapes &, <, > and quotes for SVG text.
std::string svg_escape(const std::string& s);

}  // namespace ringattn::bench
