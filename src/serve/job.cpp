#include "job.hpp"

#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

#include <charconv>
#include <cmath>
#include <cstring>

#include "ringattn/error.hpp"
#include "../cli/json_object.hpp"
#include "../../infer/common/json.hpp"

namespace ringattn::serve {

std::string_view to_string(JobResult r) {
  switch (r) {
    case JobResult::ok: return "ok";
    case JobResult::failed: return "failed";
    case JobResult::aborted: return "aborted";
  }
  return "?";
}

std::string JobRequest::describe() const {
  return "N " + std::to_string(tokens) + ", H " + std::to_string(heads) + "/" + std::to_string(kv_heads) + ", D " +
         std::to_string(head_dim) + ", " + std::string(to_string(dtype)) + ", " + to_string(mask) + ", " +
         std::string(to_string(layout));
}

namespace {

std::int64_t field(const infer::Json& v, const char* key, std::int64_t lo, std::int64_t hi, const std::string& why) {
  const std::optional<double> f = infer::json_number(v, key);
  if (!f) throw InvalidArgument("job request: '" + std::string(key) + "' is missing or not a number");
  const double x = *f;
  // Checked as a double first: a cast of 1e300 or 512.5 to int64 is undefined or wrong.
  char buf[32];
  const std::string shown(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);  // shortest round trip: 512.5, 1e+300
  if (!std::isfinite(x) || x != std::floor(x))
    throw InvalidArgument("job request: " + std::string(key) + " = " + shown + " is not a whole number");
  if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi)))
    throw InvalidArgument("job request: " + std::string(key) + " = " + shown + " is outside " + std::to_string(lo) +
                          ".." + std::to_string(hi) + why);
  return static_cast<std::int64_t>(x);
}

std::string text(const infer::Json& v, const char* key, const std::string& def) {
  if (!infer::json_field(v, key)) return def;
  const std::string* f = infer::json_string(v, key);
  if (!f) throw InvalidArgument("job request: '" + std::string(key) + "' is not a string");
  return *f;
}

}  // namespace

JobRequest parse_job_request(const std::string& json, int world, const RingLimits& limits, std::uint64_t max_job_bytes,
                             DType default_dtype) {
  infer::Json v;
  try {
    v = infer::parse_json(json);
  } catch (const std::exception& e) {
    throw InvalidArgument(std::string("job request is not valid JSON: ") + e.what());
  }
  if (!v.is_object()) throw InvalidArgument("job request is not a JSON object");
  JobRequest r;
  r.layout = parse_layout(text(v, "layout", "contiguous"));
  r.dtype = infer::json_field(v, "dtype") ? parse_dtype(text(v, "dtype", "fp32")) : default_dtype;
  const std::string ring_limit = " (the ring's limit: raise the daemons' max_* settings)";
  r.heads = field(v, "heads", 1, limits.max_heads, ring_limit);
  r.kv_heads = field(v, "kv_heads", 1, std::min(limits.max_kv_heads, r.heads), ring_limit);
  r.head_dim = field(v, "head_dim", 1, limits.max_head_dim, ring_limit);
  if (r.heads % r.kv_heads != 0)
    throw InvalidArgument("job request: kv_heads = " + std::to_string(r.kv_heads) + " does not divide heads = " +
                          std::to_string(r.heads));
  const std::int64_t min_tokens = r.layout == Layout::zigzag ? 2 * world : world;
  r.tokens = field(v, "tokens", min_tokens, limits.max_rows * world,
                   " (a ring of " + std::to_string(world) + " with max_rows " + std::to_string(limits.max_rows) +
                       " per rank, and the layout needs " + std::to_string(min_tokens) + " or more)");
  if (max_shard_rows(r.layout, r.tokens, world) > limits.max_rows)
    throw InvalidArgument("job request: the largest " + std::string(to_string(r.layout)) + " shard of " +
                          std::to_string(r.tokens) + " tokens over " + std::to_string(world) + " ranks has " +
                          std::to_string(max_shard_rows(r.layout, r.tokens, world)) + " rows, over max_rows " +
                          std::to_string(limits.max_rows));
  const std::string mask = text(v, "mask", "none");
  if (mask == "none") r.mask = Mask::none();
  else if (mask == "causal") r.mask = Mask::causal();
  else if (mask == "window") r.mask = Mask::sliding_window(field(v, "window", 1, r.tokens, ""));
  else throw InvalidArgument("job request: mask '" + mask + "' is not none, causal or window");
  const infer::Json* lse = infer::json_field(v, "lse");
  r.want_lse = lse != nullptr && lse->is_boolean() && lse->get<bool>();
  // Inputs and outputs held at once by the coordinating daemon (and a copy for the shards).
  const std::uint64_t bytes = 2 * (2 * r.q_bytes() + 2 * r.kv_bytes()) + r.lse_bytes();
  if (bytes > max_job_bytes)
    throw InvalidArgument("job request: the job needs about " + std::to_string(bytes >> 20) + " MiB on the coordinating "
                          "daemon, over its limit of " + std::to_string(max_job_bytes >> 20) + " MiB");
  return r;
}

