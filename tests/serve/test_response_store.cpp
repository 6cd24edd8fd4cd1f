// The stored responses of /v1/responses (src/serve/response_store.hpp): what goes in comes
// back; the least recently used go first at the bound on entries and on bytes; one larger
// than the whole bound is not kept; a deleted one is gone.
#include <doctest/doctest.h>

#include <string>

#include "src/serve/response_store.hpp"

namespace ringattn::serve {

TEST_CASE("response store: put, read back, least recently used out first at the entry bound, erase") {
  ResponseStore s;
  const infer::Json conv = infer::parse_json(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "there"}])");
  s.put("resp_1", conv, "{\"id\": \"resp_1\"}");
  REQUIRE(s.conversation("resp_1"));
  CHECK(*s.conversation("resp_1") == conv);
  CHECK(s.response("resp_1") == std::string("{\"id\": \"resp_1\"}"));
  CHECK(!s.conversation("resp_2"));
  for (std::size_t i = 2; i <= ResponseStore::kMaxEntries; ++i) s.put("resp_" + std::to_string(i), conv, "{}");
  CHECK(s.size() == ResponseStore::kMaxEntries);
  CHECK(s.response("resp_1"));  // used now: resp_2 is the least recently used
  s.put("resp_new", conv, "{}");
  CHECK(s.size() == ResponseStore::kMaxEntries);
  CHECK(s.response("resp_1"));
  CHECK(!s.response("resp_2"));
  CHECK(s.erase("resp_1"));
  CHECK(!s.erase("resp_1"));
  CHECK(!s.conversation("resp_1"));
  CHECK(s.size() == ResponseStore::kMaxEntries - 1);
}

TEST_CASE("response store: the byte bound — the oldest go for a large one; one larger than the bound is not kept") {
  ResponseStore s;
  const infer::Json small = infer::Json::array();
  const std::string quarter(ResponseStore::kMaxBytes / 4, 'x');
  for (int i = 0; i < 3; ++i) s.put("resp_" + std::to_string(i), small, quarter);
  CHECK(s.size() == 3);
  s.put("resp_big", small, std::string(ResponseStore::kMaxBytes / 2, 'y'));  // 3/4 + 1/2 > 1: the two oldest go
  CHECK(!s.response("resp_0"));
  CHECK(!s.response("resp_1"));
  CHECK(s.response("resp_2"));
  CHECK(s.response("resp_big"));
  s.put("resp_huge", small, std::string(ResponseStore::kMaxBytes + 1, 'z'));
  CHECK(!s.response("resp_huge"));
  CHECK(s.size() == 2);  // nothing else went for it
  s.put("resp_2", small, "{}");  // again: replaced, its bytes counted once
  s.put("resp_next", small, std::string(ResponseStore::kMaxBytes / 2 - 64, 'w'));
  CHECK(s.size() == 3);
}

}  // namespace ringattn::serve
