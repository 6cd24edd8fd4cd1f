// The Python module `ringattn` (pybind11): the library's Ring on numpy arrays.
//
//   ring = ringattn.Ring.from_env()            # or Ring(rank=, world_size=, master=/peers=, token=)
//   o, lse = ring.forward(q, k, v, positions=pos, causal=True)
//
// Only the public C++ API is used (include/ringattn/). Inputs are borrowed, never
// copied: q, k, v must already be float32 and C-contiguous, and anything else is refused
// with a message naming the array and what to do, before the ring hears of the call.
//
// The GIL is released while the ring connects, computes, waits and closes, so other
// Python threads run meanwhile. The library may log from its own threads and a Python
// log sink has to take the GIL for that, so every call into the library that can log
// runs with the GIL released: otherwise an I/O thread holding the sink's lock could wait
// for the GIL forever while this thread waits for that lock.
#include <dlfcn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ringattn/error.hpp"
#include "ringattn/layout.hpp"
#include "ringattn/log.hpp"
#include "ringattn/packing.hpp"
#include "ringattn/ring.hpp"

namespace py = pybind11;

namespace {

// The module's exception classes, created once and never freed.
struct Exceptions {
  PyObject* error = nullptr;             // ringattn.Error(RuntimeError)
  PyObject* invalid_argument = nullptr;  // ringattn.InvalidArgument(Error, ValueError)
  PyObject* network_error = nullptr;     // ringattn.NetworkError(Error)
  PyObject* file_error = nullptr;        // ringattn.FileError(Error, OSError)
};
Exceptions g_exc;

[[noreturn]] void bad(const std::string& what) { throw ringattn::InvalidArgument(what); }

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string type_name(const py::handle& obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

// A float32, C-contiguous, 3-D numpy array, or InvalidArgument naming what is wrong.
py::array tensor(const py::object& obj, const std::string& name, const char* layout, const char* call = "forward") {
  const std::string where = std::string(call) + ": " + name;
  if (!py::isinstance<py::array>(obj)) bad(where + " must be a numpy array " + layout + ", not " + type_name(obj));
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().equal(py::dtype::of<float>()))
    bad(where + " has dtype " + std::string(py::str(a.dtype())) + "; expected float32 (" + name +
        ".astype(numpy.float32))");
  if (a.ndim() != 3) bad(where + " has shape " + shape_of(a) + "; expected " + layout);
  if (!(a.flags() & py::array::c_style))
    bad(where + " is not C-contiguous; pass numpy.ascontiguousarray(" + name + ")");
  return a;
}

// An integer array as int64, every value checked first against `most`: numpy's cast
// wraps a uint64 above INT64_MAX to a negative number without a word.
py::array_t<std::int64_t> int64_of(const py::array& a, const std::string& where, std::uint64_t most) {
  if (a.dtype().kind() == 'u') {
    const auto u = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    for (py::ssize_t i = 0; i < u.size(); ++i)
      if (u.data()[i] > most)
        bad(where + "[" + std::to_string(i) + "] = " + std::to_string(u.data()[i]) + " exceeds " + std::to_string(most));
  }
  return py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
}

// The rows' global positions as int64 (converted from any integer array or sequence).
py::array_t<std::int64_t> positions_of(const py::object& obj, py::ssize_t rows, const std::string& call = "forward") {
  auto a = py::reinterpret_borrow<py::array>(py::module_::import("numpy").attr("asarray")(obj));
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    bad(call + ": positions has dtype " + std::string(py::str(a.dtype())) + "; expected integers (int64)");
  if (a.ndim() != 1 || a.shape(0) != rows)
    bad(call + ": positions has shape " + shape_of(a) + "; expected (" + std::to_string(rows) +
        ",), one global position per row");
  return int64_of(a, call + ": positions", std::numeric_limits<std::int64_t>::max());
}

// Document ids of a packed batch's rows: integers [rows], as int32.
py::array_t<std::int32_t> documents_of(const py::object& obj, py::ssize_t rows, const std::string& call = "forward",
                                       const std::string& name = "documents") {
  auto a = py::reinterpret_borrow<py::array>(py::module_::import("numpy").attr("asarray")(obj));
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    bad(call + ": " + name + " has dtype " + std::string(py::str(a.dtype())) + "; expected integers (int32)");
  if (a.ndim() != 1 || a.shape(0) != rows)
    bad(call + ": " + name + " has shape " + shape_of(a) + "; expected (" + std::to_string(rows) +
        ",), one id per row");
  // Checked before the cast to int32, which would wrap 2**32 + 5 to 5 without a word.
  const auto wide = int64_of(a, call + ": " + name, std::numeric_limits<std::int32_t>::max());
  for (py::ssize_t i = 0; i < wide.size(); ++i)
    if (wide.data()[i] < std::numeric_limits<std::int32_t>::min() ||
        wide.data()[i] > std::numeric_limits<std::int32_t>::max())
      bad(call + ": " + name + "[" + std::to_string(i) + "] = " + std::to_string(wide.data()[i]) +
          " does not fit 32 bits");
  return py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>::ensure(a);
}

// cu_seqlens as int64 (a sequence or an array of integers).
std::vector<std::int64_t> cu_seqlens_of(const py::object& obj) {
  auto a = py::reinterpret_borrow<py::array>(py::module_::import("numpy").attr("asarray")(obj));
  const char kind = a.dtype().kind();
  if ((kind != 'i' && kind != 'u') || a.ndim() != 1)
    bad("cu_seqlens: expected a 1-d sequence of integers (cumulative lengths from 0), got dtype " +
        std::string(py::str(a.dtype())) + " shape " + shape_of(a));
  const auto c = int64_of(a, "cu_seqlens", std::numeric_limits<std::int64_t>::max());
  return {c.data(), c.data() + c.size()};
}

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

ringattn::Mask mask_of(bool causal, const std::optional<std::int64_t>& window) {
  if (!window) return causal ? ringattn::Mask::causal() : ringattn::Mask::none();
  if (*window < 1) bad("forward: window = " + std::to_string(*window) + " must be >= 1 (tokens, the query included)");
  return ringattn::Mask::sliding_window(*window);  // causal by definition
}

// Ring on the Python side: one call at a time (the C++ Ring's rule, enforced here since
// threads may call with the GIL released), and closed for good once close() returns.
// call_mu_ is held for a whole call (close waits for it); ring_mu_ only while the pointer
// is read or taken, so that broken and closed answer while another thread computes.
class PyRing {
 public:
  explicit PyRing(ringattn::Ring ring)
      : ring_(std::make_shared<ringattn::Ring>(std::move(ring))),
        rank_(ring_->rank()),
        world_(ring_->world_size()),
        limits_(ring_->limits()) {}

