// Tests of daemons hosting a real model (stories260K, or a seeded Hugging Face directory):
// the ring with its OpenAI-style endpoint, and the clients' side of it — curl requests,
// server-sent events read back, request bodies.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "src/cli/json_object.hpp"
#include "infer/common/json.hpp"
#include "tests/integration/spawn.hpp"
#include "tests/model/model_files.hpp"
#include "tests/serve/daemon_ring.hpp"

namespace ringattn::stest {

inline const std::string kPrompt = "Once upon a time";
// llama2.c's 60 greedy tokens after the prompt: the completion's text.
inline std::string completion_60() { return ::test::kRunText.substr(kPrompt.size()); }

struct ModelRing {
  std::filesystem::path dir;
  int api_port = itest::free_port();
  std::unique_ptr<DaemonRing> ring;
  std::string token;

  // `model`: the --model (and --tokenizer) options; none: stories260K's in `d`.
  explicit ModelRing(const std::filesystem::path& d, const std::vector<std::string>& more = {}, double timeout = 3,
                     std::vector<std::string> model = {}, RingConfig c = {})
      : dir(d) {
    c.timeout = timeout;
    if (model.empty()) model = {"--model", (d / "stories260K.bin").string(), "--tokenizer", (d / "tok512.bin").string()};
    c.extra = model;
    c.extra.insert(c.extra.end(), {"--api", api()});
    c.extra.insert(c.extra.end(), more.begin(), more.end());
    ring = std::make_unique<DaemonRing>(c);
    std::ifstream f(ring->token_file());
    std::getline(f, token);
  }
  std::string api() const { return "127.0.0.1:" + std::to_string(api_port); }
  std::string url(const std::string& path) const { return "http://" + api() + path; }
  std::string auth() const { return "Authorization: Bearer " + token; }
};

inline Outcome run(const std::string& exe, const std::vector<std::string>& args, double deadline = 120) {
  itest::Spawned p(args, {}, exe);
  return p.wait(deadline);
}

// The completion text of an SSE stream as curl printed it ("" and `error` set on an error event).
inline std::string sse_text(const std::string& out, std::string* error = nullptr, bool* done = nullptr) {
  std::istringstream in(out);
  std::string line, text;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      if (done) *done = true;
      continue;
    }
    const infer::Json j = infer::parse_json(data);
    if (const infer::Json* e = infer::json_field(j, "error")) {
      if (error) *error = e->at("message").get<std::string>();
      continue;
    }
    const infer::Json& choice = j.at("choices").at(0);
    if (const infer::Json* t = infer::json_field(choice, "text")) text += t->get<std::string>();
    else if (const infer::Json* d = infer::json_field(choice, "delta")) text += d->at("content").get<std::string>();
  }
  return text;
}

inline std::vector<std::string> curl_post(const ModelRing& m, const std::string& path, const std::string& body, bool auth = true) {
  std::vector<std::string> a = {"-sN", "--max-time", "100", "-H", "Content-Type: application/json"};
  if (auth) a.insert(a.end(), {"-H", m.auth()});
  a.insert(a.end(), {"-w", "\nHTTP %{http_code}\n", "-d", body, m.url(path)});
  return a;
}

inline std::string body(int max_tokens, bool stream, const std::string& prompt = kPrompt) {
  return "{\"prompt\": " + cli::json_quote(prompt) + ", \"max_tokens\": " + std::to_string(max_tokens) +
         ", \"temperature\": 0, \"stream\": " + (stream ? "true" : "false") + "}";
}

// A whole (not streamed) response's JSON, as curl_post printed it.
inline infer::Json response_json(const Outcome& o) { return infer::parse_json(o.out.substr(0, o.out.find("\nHTTP"))); }

inline std::string ids_json(std::vector<int>::const_iterator a, std::vector<int>::const_iterator b) {
  std::string s = "[";
  for (auto i = a; i != b; ++i) s += (i == a ? "" : ", ") + std::to_string(*i);
  return s + "]";
}

inline std::string ids_body(const std::string& ids, int max_tokens, const std::string& session, bool stream = false) {
  return "{\"prompt\": " + ids + ", \"max_tokens\": " + std::to_string(max_tokens) + ", \"temperature\": 0, \"stream\": " +
         (stream ? "true" : "false") + (session.empty() ? "" : ", \"session\": " + session) + "}";
}


}  // namespace ringattn::stest