std::string job_request_json(const JobRequest& r) {
  cli::JsonObject o;
  o.add("op", "submit").add("tokens", r.tokens).add("heads", r.heads).add("kv_heads", r.kv_heads);
  o.add("head_dim", r.head_dim).add("layout", to_string(r.layout));
  if (r.dtype_given) o.add("dtype", to_string(r.dtype));
  o.add("mask", r.mask.kind == MaskKind::none ? "none" : r.mask.kind == MaskKind::causal ? "causal" : "window");
  if (r.mask.kind == MaskKind::window) o.add("window", r.mask.window);
  o.add("lse", r.want_lse);
  return o.str();
}

void gather_rows(std::span<const float> all, std::int64_t width, const Positions& pos, std::span<float> rows) {
  std::size_t out = 0;
  for (const auto& run : shard_row_runs(pos)) {
    const std::size_t n = static_cast<std::size_t>((run.end - run.begin) * width);
    std::memcpy(rows.data() + out, all.data() + run.begin * width, n * 4);
    out += n;
  }
}

void scatter_rows(std::span<const float> rows, std::int64_t row_width, std::int64_t offset, std::int64_t width,
                  const Positions& pos, std::span<float> all) {
  std::int64_t r = 0;
  for (const auto& run : shard_row_runs(pos))
    for (std::int64_t t = run.begin; t < run.end; ++t, ++r)
      std::memcpy(all.data() + t * width, rows.data() + r * row_width + offset, static_cast<std::size_t>(width) * 4);
}

void Job::push_upload(ShardUpload u) {
  {
    std::lock_guard lock(upload_mu_);
    uploads_.push_back(std::move(u));
  }
  upload_cv_.notify_all();
}

void Job::fail_upload(const std::string& why) {
  {
    std::lock_guard lock(upload_mu_);
    if (!upload_failed_ && !why.empty()) upload_error_ = why;  // the first reason stays
    upload_failed_ = true;
  }
  upload_cv_.notify_all();
}

std::string Job::upload_error() const {
  std::lock_guard lock(upload_mu_);
  return upload_error_;
}

std::optional<ShardUpload> Job::next_upload() {
  std::unique_lock lock(upload_mu_);
  upload_cv_.wait(lock, [&] { return !uploads_.empty() || upload_failed_; });
  if (uploads_.empty()) return std::nullopt;
  ShardUpload u = std::move(uploads_.front());
  uploads_.pop_front();
  return u;
}

EventQueue::EventQueue(const asio::any_io_executor& ex)
    : ex_(ex), timer_(std::make_shared<asio::steady_timer>(ex)) {}

void EventQueue::wake() {
  asio::post(ex_, [t = timer_] { t->cancel(); });
}

void EventQueue::push(std::string event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  wake();
}

void EventQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  wake();
}

asio::awaitable<std::optional<std::string>> EventQueue::next(std::chrono::milliseconds idle) {
  const auto until = std::chrono::steady_clock::now() + idle;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (!events_.empty()) {
        std::string e = std::move(events_.front());
        events_.pop_front();
        co_return e;
      }
      if (closed_) co_return std::nullopt;
    }
    if (std::chrono::steady_clock::now() >= until) co_return std::string();
    timer_->expires_at(until);
    std::error_code ec;
    co_await timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace ringattn::serve
