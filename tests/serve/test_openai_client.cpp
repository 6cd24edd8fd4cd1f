// The endpoint as OpenAI's own clients see it.
//
// StopMatcher (no sockets): OpenAI's `stop` on text that comes a token at a time — cut
// before the first stop sequence, never a part of one returned, nothing held back that
// cannot begin one; against a from-scratch reference on random texts and token splits.
//
// Parameters the endpoint does not implement (no sockets): every one in the table is refused
// with a value that asks for something, naming it, and accepted at its default and null, on
// both endpoints; a chat's tools stay the template's.
//
// The official Node client (npm `openai`, pinned and installed outside the repository by
// openai_node/run.sh) against 2 daemons hosting stories260K (openai_node/client_test.mjs):
// completions, chat, streams, stop (a string, arrays, across and inside token boundaries),
// max_completion_tokens, stream_options.include_usage, an unknown model (NotFoundError,
// model_not_found), a wrong key (AuthenticationError) and the next request on the same
// connection, 400s naming their param, a 413, a 404; then every answer the script got is
// in ringattn_api_requests_total and every generation ended ok (stops too). Skipped without
// the model files or the package (no registry), failed for that under CI=true
// (tests/skip.hpp).
//
// The same client's tool calls (openai_node/tools_test.mjs) against 2 daemons hosting the
// seeded model whose chat template teaches Hermes (Qwen) calls (hermes_model.hpp; no model
// file needed): two strict functions offered, tool_choice "required" and each one named, seeds
// 1-3 — finish_reason tool_calls and one well-formed call, the same call streamed in one delta
// and accumulated by the client's stream helper (finalChatCompletion, parsed_arguments, its
// arguments.done event); "none" beside tools gives text; the assistant's call and a role "tool"
// result sent back are answered; runTools with a named choice calls the user's function once
// with the parsed arguments (one request; streamed too) and its conversation is answered;
// responses.create with the Responses API's flat function tools gives the chat's call (same
// seed) as a function_call item, streamed as its events, and takes the call and its
// function_call_output back as input items (a web_search tool: 400 naming it); a
// choice naming an unknown function or "required" without tools is a BadRequestError naming
// tool_choice. Every call's arguments the client got are valid under its function's parameters
// by npm ajv. Skipped without the packages, failed for that under CI=true.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "infer/common/json.hpp"
#include "src/serve/openai_api.hpp"
#include "src/serve/openai_params.hpp"
#include "tests/model/model_files.hpp"
#include "tests/serve/daemon_ring.hpp"
#include "tests/serve/hermes_model.hpp"
#include "tests/serve/model_ring.hpp"

