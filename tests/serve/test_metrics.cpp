// The metrics registry: the exposition text line for line, and recording from threads.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "src/serve/metrics.hpp"

using ringattn::serve::Metrics;

TEST_CASE("render: HELP and TYPE per metric in declaration order, series in label order") {
  Metrics m;
  m.describe("ringattn_jobs_total", Metrics::Type::counter, "jobs finished, by result");
  m.describe("ringattn_ring_formed", Metrics::Type::gauge, "1 when the ring is formed");
  m.describe("ringattn_idle", Metrics::Type::gauge, "declared, never set");
  m.add("ringattn_jobs_total", {{"result", "ok"}});
  m.add("ringattn_jobs_total", {{"result", "failed"}}, 2);
  m.add("ringattn_jobs_total", {{"result", "ok"}}, 0.5);
  m.set("ringattn_ring_formed", {}, 1);
  m.set("ringattn_ring_formed", {}, 0);
  CHECK(m.render() ==
        "# HELP ringattn_jobs_total jobs finished, by result\n"
        "# TYPE ringattn_jobs_total counter\n"
        "ringattn_jobs_total{result=\"failed\"} 2\n"
        "ringattn_jobs_total{result=\"ok\"} 1.5\n"
        "# HELP ringattn_ring_formed 1 when the ring is formed\n"
        "# TYPE ringattn_ring_formed gauge\n"
        "ringattn_ring_formed 0\n"
        "# HELP ringattn_idle declared, never set\n"
        "# TYPE ringattn_idle gauge\n");
  CHECK(m.render() == m.render());
}

TEST_CASE("render: label values and help text are escaped; label order does not make a new series") {
  Metrics m;
  m.describe("x_total", Metrics::Type::counter, "a \\ and a\nnewline");
  m.add("x_total", {{"path", "C:\\tmp"}, {"msg", "say \"hi\"\nbye"}});
  m.add("x_total", {{"msg", "say \"hi\"\nbye"}, {"path", "C:\\tmp"}});
  CHECK(m.render() ==
        "# HELP x_total a \\\\ and a\\nnewline\n"
        "# TYPE x_total counter\n"
        "x_total{msg=\"say \\\"hi\\\"\\nbye\",path=\"C:\\\\tmp\"} 2\n");
}

TEST_CASE("render: a histogram's buckets are cumulative, end in +Inf, then _sum and _count") {
  Metrics m;
  m.describe_histogram("job_seconds", "job time", {0.01, 0.1, 1, 10});
  for (const double v : {0.005, 0.1, 0.25, 0.5, 42.0}) m.observe("job_seconds", {}, v);
  m.observe("job_seconds", {{"kind", "causal"}}, 1);
  CHECK(m.render() ==
        "# HELP job_seconds job time\n"
        "# TYPE job_seconds histogram\n"
        "job_seconds_bucket{le=\"0.01\"} 1\n"
        "job_seconds_bucket{le=\"0.1\"} 2\n"  // le is "less or equal": 0.1 counts here
        "job_seconds_bucket{le=\"1\"} 4\n"
        "job_seconds_bucket{le=\"10\"} 4\n"
        "job_seconds_bucket{le=\"+Inf\"} 5\n"
        "job_seconds_sum 42.855\n"
        "job_seconds_count 5\n"
        "job_seconds_bucket{kind=\"causal\",le=\"0.01\"} 0\n"
        "job_seconds_bucket{kind=\"causal\",le=\"0.1\"} 0\n"
        "job_seconds_bucket{kind=\"causal\",le=\"1\"} 1\n"
        "job_seconds_bucket{kind=\"causal\",le=\"10\"} 1\n"
        "job_seconds_bucket{kind=\"causal\",le=\"+Inf\"} 1\n"
        "job_seconds_sum{kind=\"causal\"} 1\n"
        "job_seconds_count{kind=\"causal\"} 1\n");
}

