#include "serve_config.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <thread>

#include <toml++/toml.h>

#include "ringattn/split.hpp"
#include "ringattn/launch.hpp"
#include "ringattn/block_attention.hpp"
#include "ringattn/error.hpp"
#include "../../infer/job/job_options_table.hpp"

namespace ringattn::serve {
namespace {

enum class Kind { integer, real, boolean, text, list };

struct Key {
  std::string name;   // TOML key; the flag is the same with '-' for '_'
  Kind kind;
  std::string value;  // placeholder in --help
  std::string help;
  std::vector<const char*> env;  // variables, first set wins
  const infer::JobOption* job = nullptr;  // a job option: read and stored through its table
};

// A job option (infer/job/job_options_table.hpp) as a key of serve's, in its place in --help.
Key job_key(std::string_view name) {
  for (const infer::JobOption& o : infer::job_options()) {
    if (name != o.name) continue;
    const infer::Spelling& s = o.spelling(infer::Program::serve);
    if (!s.flag || !o.env) throw std::logic_error("serve: job option " + std::string(name) + " has no key or variable of serve's");
    std::string key = s.flag;
    std::replace(key.begin(), key.end(), '-', '_');
    const Kind kind = o.kind == infer::OptionKind::whole  ? Kind::integer
                      : o.kind == infer::OptionKind::real ? Kind::real
                      : o.kind == infer::OptionKind::flag ? Kind::boolean
                                                          : Kind::text;
    return {key, kind, o.value, infer::job_option_help(o, infer::Program::serve, true), {o.env}, &o};
  }
  throw std::logic_error("serve: no job option " + std::string(name));
}

// Every job option serve spells is among its keys, once.
void check_job_keys(const std::vector<Key>& keys) {
  for (const infer::JobOption& o : infer::job_options()) {
    if (!o.taken_by(infer::Program::serve)) continue;
    const auto n = std::count_if(keys.begin(), keys.end(), [&](const Key& k) { return k.job == &o; });
    if (n != 1) throw std::logic_error("serve: job option " + std::string(o.name) + " is listed " + std::to_string(n) + " times");
  }
}

const std::vector<Key>& keys() {
  static const std::string isa_help = "force a kernel path: " + isa_names();
  static const std::vector<Key> k = {
      {"rank", Kind::integer, "R", "this daemon's rank, 0..world_size-1",
       {"RINGATTN_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "RANK"}},
      {"world_size", Kind::integer, "P", "number of daemons in the ring",
       {"RINGATTN_WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"}},
      {"peers", Kind::list, "LIST", "every rank's ring address host:port, comma-separated (or master)", {"RINGATTN_PEERS"}},
      {"master", Kind::text, "HOST:PORT", "rendezvous address: rank 0 serves it, the others register there",
       {"RINGATTN_MASTER"}},
      {"listen", Kind::text, "HOST[:PORT]", "where this rank's ring links listen (default: its --peers entry, or the "
                                            "interface towards the master, any port)", {"RINGATTN_LISTEN"}},
      {"control", Kind::text, "HOST:PORT", "where clients submit jobs and ask for status", {"RINGATTN_CONTROL"}},
      {"metrics", Kind::text, "HOST:PORT", "HTTP /metrics and /healthz ('off': none; default 127.0.0.1:9464, or a free "
                                         "loopback port when another daemon holds that)", {"RINGATTN_METRICS"}},
      {"token_file", Kind::text, "FILE", "the ring's shared secret, mode 0600 (default: RINGATTN_TOKEN)",
       {"RINGATTN_TOKEN_FILE"}},
      {"tls", Kind::boolean, "", "TLS 1.3 on every ring and control connection, keyed by the token", {"RINGATTN_TLS"}},
      job_key("threads"),
      {"isa", Kind::text, "ISA", isa_help.c_str(), {"RINGATTN_ISA"}},
      job_key("dtype"),
      {"max_rows", Kind::integer, "N", "largest shard (rows per rank) of a job", {"RINGATTN_MAX_ROWS"}},
      {"max_heads", Kind::integer, "N", "most query heads of a job", {"RINGATTN_MAX_HEADS"}},
      {"max_kv_heads", Kind::integer, "N", "most K/V heads of a job", {"RINGATTN_MAX_KV_HEADS"}},
      {"max_head_dim", Kind::integer, "N", "largest head dimension of a job", {"RINGATTN_MAX_HEAD_DIM"}},
      {"timeout", Kind::real, "S", "seconds a peer may stay silent or stall during a job", {"RINGATTN_TIMEOUT"}},
      {"connect_timeout", Kind::real, "S", "seconds one attempt to form the ring may take", {"RINGATTN_CONNECT_TIMEOUT"}},
      {"grace", Kind::real, "S", "after SIGTERM, seconds the running job may take before it is aborted",
       {"RINGATTN_GRACE"}},
      {"ring_id", Kind::integer, "N", "id shared by the ring's daemons; daemons of another ring are refused",
       {"RINGATTN_RING_ID"}},
      job_key("model"),
      job_key("tokenizer"),
      job_key("weights_dtype"),
      job_key("activations"),
      job_key("tp"),
      {"api", Kind::text, "HOST:PORT", "rank 0 with a model: the OpenAI-style HTTP endpoint (/v1/completions, "
                                       "/v1/chat/completions; 'off': none)", {"RINGATTN_API"}},
      {"api_key_file", Kind::text, "FILE", "the endpoint's bearer token, mode 0600 (default: the ring's token; 'none': "
                                           "no token, loopback only)", {"RINGATTN_API_KEY_FILE"}},
      {"cache_mib", Kind::real, "MIB", "KV-cache memory per daemon for the hosted model's requests and sessions "
                                         "(a request that does not fit is refused; default 1024)", {"RINGATTN_CACHE_MIB"}},
      {"session_ttl", Kind::real, "S", "seconds an idle session keeps its rows on every daemon (default 600)",
       {"RINGATTN_SESSION_TTL"}},
      {"prefill_chunk", Kind::integer, "T", "while replies stream, a step feeds at most T prompt tokens: longer prompts go in "
                                            "chunks, later arrivals wait a step (0: no bound; default 256)", {"RINGATTN_PREFILL_CHUNK"}},
      {"log_level", Kind::text, "LEVEL", "trace, debug, info, warn, error (the common --log-level)", {"RINGATTN_LOG_LEVEL"}},
      {"log_format", Kind::text, "FORMAT", "text, or json (one object per line, with the rank)", {"RINGATTN_LOG_FORMAT"}},
  };
  static const bool checked = (check_job_keys(k), true);
  (void)checked;
  return k;
}

bool loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// How many of the ring's daemons run on this host, from the addresses: with --peers, the
// entries on this rank's host (every loopback address being this host); with a loopback
// --master, all of them; else only this one (the log says so, and --threads corrects it).
int daemons_on_this_host(const RingOptions& r) {
  if (!r.peers.empty()) {
    const std::string own = parse_host_port(r.peers[static_cast<std::size_t>(r.rank)], "--peers").host;
    int n = 0;
    for (const auto& p : r.peers) {
      const std::string h = parse_host_port(p, "--peers").host;
      n += h == own || (loopback(h) && loopback(own));
    }
    return n;
  }
  if (!r.master.empty() && loopback(parse_host_port(r.master, "--master").host)) return r.world_size;
  return 1;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string flag_name(const std::string& key) {
  std::string f = key;
  for (char& c : f)
    if (c == '_') c = '-';
  return f;
}

struct Value {
  std::string text;
  std::string source;
};

// A TOML value as the same text a flag would give; throws naming the key on a wrong type.
std::string toml_text(const toml::node& n, const Key& k, const std::string& where) {
  const std::string name = where + ": " + k.name;
  switch (k.kind) {
    case Kind::integer:
      if (auto v = n.value<std::int64_t>()) return std::to_string(*v);
      break;
    case Kind::real:
      if (auto v = n.value<double>()) return std::to_string(*v);
      break;
    case Kind::boolean:
      if (auto v = n.value<bool>()) return *v ? "1" : "0";
      break;
    case Kind::text:
      if (auto v = n.value<std::string>()) return *v;
      break;
    case Kind::list:
      if (const auto* arr = n.as_array()) {
        std::string out;
        for (const auto& e : *arr) {
          auto s = e.value<std::string>();
          if (!s) throw InvalidArgument(name + " must be an array of \"host:port\" strings");
          out += (out.empty() ? "" : ",") + *s;
        }
        return out;
      }
      if (auto v = n.value<std::string>()) return *v;
      break;
  }
  static const char* what[] = {"a whole number", "a number", "true or false", "a string", "an array of strings"};
  throw InvalidArgument(name + " must be " + what[static_cast<int>(k.kind)]);
}

std::map<std::string, Value> from_file(const std::string& path) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& r = e.source().begin;
    throw InvalidArgument(path + ":" + std::to_string(r.line) + ":" + std::to_string(r.column) + ": " +
                          std::string(e.description()));
  }
  std::map<std::string, Value> out;
  for (const auto& [name, node] : t) {
    const std::string key(name.str());
    const Key* k = nullptr;
    for (const auto& c : keys())
      if (key == c.name) k = &c;
    if (k == nullptr)
      throw InvalidArgument(path + ": unknown key '" + key + "' (the keys are serve's long options with '_' for '-'; "
                            "see ringattn serve --help)");
    out[key] = {toml_text(node, *k, path), path + ": " + key};
  }
  return out;
}

std::optional<Value> from_env(const Key& k) {
  for (const char* name : k.env)
    if (const char* v = std::getenv(name); v && *v) return Value{v, name};
  if (k.name == "master") {  // torchrun's pair
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr && *addr && port && *port) {
      const std::string a = addr;
      return Value{(a.find(':') != std::string::npos ? "[" + a + "]" : a) + ":" + port, "MASTER_ADDR/MASTER_PORT"};
    }
  }
  return std::nullopt;
}

// A whole number in [lo, hi], read as int64 and range-checked before it narrows to T (the
// command line's grammar: cli::parse_integer_as), refused naming where it came from.
template <class T>
T whole(const Value& v, T lo, T hi) {
  return cli::parse_integer_as<T>(v.text, v.source, lo, hi);
}

double seconds(const Value& v, double lo) {
  char* end = nullptr;
  const double x = std::strtod(v.text.c_str(), &end);
  if (end == v.text.c_str() || *end != '\0' || !(x >= lo) || x > 1e6)
    throw InvalidArgument(v.source + " = '" + v.text + "' is not a number of seconds >= " + std::to_string(lo).substr(0, 4));
  return x;
}

bool boolean(const Value& v) {
  if (v.text == "1" || v.text == "true" || v.text == "yes" || v.text == "on") return true;
  if (v.text == "0" || v.text == "false" || v.text == "no" || v.text == "off") return false;
  throw InvalidArgument(v.source + " = '" + v.text + "' is not a boolean (1/0, true/false)");
}

}  // namespace

const std::vector<std::string>& serve_config_keys() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& k : keys()) n.push_back(k.name);
    return n;
  }();
  return names;
}