  ~PyRing();

  static std::unique_ptr<PyRing> connect(const ringattn::RingOptions& options) {
    py::gil_scoped_release nogil;
    return std::make_unique<PyRing>(ringattn::Ring::connect(options));
  }

  // forward's and backward's shared arguments, checked: the arrays, the rows' positions
  // (and documents) and the call's spec. `call` names the method in every message.
  struct CallArgs {
    py::array q, k, v;
    py::array_t<std::int64_t> pos;
    std::optional<py::array_t<std::int32_t>> docs;
    ringattn::AttentionSpec spec;
  };
  CallArgs call_args(const char* call, const py::object& q_obj, const py::object& k_obj, const py::object& v_obj,
                     const py::object& positions, const py::object& documents, bool causal,
                     std::optional<std::int64_t> window, const std::string& dtype, std::optional<double> scale) {
    const std::string c = call;
    CallArgs a{tensor(q_obj, "q", "[tokens, heads, head_dim]", call), tensor(k_obj, "k", "[tokens, kv_heads, head_dim]", call),
               tensor(v_obj, "v", "[tokens, kv_heads, head_dim]", call), {}, std::nullopt, {}};
    const py::array &q = a.q, &k = a.k, &v = a.v;
    const py::ssize_t rows = q.shape(0), heads = q.shape(1), head_dim = q.shape(2);
    if (k.shape(0) != rows || k.shape(2) != head_dim)
      bad(c + ": k has shape " + shape_of(k) + " but q has " + shape_of(q) +
          ": k must be [tokens, kv_heads, head_dim] with q's tokens and head_dim");
    if (v.ndim() != k.ndim() || v.shape(0) != k.shape(0) || v.shape(1) != k.shape(1) || v.shape(2) != k.shape(2))
      bad(c + ": v has shape " + shape_of(v) + " but k has " + shape_of(k) + "; they must match");
    check_shape(c, "rows", rows, heads, k.shape(1), head_dim);
    if (!positions.is_none()) {
      a.pos = positions_of(positions, rows, c);
    } else if (world_ == 1) {
      a.pos = py::array_t<std::int64_t>(rows);
      std::iota(a.pos.mutable_data(), a.pos.mutable_data() + rows, std::int64_t{0});
    } else {
      bad(c + ": positions are required when world_size > 1: the global positions of this rank's rows, "
          "e.g. ringattn.shard_positions(\"zigzag\", tokens, world_size, rank)");
    }
    if (!documents.is_none()) a.docs = documents_of(documents, rows, c);
    a.spec.heads = heads;
    a.spec.kv_heads = k.shape(1);
    a.spec.head_dim = head_dim;
    a.spec.mask = mask_of(causal, window);
    a.spec.dtype = ringattn::parse_dtype(dtype);
    if (scale) {
      if (!(*scale > 0) || *scale > 3.4e38) bad(c + ": scale = " + std::to_string(*scale) + " must be positive");
      a.spec.scale = static_cast<float>(*scale);
    }
    return a;
  }

  // The arrays' shape against the ring's limits, before any output is allocated from it
  // (the library checks the same, but only once it is called with those outputs).
  void check_shape(const std::string& call, const char* what, py::ssize_t rows, py::ssize_t heads, py::ssize_t kv_heads,
                   py::ssize_t head_dim) const {
    const std::string where = "rank " + std::to_string(rank_) + ": " + call + ": ";
    if (rows > limits_.max_rows)
      bad(where + std::to_string(rows) + " " + what + " exceed the ring's max_rows = " + std::to_string(limits_.max_rows) +
          " (set max_rows= when connecting)");
    if (heads > limits_.max_heads || kv_heads > limits_.max_kv_heads || head_dim > limits_.max_head_dim)
      bad(where + "heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) + ", head_dim " +
          std::to_string(head_dim) + " exceed the ring's limits (" + std::to_string(limits_.max_heads) + "/" +
          std::to_string(limits_.max_kv_heads) + ", " + std::to_string(limits_.max_head_dim) +
          "; set max_heads=, max_kv_heads=, max_head_dim= when connecting)");
  }

  static std::span<const float> floats(const py::array& a) {
    return {static_cast<const float*>(a.data()), static_cast<std::size_t>(a.size())};
  }

  static ringattn::Schedule schedule_of(const std::string& name, const char* call) {
    if (name == "ring") return ringattn::Schedule::ring;
    if (name == "ulysses") return ringattn::Schedule::ulysses;
    if (name == "hybrid") return ringattn::Schedule::hybrid;
    bad(std::string(call) + ": schedule '" + name + "' is not one of 'ring', 'ulysses', 'hybrid'");
    return ringattn::Schedule::ring;
  }