TEST_CASE("misuse throws std::logic_error instead of making a new series") {
  Metrics m;
  m.describe("a_total", Metrics::Type::counter, "a");
  m.describe("g", Metrics::Type::gauge, "g");
  m.describe_histogram("h", "h", {1, 2});
  CHECK_THROWS_AS(m.add("a_totl"), std::logic_error);            // undeclared (a typo)
  CHECK_THROWS_AS(m.set("nope", {}, 1), std::logic_error);       // undeclared
  CHECK_THROWS_AS(m.observe("nope", {}, 1), std::logic_error);   // undeclared
  CHECK_THROWS_AS(m.set("a_total", {}, 1), std::logic_error);    // wrong type
  CHECK_THROWS_AS(m.observe("g", {}, 1), std::logic_error);      // wrong type
  CHECK_THROWS_AS(m.add("a_total", {}, -1), std::logic_error);   // counters only go up
  CHECK_THROWS_AS(m.add("a_total", {{"bad-name", "x"}}), std::logic_error);
  CHECK_THROWS_AS(m.add("a_total", {{"k", "1"}, {"k", "2"}}), std::logic_error);
  CHECK_THROWS_AS(m.observe("h", {{"le", "1"}}, 1), std::logic_error);
  CHECK_THROWS_AS(m.describe("a_total", Metrics::Type::gauge, "a"), std::logic_error);
  CHECK_THROWS_AS(m.describe("1bad", Metrics::Type::gauge, "x"), std::logic_error);
  CHECK_THROWS_AS(m.describe_histogram("h2", "x", {2, 1}), std::logic_error);
  CHECK_NOTHROW(m.describe("a_total", Metrics::Type::counter, "a"));  // the same again is fine
  m.add("g", {}, 3);                                                   // a gauge moves either way
  m.add("g", {}, -1);
  CHECK(m.render() ==
        "# HELP a_total a\n# TYPE a_total counter\n"
        "# HELP g g\n# TYPE g gauge\ng 2\n"
        "# HELP h h\n# TYPE h histogram\n");
}

TEST_CASE("value and sum read what render prints; nullopt for an undeclared name or a histogram") {
  Metrics m;
  m.describe("tokens_total", Metrics::Type::counter, "tokens, by phase");
  m.describe("rows", Metrics::Type::gauge, "rows");
  m.describe_histogram("h", "h", {1});
  CHECK(m.value("rows") == 0.0);  // declared, never set
  CHECK(m.sum("tokens_total") == 0.0);
  m.add("tokens_total", {{"phase", "prefill"}}, 6);
  m.add("tokens_total", {{"phase", "decode"}}, 30);
  m.set("rows", {}, 36);
  m.observe("h", {}, 0.5);
  CHECK(m.value("tokens_total", {{"phase", "decode"}}) == 30.0);
  CHECK(m.value("tokens_total") == 0.0);  // the unlabelled series: never recorded
  CHECK(m.sum("tokens_total") == 36.0);
  CHECK(m.value("rows") == 36.0);
  CHECK_FALSE(m.value("ringattn_prefix_cache_hits_total").has_value());
  CHECK_FALSE(m.sum("ringattn_prefix_cache_hits_total").has_value());
  CHECK_FALSE(m.value("h").has_value());
  CHECK_FALSE(m.sum("h").has_value());
}

TEST_CASE("recording from several threads while another renders loses nothing") {
  Metrics m;
  m.describe("hits_total", Metrics::Type::counter, "hits");
  m.describe_histogram("lat", "latency", {0.5});
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&m, t] {
      for (int i = 0; i < kEach; ++i) {
        m.add("hits_total", {{"t", t % 2 ? "odd" : "even"}});
        m.observe("lat", {}, i % 2 ? 1.0 : 0.25);
      }
    });
  std::thread reader([&m] {
    for (int i = 0; i < 200; ++i) (void)m.render();
  });
  for (auto& t : threads) t.join();
  reader.join();
  const std::string text = m.render();
  CHECK(text.find("hits_total{t=\"even\"} 40000\n") != std::string::npos);
  CHECK(text.find("hits_total{t=\"odd\"} 40000\n") != std::string::npos);
  CHECK(text.find("lat_bucket{le=\"0.5\"} 40000\n") != std::string::npos);
  CHECK(text.find("lat_bucket{le=\"+Inf\"} 80000\n") != std::string::npos);
  CHECK(text.find("lat_sum 50000\n") != std::string::npos);
  CHECK(text.find("lat_count 80000\n") != std::string::npos);
}
