// A model that calls tools, for the tests of forced tool calls (test_serving.cpp with curl,
// test_openai_client.cpp with the official Node client): a seeded Hugging Face directory whose
// chat template teaches Hermes (Qwen) tool calls, two tools' parameter schemas, and an
// independent validator (npm ajv) of what it wrote under them.
#pragma once

#include <filesystem>

#include "infer/common/json.hpp"

namespace ringattn::stest {

// tests/integration/hf_text_model.hpp's model (seed 7) in a temporary directory, its
// tokenizer_config.json's chat template the Hermes one; removed with the object.
struct HermesModel {
  std::filesystem::path path;
  HermesModel();
  ~HermesModel();
  HermesModel(const HermesModel&) = delete;
  HermesModel& operator=(const HermesModel&) = delete;
};

// JSON Schemas within what the endpoint's grammars enforce (docs/structured_output.md), small
// enough for a seeded model's sampled replies to end: a tool's parameters, or a reply's format.
inline constexpr const char* kPerson = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"},
  "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}}, "required": ["name", "age", "pets"], "additionalProperties": false})";
inline constexpr const char* kWeather = R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["C", "F"]}},
  "required": ["city", "unit"], "additionalProperties": false})";

// Every output of `cases` ([{"name", "schema", "outputs": [JSON text...]}]) valid under its
// schema, by ajv (tests/constrain/ajv/run.sh); skips (tests/skip.hpp) where ajv cannot install.
void ajv_accepts(const infer::Json& cases);

}  // namespace ringattn::stest