  // Ring's call description of a call's checked arguments, its schedule and its scope.
  static ringattn::AttentionCall call_of(const CallArgs& a, const std::string& schedule, const std::string& scope,
                                         const char* call) {
    ringattn::AttentionCall c{a.spec, floats(a.q), floats(a.k), floats(a.v),
                              std::span<const std::int64_t>(a.pos.data(), static_cast<std::size_t>(a.pos.size()))};
    if (a.docs) c.documents = std::span<const std::int32_t>(a.docs->data(), static_cast<std::size_t>(a.docs->size()));
    c.schedule = schedule_of(schedule, call);
    c.scope = scope_of(scope, call);
    return c;
  }

  py::tuple forward(const py::object& q_obj, const py::object& k_obj, const py::object& v_obj,
                    const py::object& positions, const py::object& documents, bool causal,
                    std::optional<std::int64_t> window, const std::string& dtype, std::optional<double> scale,
                    const std::string& schedule, const std::string& scope) {
    const CallArgs a = call_args("forward", q_obj, k_obj, v_obj, positions, documents, causal, window, dtype, scale);
    const ringattn::AttentionCall c = call_of(a, schedule, scope, "forward");
    const py::ssize_t rows = a.q.shape(0), heads = a.q.shape(1), head_dim = a.q.shape(2);
    py::array_t<float> o({rows, heads, head_dim});
    py::array_t<float> lse({rows, heads});
    const auto n = [](const py::array& x) { return static_cast<std::size_t>(x.size()); };
    const std::span<float> os(o.mutable_data(), n(o)), ls(lse.mutable_data(), n(lse));
    ringattn::ForwardStats st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard call(call_mu_);
      const auto ring = get();
      if (!ring) throw ringattn::Error("rank " + std::to_string(rank_) + ": this ring is closed");
      st = ring->forward(c, os, ls);
    }
    stats_ = st;
    return py::make_tuple(o, lse);
  }