void declare_serve_options(cli::Args& a) {
  a.option("config", "FILE", "TOML file with any of the keys below (flags and RINGATTN_* variables win over it)");
  for (const auto& k : keys()) {
    if (k.name == "log_level") continue;  // every command's --log-level
    const std::string help = k.help + " [" + k.name + ", " + k.env.front() + "]";
    if (k.kind == Kind::boolean) a.flag(flag_name(k.name), help);
    else a.option(flag_name(k.name), k.value, help);
  }
}

namespace {

// The settings as given, each with where it came from (file < environment < flags).
class Given {
 public:
  Given(const cli::Args& a, ServeConfig& c) {
    if (auto f = a.maybe("config")) c.config_file = *f;
    else if (const char* e = std::getenv("RINGATTN_CONFIG"); e && *e) c.config_file = e;
    if (!c.config_file.empty()) v_ = from_file(c.config_file);
    for (const auto& k : keys()) {
      if (auto e = from_env(k)) v_[k.name] = *e;
      const std::string flag = flag_name(k.name);
      if (flag == "log-level") continue;
      if (k.kind == Kind::boolean ? a.has(flag) : a.maybe(flag).has_value())
        v_[k.name] = {k.kind == Kind::boolean ? "1" : a.str(flag), "--" + flag};
    }
    for (const auto& [key, val] : v_) c.sources[key] = val.source;
  }
  const Value* get(const std::string& key) const {
    auto it = v_.find(key);
    return it == v_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::string, Value> v_;
};

// Where this daemon sits in the ring: world, rank, how the others are found, its listener
// and secret.
void ring_placement(const Given& g, RingOptions& r) {
  const Value* world = g.get("world_size");
  const Value* rank = g.get("rank");
  if (!world)
    throw InvalidArgument("no world size: give --world-size, world_size in the config, or RINGATTN_WORLD_SIZE "
                          "(Slurm, mpirun and torchrun set theirs)");
  if (!rank) throw InvalidArgument("no rank: give --rank, rank in the config, or RINGATTN_RANK (or SLURM_PROCID...)");
  r.world_size = whole(*world, 1, 4096);
  r.rank = whole(*rank, 0, r.world_size - 1);
  if (const Value* p = g.get("peers")) {
    r.peers = split_commas(p->text);
    if (static_cast<int>(r.peers.size()) != r.world_size)
      throw InvalidArgument(p->source + " lists " + std::to_string(r.peers.size()) + " addresses for a world of " +
                            std::to_string(r.world_size));
  } else if (const Value* m = g.get("master")) {
    r.master = m->text;
  } else if (r.world_size > 1) {
    throw InvalidArgument("no way to find the other daemons: give --master HOST:PORT (rank 0 serves a rendezvous "
                          "there) or --peers h:p,h:p,...");
  }
  if (const Value* x = g.get("listen")) r.listen = x->text;
  if (const Value* x = g.get("token_file")) r.token_file = x->text;
  else if (const char* t = std::getenv("RINGATTN_TOKEN"); t && *t) r.token = t;
  if (const Value* x = g.get("tls")) r.tls = boolean(*x);
}

// The ring's threads, ISA, limits and deadlines. Daemons sharing a host share its cores:
// each OpenMP team on all of them oversubscribes the host (two daemons on 2 cores were
// 25-50x slower than with one thread each).
void ring_tuning(const Given& g, const infer::JobOptions& job, const ServeConfig& c, RingOptions& r) {
  if (g.get("threads")) r.threads = job.threads;
  else r.threads = std::max(1, c.cores / c.daemons_here);
  if (const Value* x = g.get("isa")) r.isa = parse_isa(x->text);
  if (const Value* x = g.get("max_rows")) r.limits.max_rows = whole<std::int64_t>(*x, 1, 1 << 24);
  if (const Value* x = g.get("max_heads")) r.limits.max_heads = whole<std::int64_t>(*x, 1, 4096);
  if (const Value* x = g.get("max_kv_heads")) r.limits.max_kv_heads = whole<std::int64_t>(*x, 1, 4096);
  if (const Value* x = g.get("max_head_dim")) r.limits.max_head_dim = whole<std::int64_t>(*x, 1, 4096);
  try {  // refused now, naming the key: a ring with these limits could never form
    check_limits(r.limits);
  } catch (const InvalidArgument& e) {
    std::string keys;
    for (const char* k : {"max_rows", "max_heads", "max_kv_heads", "max_head_dim"})
      if (const Value* x = g.get(k)) keys += (keys.empty() ? "" : ", ") + x->source;
    throw InvalidArgument((keys.empty() ? std::string("the default limits") : keys) + ": " + e.what());
  }
  if (const Value* x = g.get("timeout")) r.timeout = seconds(*x, 0.05);
  if (const Value* x = g.get("connect_timeout")) r.connect_timeout = seconds(*x, 0.05);
  if (const Value* x = g.get("ring_id")) r.ring_id = whole<std::uint64_t>(*x, 0, INT64_MAX);
}

// The hosted model: its files, dtypes, tensor-parallel groups, cache and sessions.
void hosted_model(const Given& g, const infer::JobOptions& job, ServeConfig& c) {
  c.wire_dtype = job.dtype;
  if (const Value* x = g.get("model")) c.model = x->text;
  c.tokenizer = job.tokenizer;
  if (const Value* x = g.get("weights_dtype")) {
    c.weights_dtype = job.weights_dtype;
    if (c.model.empty()) throw InvalidArgument(x->source + " sets a hosted model's dtype: give the model too");
  }
  if (const Value* x = g.get("activations")) {
    c.activations = job.activations;
    if (c.model.empty()) throw InvalidArgument(x->source + " sets how a hosted model multiplies: give the model too");
  }
  if (const Value* x = g.get("tp")) {
    c.tp = job.tp.size;
    if (c.ring.world_size % c.tp != 0)
      throw InvalidArgument(x->source + " = " + std::to_string(c.tp) + " must divide the world size " +
                            std::to_string(c.ring.world_size) + " (each group of " + std::to_string(c.tp) +
                            " daemons holds the model once, split)");
    if (c.tp > 1 && c.model.empty()) throw InvalidArgument(x->source + " splits a hosted model: give the model too");
    c.ring.group_size = c.tp;
  }
  if (const Value* x = g.get("cache_mib")) {
    char* end = nullptr;
    c.cache_mib = std::strtod(x->text.c_str(), &end);
    if (end == x->text.c_str() || *end != '\0' || !(c.cache_mib >= 0.01 && c.cache_mib <= 1e9))
      throw InvalidArgument(x->source + " = '" + x->text + "': give the KV cache's MiB per daemon, 0.01 to 1e9");
  }
  if (const Value* x = g.get("session_ttl")) c.session_ttl = seconds(*x, 1);
  if (const Value* x = g.get("prefill_chunk")) c.prefill_chunk = whole(*x, std::int64_t{0}, std::int64_t{1} << 30);
  if (c.model.empty() && !c.tokenizer.empty()) throw InvalidArgument("a tokenizer is given (" + c.sources["tokenizer"] + "), no model");
}

// The daemon's other listeners (control, metrics, the OpenAI endpoint), its grace and logs.
void daemon_services(const cli::Args& a, const Given& g, ServeConfig& c) {
  if (const Value* x = g.get("control")) {
    c.control = x->text;
    if (parse_host_port(c.control, x->source).port == 0)
      throw InvalidArgument(x->source + " = '" + c.control + "': give a fixed port (clients and the other daemons "
                            "find this daemon there)");
  }
  if (const Value* x = g.get("metrics")) {
    c.metrics = x->text;
    c.metrics_fallback = false;
  }
  if (const Value* x = g.get("grace")) c.grace = seconds(*x, 0);
  if (const Value* x = g.get("api")) {
    c.api = x->text;
    if (c.api != "off" && parse_host_port(c.api, x->source).port == 0)
      throw InvalidArgument(x->source + " = '" + c.api + "': give a fixed port for the endpoint");
  }
  if (const Value* x = g.get("api_key_file")) c.api_key_file = x->text;
  if (c.api != "off" && c.model.empty())
    throw InvalidArgument("the endpoint (" + c.sources["api"] + ") serves a hosted model: give the model too");
  if (const Value* x = g.get("log_format")) {
    if (x->text == "json") c.log_format = LogFormat::json;
    else if (x->text != "text") throw InvalidArgument(x->source + " = '" + x->text + "': expected text or json");
  }
  if (auto l = a.log_level()) c.log_level = *l;
  else if (const Value* x = g.get("log_level")) c.log_level = x->text;
}

}  // namespace

ServeConfig load_serve_config(const cli::Args& a) {
  ServeConfig c;
  const Given g(a, c);
  ring_placement(g, c.ring);
  c.daemons_here = daemons_on_this_host(c.ring);
  c.cores = usable_cores();
  // The job options (infer/job/job_options_table.hpp): parsed, bounded and refused as generate
  // and the batch job do; the checks that tie them to the ring are ring_tuning's and hosted_model's.
  infer::JobOptions job;
  for (const auto& k : keys())
    if (k.job)
      if (const Value* x = g.get(k.name)) infer::store_job_option(*k.job, job, x->text, x->source);
  ring_tuning(g, job, c, c.ring);
  hosted_model(g, job, c);
  daemon_services(a, g, c);
  return c;
}

}  // namespace ringattn::serve