namespace ringattn::stest {
namespace {

using serve::StopMatcher;

// What a client receives for `pieces`: every feed's text, then the held text if no stop matched.
std::vector<std::string> received(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* matched = nullptr) {
  StopMatcher m(stops);
  std::vector<std::string> out;
  for (const std::string& p : pieces) {
    out.push_back(m.feed(p));
    if (m.matched()) break;
  }
  if (!m.matched()) out.push_back(m.flush());
  if (matched) *matched = m.matched();
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

std::string shown(const std::vector<std::string>& parts) {  // ["a", "b"]
  std::string s = "[";
  for (const auto& p : parts) s += (s.size() > 1 ? ", \"" : "\"") + p + "\"";
  return s + "]";
}

}  // namespace

TEST_CASE("unsupported OpenAI parameters: refused naming the parameter unless at their default or null, on both endpoints") {
  using serve::unsupported_parameter;
  const infer::Json base = infer::parse_json("{\"prompt\": \"x\", \"max_tokens\": 2}");
  // A value of every kind that asks for something, for each parameter.
  const std::map<std::string, std::string> asks = {
      {"echo", "true"}, {"best_of", "3"}, {"suffix", "\" end\""},
{"tools", "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"},
      {"tool_choice", "\"required\""}, {"parallel_tool_calls", "false"}, {"functions", "[{\"name\": \"f\"}]"},
      {"function_call", "{\"name\": \"f\"}"}, {"store", "true"}, {"metadata", "{\"a\": \"b\"}"}, {"service_tier", "\"flex\""},
      {"modalities", "[\"text\", \"audio\"]"}, {"audio", "{\"voice\": \"alloy\"}"}, {"prediction", "{\"type\": \"content\"}"},
      {"reasoning_effort", "\"low\""}, {"verbosity", "\"low\""}, {"web_search_options", "{}"}};
  const auto& table = serve::unimplemented_parameters();
  CHECK(table.size() == asks.size());
  for (const auto& p : table) {
    const std::string name = p.name;
    CAPTURE(name);
    REQUIRE(asks.count(name) == 1);
    for (const bool chat : {false, true}) {
      CAPTURE(chat);
      infer::Json r = base;
      r[name] = infer::parse_json(asks.at(name));
      const auto u = unsupported_parameter(r, chat);
      if (chat && (name == "tools" || name == "tool_choice")) {
        CHECK_FALSE(u.has_value());  // a chat's tools and tool_choice are read with its messages (openai_request.cpp)
        continue;
      }
      REQUIRE(u.has_value());
      CHECK(u->name == name);
      CHECK(u->message.find("\"" + name + "\" is not supported") != std::string::npos);
      for (const char* d : p.defaults) {
        r[name] = infer::parse_json(d);
        CHECK_FALSE(unsupported_parameter(r, chat).has_value());
      }
      r[name] = nullptr;
      CHECK_FALSE(unsupported_parameter(r, chat).has_value());
    }
  }
  // What OpenAI's clients send by default, all at once: accepted; 0.0 is 0.
  const infer::Json defaults = infer::parse_json(
      "{\"prompt\": \"x\", \"echo\": false, \"logprobs\": null, \"presence_penalty\": 0.0, \"frequency_penalty\": 0, "
      "\"logit_bias\": {}, \"best_of\": 1, \"response_format\": {\"type\": \"text\"}, \"tool_choice\": \"none\", "
      "\"parallel_tool_calls\": true, \"user\": \"someone\", \"unknown_to_openai\": 5}");
  CHECK_FALSE(unsupported_parameter(defaults, false).has_value());
  CHECK_FALSE(unsupported_parameter(defaults, true).has_value());
  // A chat's tools and tool_choice are not this table's: "none" beside tools is honoured (the
  // template is not given them), "required" is checked where the tools are read.
  infer::Json tools = infer::parse_json("{\"messages\": [], \"tools\": [{\"type\": \"function\"}], \"tool_choice\": \"auto\"}");
  CHECK_FALSE(unsupported_parameter(tools, true).has_value());
  tools["tool_choice"] = "none";
  CHECK_FALSE(unsupported_parameter(tools, true).has_value());
}

TEST_CASE("StopMatcher: cut before the first stop sequence, across token boundaries; nothing of one is sent, nothing else held") {
  bool matched = false;
  // "girl named" spans two tokens: " girl" could begin it, so only its space goes out.
  CHECK(received({"girl named"}, {" little", " girl", " named", " Lily"}, &matched) == std::vector<std::string>{" little", " ", ""});
  CHECK(matched);
  // Begins and ends inside tokens.
  CHECK(joined(received({"irl na"}, {" little", " girl", " named"})) == " little g");
  // Held, then found not to be one: released with the next token, or at the end.
  CHECK(received({"Lily!"}, {" named", " Lily", ".", " She"}, &matched) == std::vector<std::string>{" named", " ", "Lily.", " She", ""});
  CHECK(!matched);
  CHECK(received({"Lily!"}, {" named", " Lily"}) == std::vector<std::string>{" named", " ", "Lily"});
  // Inside one token; what comes after is never returned.
  CHECK(received({"."}, {" Lily. She", " loved"}, &matched) == std::vector<std::string>{" Lily"});
  CHECK(matched);
  // The first place any of them begins wins; a repeated prefix is held only as far as it could match.
  CHECK(joined(received({"named", "girl"}, {" girl named"})) == " ");
  CHECK(received({"ab"}, {"a", "a", "b"}) == std::vector<std::string>{"", "a", ""});
  // Text that cannot begin a stop sequence goes out at once; empty sequences never match.
  CHECK(received({"xyz"}, {"abc", "dx"}) == std::vector<std::string>{"abc", "d", "x"});
  CHECK(received({"", ""}, {"a", "b"}) == std::vector<std::string>{"a", "b", ""});
  CHECK(received({}, {"a"}) == std::vector<std::string>{"a", ""});
}

TEST_CASE("StopMatcher: random texts, stops and token splits equal the reference (the text up to the first stop once it is whole)") {
  std::mt19937 rng(20240531);
  auto word = [&](int max) {
    std::string s(std::uniform_int_distribution<int>(1, max)(rng), 'a');
    for (char& c : s) c = static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng));
    return s;
  };
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<std::string> stops, pieces;
    for (int i = std::uniform_int_distribution<int>(0, 4)(rng); i > 0; --i) stops.push_back(word(4));
    for (int i = std::uniform_int_distribution<int>(1, 12)(rng); i > 0; --i) pieces.push_back(word(3));
    // The reference: the ring ends the reply at the first token after which a stop sequence
    // lies whole in the text; the text is cut where the first of them begins.
    std::string text, want;
    bool stopped = false;
    for (const std::string& p : pieces) {
      text += p;
      std::size_t at = std::string::npos;
      for (const std::string& s : stops) at = std::min(at, text.find(s));
      if (at != std::string::npos) {
        want = text.substr(0, at);
        stopped = true;
        break;
      }
    }
    if (!stopped) want = text;
    bool matched = false;
    const std::vector<std::string> got = received(stops, pieces, &matched);
    INFO("stops " << shown(stops) << " pieces " << shown(pieces));
    REQUIRE(joined(got) == want);
    REQUIRE(matched == stopped);
  }
}