  py::tuple backward(const py::object& q_obj, const py::object& k_obj, const py::object& v_obj,
                     const py::object& o_obj, const py::object& lse_obj, const py::object& d_o_obj,
                     const py::object& positions, const py::object& documents, bool causal,
                     std::optional<std::int64_t> window, const std::string& dtype, std::optional<double> scale,
                     const std::string& schedule, const std::string& scope) {
    const CallArgs a = call_args("backward", q_obj, k_obj, v_obj, positions, documents, causal, window, dtype, scale);
    const ringattn::AttentionCall c = call_of(a, schedule, scope, "backward");
    const py::ssize_t rows = a.q.shape(0), heads = a.q.shape(1), head_dim = a.q.shape(2);
    const py::array o = tensor(o_obj, "o", "[tokens, heads, head_dim] (forward's o)", "backward");
    const py::array d_o = tensor(d_o_obj, "d_o", "[tokens, heads, head_dim] (the loss's gradient of o)", "backward");
    for (const auto* x : {&o, &d_o})
      if (x->shape(0) != rows || x->shape(1) != heads || x->shape(2) != head_dim)
        bad(std::string("backward: ") + (x == &o ? "o" : "d_o") + " has shape " + shape_of(*x) + " but q has " +
            shape_of(a.q) + "; they must match");
    if (!py::isinstance<py::array>(lse_obj)) bad("backward: lse must be the numpy array forward() returned, not " + type_name(lse_obj));
    const auto lse = py::reinterpret_borrow<py::array>(lse_obj);
    if (!lse.dtype().equal(py::dtype::of<float>()) || lse.ndim() != 2 || lse.shape(0) != rows || lse.shape(1) != heads ||
        !(lse.flags() & py::array::c_style))
      bad("backward: lse has dtype " + std::string(py::str(lse.dtype())) + " and shape " + shape_of(lse) +
          "; expected float32 (" + std::to_string(rows) + ", " + std::to_string(heads) + "), C-contiguous: the lse forward() returned");
    py::array_t<float> dq({rows, heads, head_dim});
    py::array_t<float> dk({rows, a.k.shape(1), head_dim});
    py::array_t<float> dv({rows, a.k.shape(1), head_dim});
    const auto n = [](const py::array& x) { return static_cast<std::size_t>(x.size()); };
    const std::span<float> dqs(dq.mutable_data(), n(dq)), dks(dk.mutable_data(), n(dk)), dvs(dv.mutable_data(), n(dv));
    ringattn::BackwardStats st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard call(call_mu_);
      const auto ring = get();
      if (!ring) throw ringattn::Error("rank " + std::to_string(rank_) + ": this ring is closed");
      st = ring->backward(c, {floats(o), floats(lse), floats(d_o), dqs, dks, dvs});
    }
    backward_stats_ = st;
    return py::make_tuple(dq, dk, dv);
  }

  py::dict last_backward_stats() const {
    using namespace py::literals;
    const auto& s = backward_stats_;
    return py::dict("seconds"_a = s.seconds, "compute_seconds"_a = s.compute_seconds, "wait_seconds"_a = s.wait_seconds,
                    "useful_flops"_a = s.useful_flops, "steps"_a = s.steps, "steps_skipped"_a = s.steps_skipped,
                    "bytes_sent"_a = s.bytes_sent);
  }

  static ringattn::Scope scope_of(const std::string& name, const char* call) {
    if (name == "ring") return ringattn::Scope::ring;
    if (name == "group") return ringattn::Scope::group;
    if (name == "across") return ringattn::Scope::across;
    bad(std::string(call) + ": scope '" + name + "' is not one of 'ring', 'group', 'across'");
  }

  // An array the collective writes in place: float32, C-contiguous, writable.
  static std::span<float> inplace(const py::object& obj, const char* call) {
    if (!py::isinstance<py::array>(obj)) bad(std::string(call) + ": data must be a numpy float32 array, not " + type_name(obj));
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().equal(py::dtype::of<float>()) || !(a.flags() & py::array::c_style) || !a.writeable())
      bad(std::string(call) + ": data must be float32, C-contiguous and writable (it is reduced in place), not " +
          std::string(py::str(a.dtype())) + " " + shape_of(a));
    return {static_cast<float*>(a.mutable_data()), static_cast<std::size_t>(a.size())};
  }

  py::dict all_reduce(const py::object& data, const std::string& scope) {
    const ringattn::Scope s = scope_of(scope, "all_reduce");
    const std::span<float> d = inplace(data, "all_reduce");
    ringattn::CollectiveStats st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard call(call_mu_);
      st = get_open("all_reduce")->all_reduce(d, s);
    }
    using namespace py::literals;
    return py::dict("seconds"_a = st.seconds, "wait_seconds"_a = st.wait_seconds, "bytes_sent"_a = st.bytes_sent);
  }

  py::dict all_gather(const py::object& data, const std::vector<std::size_t>& counts, const std::string& scope) {
    const ringattn::Scope s = scope_of(scope, "all_gather");
    const std::span<float> d = inplace(data, "all_gather");
    ringattn::CollectiveStats st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard call(call_mu_);
      st = get_open("all_gather")->all_gather(d, counts, s);
    }
    using namespace py::literals;
    return py::dict("seconds"_a = st.seconds, "wait_seconds"_a = st.wait_seconds, "bytes_sent"_a = st.bytes_sent);
  }

  int scope_rank(const std::string& scope) { return get_open("scope_rank")->scope_rank(scope_of(scope, "scope_rank")); }
  int scope_size(const std::string& scope) { return get_open("scope_size")->scope_size(scope_of(scope, "scope_size")); }

  py::tuple decode(const py::object& q_obj, const py::object& k_obj, const py::object& v_obj, ringattn::KVCache& cache,
                   const py::object& sequences, const py::object& positions, bool causal, std::optional<std::int64_t> window,
                   std::optional<double> scale, const std::string& scope) {
    const ringattn::Scope in = scope_of(scope, "decode");
    const py::array q = tensor(q_obj, "q", "[tokens, heads, head_dim]", "decode");
    const py::array k = tensor(k_obj, "k", "[tokens, kv_heads, head_dim]", "decode");
    const py::array v = tensor(v_obj, "v", "[tokens, kv_heads, head_dim]", "decode");
    const py::ssize_t rows = q.shape(0), heads = q.shape(1), head_dim = q.shape(2);
    if (k.shape(0) != rows || k.shape(2) != head_dim || v.shape(0) != rows || v.shape(1) != k.shape(1) ||
        v.shape(2) != head_dim)
      bad("decode: q " + shape_of(q) + ", k " + shape_of(k) + " and v " + shape_of(v) +
          " must be [tokens, heads, head_dim] and [tokens, kv_heads, head_dim] with the same tokens and head_dim");
    check_shape("decode", "tokens", rows, heads, k.shape(1), head_dim);
    const auto pos = positions_of(positions, rows, "decode");
    const auto seqs = documents_of(sequences, rows, "decode", "sequences");
    ringattn::AttentionSpec spec;
    spec.heads = heads;
    spec.kv_heads = k.shape(1);
    spec.head_dim = head_dim;
    spec.mask = mask_of(causal, window);
    spec.dtype = cache.dtype();
    if (scale) {
      if (!(*scale > 0) || *scale > 3.4e38) bad("decode: scale = " + std::to_string(*scale) + " must be positive");
      spec.scale = static_cast<float>(*scale);
    }
    py::array_t<float> o({rows, heads, head_dim});
    py::array_t<float> lse({rows, heads});
    const auto n = [](const py::array& a) { return static_cast<std::size_t>(a.size()); };
    ringattn::DecodeStats st;
    {
      py::gil_scoped_release nogil;
      std::lock_guard call(call_mu_);
      const auto ring = get();
      if (!ring) throw ringattn::Error("rank " + std::to_string(rank_) + ": this ring is closed");
      const ringattn::AttentionCall c{spec,
                                      std::span<const float>(static_cast<const float*>(q.data()), n(q)),
                                      std::span<const float>(static_cast<const float*>(k.data()), n(k)),
                                      std::span<const float>(static_cast<const float*>(v.data()), n(v)),
                                      std::span<const std::int64_t>(pos.data(), n(pos)),
                                      std::span<const std::int32_t>(seqs.data(), n(seqs)),
                                      ringattn::Schedule::ring,
                                      in};
      st = ring->decode(c, cache, std::span<float>(o.mutable_data(), n(o)), std::span<float>(lse.mutable_data(), n(lse)));
    }
    decode_stats_ = st;
    return py::make_tuple(o, lse);
  }

  py::dict last_decode_stats() const {
    using namespace py::literals;
    const auto& s = decode_stats_;
    return py::dict("seconds"_a = s.seconds, "compute_seconds"_a = s.compute_seconds, "wait_seconds"_a = s.wait_seconds,
                    "tokens"_a = s.tokens, "cache_rows"_a = s.cache_rows, "bytes_sent"_a = s.bytes_sent);
  }

  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard call(call_mu_);  // after a call on another thread
    std::shared_ptr<ringattn::Ring> ring;
    {
      std::lock_guard lock(ring_mu_);
      ring.swap(ring_);
    }
    if (ring) ring->close();  // and the last reference frees the pooled buffers, GIL still released
  }

  // Ring::inject_fault, for tests of how a ring meets a failing rank.
  void inject_fault(const std::string& fault, int step, double slow_seconds) {
    using F = ringattn::Ring::Fault;
    F f;
    if (fault == "exit") f = F::exit;
    else if (fault == "hang") f = F::hang;
    else if (fault == "slow") f = F::slow;
    else if (fault == "corrupt") f = F::corrupt;
    else throw ringattn::InvalidArgument("inject_fault: fault must be exit, hang, slow or corrupt, got '" + fault + "'");
    py::gil_scoped_release nogil;
    std::lock_guard call(call_mu_);  // a call on another thread reads the hook at every step
    const auto ring = get();
    if (!ring) throw ringattn::InvalidArgument("inject_fault: the ring is closed");
    ring->inject_fault(f, step, slow_seconds);
  }

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  bool closed() { return !get(); }
  bool broken() {
    const auto ring = get();
    return ring && ring->broken();
  }
  std::string broken_reason() {
    const auto ring = get();
    return ring ? ring->broken_reason() : std::string();
  }
  py::dict last_stats() const {
    using namespace py::literals;
    return py::dict("seconds"_a = stats_.seconds, "compute_seconds"_a = stats_.compute_seconds,
                    "wait_seconds"_a = stats_.wait_seconds, "useful_flops"_a = stats_.useful_flops,
                    "steps"_a = stats_.steps, "steps_skipped"_a = stats_.steps_skipped,
                    "bytes_sent"_a = stats_.bytes_sent);
  }

 private:
  std::shared_ptr<ringattn::Ring> get() {
    std::lock_guard lock(ring_mu_);
    return ring_;
  }
  std::shared_ptr<ringattn::Ring> get_open(const char* call) {
    auto r = get();
    if (!r) throw ringattn::Error("rank " + std::to_string(rank_) + ": " + call + ": this ring is closed");
    return r;
  }

  std::mutex call_mu_, ring_mu_;
  std::shared_ptr<ringattn::Ring> ring_;
  int rank_, world_;
  ringattn::RingLimits limits_;
  ringattn::ForwardStats stats_;
  ringattn::DecodeStats decode_stats_;
  ringattn::BackwardStats backward_stats_;
};

