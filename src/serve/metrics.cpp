// ringattn serve — the metrics registry and its Prometheus text exposition (0.0.4).
//
// One mutex for everything: recording is a map lookup and an addition, a scrape renders a
// few dozen lines, so neither side holds it long. Families render in the order they were
// declared, series within a family in label order (labels sorted by name on the way in,
// so {a,b} and {b,a} are one series). Histogram buckets are stored per bound and summed
// into the cumulative _bucket lines only when rendering.
#include "metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace ringattn::serve {

struct Metrics::Series {
  double value = 0;                    // counter, gauge
  std::vector<std::uint64_t> buckets;  // histogram: one per bound, then +Inf (not cumulative)
  double sum = 0;
  std::uint64_t count = 0;
};

struct Metrics::Family {
  std::string name;
  Type type;
  std::string help;
  std::vector<double> bounds;  // histogram: finite, strictly increasing
  std::map<Labels, Series> series;
};

namespace {

bool valid_name(const std::string& s, bool colon_ok) {
  auto head = [&](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':'); };
  if (s.empty() || !head(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), [&](char c) { return head(c) || (c >= '0' && c <= '9'); });
}

const char* type_name(Metrics::Type t) {
  switch (t) {
    case Metrics::Type::counter: return "counter";
    case Metrics::Type::gauge: return "gauge";
    case Metrics::Type::histogram: return "histogram";
  }
  return "untyped";
}

// Go's ParseFloat reads what to_chars writes (shortest round trip: "1", "0.25", "1e+21").
void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
}

void append_escaped(std::string& out, const std::string& s, bool quote) {
  for (const char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
}

// {a="x",b="y"} plus an optional le="..." last; nothing at all for no labels.
void append_labels(std::string& out, const Labels& labels, const std::string* le = nullptr) {
  if (labels.empty() && !le) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    append_escaped(out, v, true);
    out += '"';
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"" + *le + "\"";
  }
  out += '}';
}

}  // namespace

Metrics::Metrics() = default;
Metrics::~Metrics() = default;

void Metrics::describe(const std::string& name, Type type, const std::string& help) {
  if (type == Type::histogram) throw std::logic_error("metric " + name + ": declare histograms with describe_histogram");
  if (!valid_name(name, true)) throw std::logic_error("metric name '" + name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  std::lock_guard lock(mu_);
  if (const auto it = index_.find(name); it != index_.end()) {
    if (it->second->type != type || it->second->help != help)
      throw std::logic_error("metric " + name + " declared twice, differently");
    return;  // the same declaration again: harmless
  }
  families_.push_back(std::make_unique<Family>(Family{name, type, help, {}, {}}));
  index_[name] = families_.back().get();
}

void Metrics::describe_histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  if (!valid_name(name, true)) throw std::logic_error("metric name '" + name + "' is not [a-zA-Z_:][a-zA-Z0-9_:]*");
  if (!bounds.empty() && std::isinf(bounds.back()) && bounds.back() > 0) bounds.pop_back();  // +Inf is implied
  for (std::size_t i = 0; i < bounds.size(); ++i)
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i])))
      throw std::logic_error("histogram " + name + ": bucket bounds must be finite and strictly increasing");
  std::lock_guard lock(mu_);
  if (const auto it = index_.find(name); it != index_.end()) {
    if (it->second->type != Type::histogram || it->second->help != help || it->second->bounds != bounds)
      throw std::logic_error("metric " + name + " declared twice, differently");
    return;
  }
  families_.push_back(std::make_unique<Family>(Family{name, Type::histogram, help, std::move(bounds), {}}));
  index_[name] = families_.back().get();
}

Metrics::Series& Metrics::series_locked(const std::string& name, const Labels& labels, Type type) {
  const auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("metric " + name + " recorded but never declared");
  Family& f = *it->second;
  // add() also moves a gauge up or down; everything else needs its own type.
  if (f.type != type && !(type == Type::counter && f.type == Type::gauge))
    throw std::logic_error("metric " + name + " is a " + type_name(f.type) + ", not a " + type_name(type));
  Labels key = labels;
  std::sort(key.begin(), key.end());
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (!valid_name(key[i].first, false) || key[i].first.starts_with("__") ||
        (f.type == Type::histogram && key[i].first == "le"))
      throw std::logic_error("metric " + name + ": bad label name '" + key[i].first + "'");
    if (i > 0 && key[i - 1].first == key[i].first)
      throw std::logic_error("metric " + name + ": label '" + key[i].first + "' given twice");
  }
  const auto [s, fresh] = f.series.try_emplace(std::move(key));
  if (fresh && f.type == Type::histogram) s->second.buckets.assign(f.bounds.size() + 1, 0);
  return s->second;
}

void Metrics::add(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  if (const auto it = index_.find(name); it != index_.end() && it->second->type == Type::counter && !(value >= 0))
    throw std::logic_error("counter " + name + " can only go up (add " + std::to_string(value) + ")");
  series_locked(name, labels, Type::counter).value += value;
}

void Metrics::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  series_locked(name, labels, Type::gauge).value = value;
}

void Metrics::observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Series& s = series_locked(name, labels, Type::histogram);
  const auto& bounds = index_.at(name)->bounds;
  // le is "less or equal": the first bound >= value; NaN counts only in +Inf.
  const auto b = std::isnan(value) ? bounds.end() : std::lower_bound(bounds.begin(), bounds.end(), value);
  ++s.buckets[static_cast<std::size_t>(b - bounds.begin())];
  s.sum += value;
  ++s.count;
}

std::optional<double> Metrics::value(const std::string& name, const Labels& labels) const {
  Labels key = labels;
  std::sort(key.begin(), key.end());
  std::lock_guard lock(mu_);
  const auto it = index_.find(name);
  if (it == index_.end() || it->second->type == Type::histogram) return std::nullopt;
  const auto s = it->second->series.find(key);
  return s == it->second->series.end() ? 0.0 : s->second.value;
}

std::optional<double> Metrics::sum(const std::string& name) const {
  std::lock_guard lock(mu_);
  const auto it = index_.find(name);
  if (it == index_.end() || it->second->type == Type::histogram) return std::nullopt;
  double total = 0;
  for (const auto& [labels, s] : it->second->series) total += s.value;
  return total;
}

std::string Metrics::render() const {
  std::string out;
  std::lock_guard lock(mu_);
  for (const auto& f : families_) {
    out += "# HELP " + f->name + ' ';
    append_escaped(out, f->help, false);
    out += "\n# TYPE " + f->name + ' ' + type_name(f->type) + '\n';
    for (const auto& [labels, s] : f->series) {
      if (f->type != Type::histogram) {
        out += f->name;
        append_labels(out, labels);
        out += ' ';
        append_number(out, s.value);
        out += '\n';
        continue;
      }
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < s.buckets.size(); ++i) {
        cumulative += s.buckets[i];
        std::string le;
        append_number(le, i < f->bounds.size() ? f->bounds[i] : INFINITY);
        out += f->name + "_bucket";
        append_labels(out, labels, &le);
        out += ' ' + std::to_string(cumulative) + '\n';
      }
      out += f->name + "_sum";
      append_labels(out, labels);
      out += ' ';
      append_number(out, s.sum);
      out += '\n' + f->name + "_count";
      append_labels(out, labels);
      out += ' ' + std::to_string(s.count) + '\n';
    }
  }
  return out;
}

}  // namespace ringattn::serve