namespace {

const std::string kRunSh = RINGATTN_SOURCE_ROOT "/tests/serve/openai_node/run.sh";

// The package, before any daemon starts (npm, once per machine), so that a skip leaves none
// behind; false once skipped.
bool client_installed() {
  itest::Spawned install({kRunSh, "install"}, {}, "/bin/bash");
  const Outcome o = install.wait(600);
  if (o.exit_code == 77) {
    ::test::skip("the openai npm package: " + o.err);
    return false;
  }
  REQUIRE_MESSAGE(o.exit_code == 0, "run.sh install: " << o.err);
  return true;
}

// The report a client script printed (openai_node/report.mjs): every check passed, and at
// least `at_least` of them ran (a section that stopped early would leave some out).
infer::Json checked_report(const Outcome& o, std::size_t at_least) {
  REQUIRE(o.exit_code == 0);
  infer::Json report = infer::parse_json(o.out);
  const infer::Json& checks = report.at("checks");
  CHECK(checks.size() >= at_least);
  for (const infer::Json& k : checks) {
    INFO(k.at("name").get<std::string>() << ": " << k.at("detail").get<std::string>());
    CHECK(k.at("ok").get<bool>());
  }
  return report;
}

}  // namespace

TEST_CASE("the official openai Node client against 2 daemons hosting stories260K: text, streams, stop, usage, errors, every answer counted") {
  const auto dir = ::test::model_dir();
  if (!dir) return;
  if (!client_installed()) return;
  const std::string api = "127.0.0.1:" + std::to_string(itest::free_port());
  RingConfig c;
  c.world = 2;
  c.extra = {"--model", (*dir / "stories260K.bin").string(), "--tokenizer", (*dir / "tok512.bin").string(), "--api", api};
  DaemonRing ring(c);
  INFO(ring.logs());
  REQUIRE(ring.wait_ready(60));
  std::string token;
  {
    std::ifstream f(ring.token_file());
    std::getline(f, token);
  }
  const std::string expected = ::test::kRunText.substr(std::string("Once upon a time").size());
  itest::Spawned client({kRunSh, "test", "http://" + api, token, "stories260K", "http://" + ring.metrics(0) + "/metrics", expected}, {},
                        "/bin/bash");
  const Outcome o = client.wait(300);
  INFO("client stderr: " << o.err << "\nrank 0: " << ring.log(0).substr(ring.log(0).size() > 3000 ? ring.log(0).size() - 3000 : 0));
  if (o.exit_code == 77) {
    ::test::skip("the openai npm package: " + o.err);
    return;
  }
  const infer::Json report = checked_report(o, 50);

  // Every answer the client got is counted under its status, and nothing else is
  // (the script is the endpoint's only client): 400, 401, 404 and 413 among them.
  const std::string metrics = http_get(ring.metrics(0), "/metrics").second;
  std::map<std::string, double> counted;
  {
    std::istringstream in(metrics);
    const std::string prefix = "ringattn_api_requests_total{status=\"";
    for (std::string line; std::getline(in, line);)
      if (line.rfind(prefix, 0) == 0) counted[line.substr(prefix.size(), 3)] = std::stod(line.substr(line.find("} ") + 2));
  }
  std::map<std::string, double> answered;
  for (const auto& [status, n] : report.at("statuses").items()) answered[status] = n.get<double>();
  CHECK(counted == answered);
  for (const char* status : {"200", "400", "401", "404", "413"}) CHECK(answered[status] >= 1);
  // Every generation answered ended as a whole reply on the ring, those cut by a stop too.
  const double generations = report.at("generations").get<double>();
  CHECK(generations >= 25);
  CHECK(eventually([&] { return metric(ring, 0, "ringattn_generations_total{result=\"ok\"}") == generations; },
                   10));
  CHECK(metric(ring, 0, "ringattn_generations_total{result=\"cancelled\"}") == 0);
}