// --- logging -----------------------------------------------------------------------
// The Python callable lives here (touched only with the GIL held); the C++ sink installed
// once looks it up per line, so replacing it never destroys a Python object without the GIL.
py::object* g_sink_fn = nullptr;
std::atomic<bool> g_sink_installed{false};

void python_sink(ringattn::LogLevel level, std::string_view logger, std::string_view message) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (!g_sink_fn || g_sink_fn->is_none()) return;
  // Our own reference: the callable may replace or remove itself (set_log_sink) while it runs.
  const py::object fn = *g_sink_fn;
  try {
    fn(std::string(ringattn::to_string(level)), std::string(logger), std::string(message));
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("ringattn log sink");
  }
}

void set_log_sink(const py::object& fn) {
  if (!fn.is_none() && !PyCallable_Check(fn.ptr()))
    bad("set_log_sink: expected a callable (level, logger, message) or None, not " + type_name(fn));
  if (fn.is_none()) {
    {
      py::gil_scoped_release nogil;
      ringattn::set_log_sink({});
    }
    g_sink_installed = false;
    *g_sink_fn = py::none();
    return;
  }
  *g_sink_fn = fn;
  if (!g_sink_installed.exchange(true)) {
    py::gil_scoped_release nogil;
    ringattn::set_log_sink(python_sink);
  }
}

PyRing::~PyRing() {
  // Closing may log; with a Python sink installed the line needs the GIL.
  if (g_sink_installed) {
    py::gil_scoped_release nogil;
    ring_.reset();
  }
}

std::unique_ptr<PyRing> make_ring(int rank, int world_size, std::optional<std::vector<std::string>> peers,
                              std::optional<std::string> master, std::optional<std::string> token,
                              std::optional<std::string> token_file, std::optional<std::string> listen, int threads,
                              double timeout, double connect_timeout, bool tls, std::uint64_t ring_id,
                              std::int64_t max_rows, std::int64_t max_heads, std::int64_t max_kv_heads,
                              std::int64_t max_head_dim, std::optional<std::string> isa, bool all_pairs, int group_size) {
  ringattn::RingOptions o;
  o.rank = rank;
  o.world_size = world_size;
  if (peers) o.peers = *peers;
  if (master) o.master = *master;
  if (token) o.token = *token;
  if (token_file) o.token_file = *token_file;
  if (listen) o.listen = *listen;
  if (threads < 0 || threads > ringattn::kMaxThreads)
    bad("Ring: threads = " + std::to_string(threads) + " must be in 0.." + std::to_string(ringattn::kMaxThreads) +
        " (0: all cores)");
  o.threads = threads;
  o.timeout = timeout;
  o.connect_timeout = connect_timeout;
  o.tls = tls;
  o.ring_id = ring_id;
  o.all_pairs = all_pairs;
  o.group_size = group_size;
  o.limits.max_rows = max_rows;
  o.limits.max_heads = max_heads;
  o.limits.max_kv_heads = max_kv_heads;
  o.limits.max_head_dim = max_head_dim;
  if (isa) o.isa = ringattn::parse_isa(*isa);
  return PyRing::connect(o);
}

PyObject* new_exception(py::module_& m, const char* name, const char* doc, py::tuple bases) {
  const std::string full = std::string("ringattn.") + name;
  PyObject* e = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (!e) throw py::error_already_set();
  m.add_object(name, py::handle(e));  // the module holds one reference; ours is never released
  return e;
}

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const ringattn::NetworkError& e) {
    py::object exc = py::reinterpret_borrow<py::object>(g_exc.network_error)(e.what());
    exc.attr("cause") = std::string(ringattn::to_string(e.cause()));
    exc.attr("origin_rank") = e.origin_rank();
    PyErr_SetObject(g_exc.network_error, exc.ptr());
  } catch (const ringattn::InvalidArgument& e) {
    PyErr_SetString(g_exc.invalid_argument, e.what());
  } catch (const ringattn::FileError& e) {
    PyErr_SetString(g_exc.file_error, e.what());
  } catch (const ringattn::Error& e) {
    PyErr_SetString(g_exc.error, e.what());
  }
}

// The module's parts, each its own function: its exceptions, Ring, KVCache, the layouts'
// helpers and logging.
void add_exceptions(py::module_& m) {
  g_exc.error = new_exception(m, "Error", "Any failure of the ring library.", py::make_tuple(py::handle(PyExc_RuntimeError)));
  g_exc.invalid_argument = new_exception(
      m, "InvalidArgument",
      "A bad argument or option, found before anything was sent: the ring stays usable (the other ranks, "
      "if they made the call, time out). Also a ValueError.",
      py::make_tuple(py::handle(g_exc.error), py::handle(PyExc_ValueError)));
  g_exc.network_error = new_exception(
      m, "NetworkError",
      "A peer died, stalled, fell silent for `timeout`, disagreed or sent a corrupt frame: the ring is broken "
      "(ring.broken is True, every later call raises). Attributes: cause (str: local, peer_silent, peer_stalled, "
      "peer_closed, mismatch, auth, protocol, unknown) and origin_rank (int, -1 if unknown).",
      py::make_tuple(py::handle(g_exc.error)));
  g_exc.file_error = new_exception(m, "FileError", "A file (e.g. token_file) is missing, unreadable or unsafe.",
                                   py::make_tuple(py::handle(g_exc.error), py::handle(PyExc_OSError)));
  py::register_exception_translator(translate);

}