namespace {

// What the client offers: two functions whose parameters are hermes_model.hpp's schemas,
// strict (so that the client's helpers parse the arguments too).
infer::Json offered_tools() {
  infer::Json tools = infer::Json::array();
  for (const auto& [name, schema] : {std::pair{"weather", kWeather}, std::pair{"person", kPerson}}) {
    infer::Json tool = {{"type", "function"}, {"function", {{"name", name}, {"parameters", infer::parse_json(schema)}, {"strict", true}}}};
    tools.push_back(tool);
  }
  return tools;
}

}  // namespace

TEST_CASE("the official openai Node client: tool calls against 2 daemons hosting a seeded Hermes-template model; arguments valid by ajv") {
  if (!client_installed()) return;
  const HermesModel model;
  RingConfig c;
  c.world = 2;
  ModelRing m(model.path, {}, 10, {"--model", model.path.string()}, c);
  INFO(m.ring->logs());
  REQUIRE(m.ring->wait_ready(60));
  const infer::Json tools = offered_tools();
  // The hosted model's id is its directory's name.
  itest::Spawned client({kRunSh, "tools", m.url(""), m.token, model.path.filename().string(), tools.dump()}, {}, "/bin/bash");
  const Outcome o = client.wait(300);
  INFO("client stderr: " << o.err);
  if (o.exit_code == 77) {
    ::test::skip("the openai npm package: " + o.err);
    return;
  }
  const infer::Json report = checked_report(o, 79);
  // Every call's arguments the client got, whole, streamed and through its helpers, valid
  // under the parameters of the function it calls; each function named in 9 of them at least.
  infer::Json cases = infer::Json::array();
  for (const infer::Json& t : tools) {
    const std::string name = t.at("function").at("name").get<std::string>();
    const infer::Json outputs = report.at("arguments").at(name);
    CAPTURE(name);
    CHECK(outputs.size() >= 9);
    infer::Json one = {{"name", name}, {"schema", t.at("function").at("parameters")}, {"outputs", outputs}};
    cases.push_back(one);
  }
  ajv_accepts(cases);
}

}  // namespace ringattn::stest