void add_ring(py::module_& m) {
  using namespace py::literals;
  py::class_<PyRing>(m, "Ring",
                     "A connected ring: connect once (the constructor or from_env), then forward() per call on "
                     "every rank, in the same order with the same shapes. One call at a time per Ring.")
      .def(py::init(&make_ring), py::kw_only(), "rank"_a, "world_size"_a, "peers"_a = py::none(), "master"_a = py::none(),
           "token"_a = py::none(), "token_file"_a = py::none(), "listen"_a = py::none(), "threads"_a = 0,
           "timeout"_a = 30.0, "connect_timeout"_a = 60.0, "tls"_a = false, "ring_id"_a = 0,
           "max_rows"_a = ringattn::RingLimits{}.max_rows, "max_heads"_a = ringattn::RingLimits{}.max_heads,
           "max_kv_heads"_a = ringattn::RingLimits{}.max_kv_heads, "max_head_dim"_a = ringattn::RingLimits{}.max_head_dim,
           "isa"_a = py::none(), "all_pairs"_a = false, "group_size"_a = 1)
      .def_static("from_env", [] { return PyRing::connect(ringattn::RingOptions::from_env()); },
                  "Connects with the options of the environment (RINGATTN_*, Slurm, Open MPI, PMI, torchrun "
                  "variables; see the C++ RingOptions::from_env).")
      .def("forward", &PyRing::forward, "q"_a, "k"_a, "v"_a, py::kw_only(), "positions"_a = py::none(),
           "documents"_a = py::none(), "causal"_a = false, "window"_a = py::none(), "dtype"_a = "fp32", "scale"_a = py::none(),
           "schedule"_a = "ring", "scope"_a = "ring",
           "Attention of this rank's rows over every rank's keys. q [rows, heads, head_dim], k and v "
           "[rows, kv_heads, head_dim]: float32, C-contiguous. positions: the rows' strictly increasing global "
           "positions (default 0..rows-1, only at world_size 1). window=W: causal sliding window of W tokens. "
           "documents: a packed batch's document id per row (non-decreasing; every rank passes them or none): "
           "a query sees only keys of its own document, e.g. from ringattn.shard_documents(). "
           "dtype 'fp32' or 'bf16' (bf16 K/V on the wire, fp32 state). Returns (o [rows, heads, head_dim], "
           "lse [rows, heads]) float32; a row that sees no key gets o = 0 and lse = -inf. schedule: 'ring' (K/V "
           "blocks around the ring), 'ulysses' (an all-to-all to a head split; connect with all_pairs=True) or "
           "'hybrid' (Ulysses inside groups of group_size consecutive ranks, the ring across them): the same "
           "attention, every rank calling with the same schedule. scope (schedule 'ring'): 'ring' (every rank), 'group' "
           "(this rank's group of group_size consecutive ranks) or 'across' (the same place in every group: tensor "
           "parallelism's attention).")
      .def("backward", &PyRing::backward, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a, "d_o"_a, py::kw_only(),
           "positions"_a = py::none(), "documents"_a = py::none(), "causal"_a = false, "window"_a = py::none(),
           "dtype"_a = "fp32", "scale"_a = py::none(), "schedule"_a = "ring", "scope"_a = "ring",
           "The gradients of forward() (by the schedule forward() used, or any other: the same attention): given forward's q, k, v and options (every rank calls, with the same "
           "ones), its o and lse, and d_o = dLoss/do [rows, heads, head_dim] float32, returns (dq [rows, heads, "
           "head_dim], dk, dv [rows, kv_heads, head_dim]) float32: exactly dense attention's gradients for this "
           "rank's rows. The K/V blocks go around the ring again with their fp32 gradient accumulators.")
      .def_property_readonly("last_backward_stats", &PyRing::last_backward_stats, "Timings and bytes of the last backward().")
      .def("all_reduce", &PyRing::all_reduce, "data"_a, py::kw_only(), "scope"_a = "ring",
           "Sums data (float32, C-contiguous) in place over the ranks of scope: 'ring' (all), 'group' (this rank's "
           "group of group_size consecutive ranks) or 'across' (the same place in every group); every rank of the "
           "scope calls alike and ends with the same bits. Returns the call's stats.")
      .def("all_gather", &PyRing::all_gather, "data"_a, "counts"_a, py::kw_only(), "scope"_a = "ring",
           "data holds every scope rank's chunk end to end (counts[i] floats from scope rank i, this rank's filled "
           "in); fills the others in place.")
      .def("scope_rank", &PyRing::scope_rank, "scope"_a, "This rank's place in a scope ('ring', 'group', 'across').")
      .def("scope_size", &PyRing::scope_size, "scope"_a, "The number of ranks in a scope.")
      .def("decode", &PyRing::decode, "q"_a, "k"_a, "v"_a, py::kw_only(), "cache"_a, "sequences"_a, "positions"_a,
           "causal"_a = true, "window"_a = py::none(), "scale"_a = py::none(), "scope"_a = "ring",
           "One decode step on stationary KV shards (scope as forward()'s): this rank's new tokens (any number, 0 included; every rank "
           "calls). q [n, heads, head_dim], k and v [n, kv_heads, head_dim] float32; sequences [n] (ids >= 0) and "
           "positions [n] (each after its sequence's cached positions). Each token's k and v are appended to the "
           "cache of rank decode_store_rank(sequence, position); every rank's queries visit every rank's cache "
           "(the cache never moves) and the partial states come back to this rank. cache: this layer's KVCache; "
           "its dtype is the call's; no other thread may use it during the call. A failed call leaves every rank's "
           "cache as it was. Returns (o [n, heads, head_dim], lse [n, heads]).")
      .def_property_readonly("last_decode_stats", &PyRing::last_decode_stats, "Timings and bytes of the last decode().")
      .def("inject_fault", &PyRing::inject_fault, "fault"_a, "step"_a, "slow_seconds"_a = 0.0,
           "For tests of failure handling only (never in production): from the next call on, at ring step `step` "
           "of every forward() and backward() this rank misbehaves: 'exit' dies abruptly (exit status 17), 'hang' "
           "stops sending, 'slow' takes slow_seconds longer while its progress counter ticks, 'corrupt' (step >= 1) "
           "flips a byte of the block it relays. ValueError for an unknown fault or a step outside the ring.")
      .def("close", &PyRing::close, "Says goodbye to the peers and releases the ring. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyRing& r, const py::args&) { r.close(); return false; })
      .def_property_readonly("rank", &PyRing::rank)
      .def_property_readonly("world_size", &PyRing::world_size)
      .def_property_readonly("closed", &PyRing::closed)
      .def_property_readonly("broken", &PyRing::broken, "True once a call failed for a network reason.")
      .def_property_readonly("broken_reason", &PyRing::broken_reason)
      .def_property_readonly("last_stats", &PyRing::last_stats, "Timings and bytes of the last forward().")
      .def("__repr__", [](PyRing& r) {
        return "<ringattn.Ring rank " + std::to_string(r.rank()) + " of " + std::to_string(r.world_size()) +
               (r.closed() ? ", closed>" : r.broken() ? ", broken>" : ">");
      });
}

void add_cache(py::module_& m) {
  using namespace py::literals;
  py::class_<ringattn::KVCache>(m, "KVCache",
                                "One layer's K/V rows on this rank, per sequence, for Ring.decode(): the library "
                                "owns the memory. dtype 'fp32' or 'bf16' (storage; the decode call's dtype). Not "
                                "thread-safe: one thread at a time, also while Ring.decode uses it.")
      .def(py::init([](std::int64_t kv_heads, std::int64_t head_dim, const std::string& dtype) {
             return ringattn::KVCache(kv_heads, head_dim, ringattn::parse_dtype(dtype));
           }),
           "kv_heads"_a, "head_dim"_a, "dtype"_a = "fp32")
      .def(
          "append",
          [](ringattn::KVCache& c, std::int32_t sequence, const py::object& positions, const py::object& k,
             const py::object& v) {
            const py::array ka = tensor(k, "k", "[rows, kv_heads, head_dim]", "KVCache.append");
            const py::array va = tensor(v, "v", "[rows, kv_heads, head_dim]", "KVCache.append");
            const auto pos = positions_of(positions, ka.shape(0), "KVCache.append");
            c.append(sequence, std::span<const std::int64_t>(pos.data(), static_cast<std::size_t>(pos.size())),
                     std::span<const float>(static_cast<const float*>(ka.data()), static_cast<std::size_t>(ka.size())),
                     std::span<const float>(static_cast<const float*>(va.data()), static_cast<std::size_t>(va.size())));
          },
          "sequence"_a, "positions"_a, "k"_a, "v"_a,
          "Appends rows of one sequence (positions after its cached ones; k, v float32 [rows, kv_heads, head_dim]).")
      .def(
          "append_packed",
          [](ringattn::KVCache& c, const py::object& positions, const py::object& documents, const py::object& k,
             const py::object& v) {
            const py::array ka = tensor(k, "k", "[rows, kv_heads, head_dim]", "KVCache.append_packed");
            const py::array va = tensor(v, "v", "[rows, kv_heads, head_dim]", "KVCache.append_packed");
            const auto pos = positions_of(positions, ka.shape(0), "KVCache.append_packed");
            const auto docs = documents_of(documents, ka.shape(0), "KVCache.append_packed");
            c.append_packed(std::span<const std::int64_t>(pos.data(), static_cast<std::size_t>(pos.size())),
                            std::span<const std::int32_t>(docs.data(), static_cast<std::size_t>(docs.size())),
                            std::span<const float>(static_cast<const float*>(ka.data()), static_cast<std::size_t>(ka.size())),
                            std::span<const float>(static_cast<const float*>(va.data()), static_cast<std::size_t>(va.size())));
          },
          "positions"_a, "documents"_a, "k"_a, "v"_a,
          "Keeps a packed prefill's rows as they were passed to forward(): row i belongs to sequence documents[i].")
      .def("erase", &ringattn::KVCache::erase, "sequence"_a, "Frees a finished sequence's rows.")
      .def("truncate", &ringattn::KVCache::truncate, "sequence"_a, "rows"_a,
           "Keeps the first `rows` rows of a sequence (takes back rejected speculative tokens).")
      .def("clear", &ringattn::KVCache::clear)
      .def("rows_of", py::overload_cast<std::int32_t>(&ringattn::KVCache::rows, py::const_), "sequence"_a)
      .def_property_readonly("rows", py::overload_cast<>(&ringattn::KVCache::rows, py::const_))
      .def_property_readonly("bytes", &ringattn::KVCache::bytes)
      .def_property_readonly("sequences", &ringattn::KVCache::sequences)
      .def_property_readonly("dtype", [](const ringattn::KVCache& c) { return std::string(ringattn::to_string(c.dtype())); });
}

void add_layouts(py::module_& m) {
  using namespace py::literals;
  m.def("decode_store_rank", &ringattn::decode_store_rank, "sequence"_a, "position"_a, "world_size"_a,
        "The rank whose cache stores the decode token of `sequence` at `position`: (sequence + position) mod world_size.");
  m.def(
      "shard_positions",
      [](const std::string& layout, std::int64_t tokens, int world, int rank) {
        const ringattn::Positions shard = ringattn::shard_positions(ringattn::parse_layout(layout), tokens, world, rank);
        // Materialized below: a shard no ring could take is refused before it is allocated.
        if (shard.size() > ringattn::kMaxRankRows)
          bad("shard_positions: rank " + std::to_string(rank) + " would hold " + std::to_string(shard.size()) +
              " rows, more than " + std::to_string(ringattn::kMaxRankRows) +
              " (the ceiling of a ring's max_rows); use more ranks or fewer tokens");
        std::vector<std::int64_t> p = shard.materialize();
        py::array_t<std::int64_t> out(static_cast<py::ssize_t>(p.size()));
        std::copy(p.begin(), p.end(), out.mutable_data());
        return out;
      },
      "layout"_a, "tokens"_a, "world"_a, "rank"_a,
      "The global positions (= row indices of the whole sequence) that `rank` of `world` holds under "
      "layout 'contiguous', 'zigzag' or 'striped', as an int64 array.");

  m.def(
      "shard_documents",
      [](const py::object& cu_seqlens, int world) {
        const auto shards = ringattn::shard_documents(cu_seqlens_of(cu_seqlens), world);
        py::list out;
        for (const auto& s : shards) out.append(py::make_tuple(to_array(s.positions), to_array(s.documents)));
        return out;
      },
      "cu_seqlens"_a, "world"_a,
      "A packed batch (cumulative lengths from 0, flash-attn's cu_seqlens) balanced over `world` ranks: a list of "
      "(positions int64, documents int32) per rank, for forward(positions=, documents=). Documents of at least "
      "2*world tokens are dealt as zigzag chunk pairs, shorter ones whole to the least-loaded rank.");
  m.def(
      "visible_pairs",
      [](const py::object& cu_seqlens, const py::list& shards, bool causal, std::optional<std::int64_t> window) {
        std::vector<ringattn::PackedShard> ss;
        for (const auto& item : shards) {
          const auto t = item.cast<py::tuple>();
          if (t.size() != 2) bad("visible_pairs: every shard must be a (positions, documents) pair");
          const auto p = positions_of(t[0], py::len(t[0]));
          const auto d = documents_of(t[1], py::len(t[0]));
          ss.push_back({{p.data(), p.data() + p.size()}, {d.data(), d.data() + d.size()}});
        }
        return ringattn::visible_pairs(cu_seqlens_of(cu_seqlens), ss, mask_of(causal, window));
      },
      "cu_seqlens"_a, "shards"_a, py::kw_only(), "causal"_a = false, "window"_a = py::none(),
      "Useful work per shard: the (query, key) pairs its rows see within their documents; max/mean measures "
      "the balance of a sharding.");

}

void add_logging(py::module_& m) {
  using namespace py::literals;
  g_sink_fn = new py::object(py::none());
  m.def("set_log_sink", &set_log_sink, "sink"_a,
        "Sends the library's log lines to sink(level: str, logger: str, message: str) instead of stderr "
        "(called from the library's threads, with the GIL); None restores stderr.");
  m.def(
      "set_log_level",
      [](const std::string& level, std::optional<std::string> logger) {
        const auto l = ringattn::parse_log_level(level);
        if (logger) ringattn::set_log_level(*logger, l);
        else ringattn::set_log_level(l);
      },
      "level"_a, "logger"_a = py::none(),
      "Level (trace, debug, info, warn, error, off) of every logger, or of one ('net', 'ring', 'kern').");
  m.def("set_log_levels", [](const std::string& spec) { ringattn::set_log_levels(spec); }, "spec"_a,
        "spdlog's syntax: 'warn' or 'warn,net=debug,kern=off'.");
  // Before the interpreter goes, so that no library thread calls into a dead one.
  py::module_::import("atexit").attr("register")(py::cpp_function([] { set_log_sink(py::none()); }));
}

}  // namespace

PYBIND11_MODULE(ringattn, m) {
  using namespace py::literals;
  m.doc() =
      "Exact ring attention across processes and servers over TCP.\n\n"
      "ring = ringattn.Ring.from_env()  # or Ring(rank=, world_size=, master= or peers=, token=)\n"
      "o, lse = ring.forward(q, k, v, positions=ringattn.shard_positions('zigzag', n, ring.world_size, "
      "ring.rank), causal=True)";
  m.attr("__version__") = RINGATTN_VERSION;
  // ringattn.torch and any later Python submodule live in ringattn_extras/ beside this
  // file (python/ringattn_extras/): a __path__ makes `import ringattn.torch` find them
  // there, and only then is torch imported.
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&set_log_sink), &self) && self.dli_fname) {
    const std::string file = self.dli_fname;
    py::list path;
    path.append(file.substr(0, file.rfind('/') + 1) + "ringattn_extras");
    m.attr("__path__") = path;
  }

  add_exceptions(m);
  add_ring(m);
  add_cache(m);
  add_layouts(m);
  add_logging(m);
}
