// infer — constrained decoding: the grammar of an OpenAI response_format (docs/structured_output.md):
// json_schema (strict or not) compiles the schema; json_object is any JSON object.
//
// The subset of JSON Schema compiled (anything else is refused, naming the keyword and the
// JSON pointer of the schema that holds it: unsupported schema keyword "pattern" at
// #/properties/name):
//   type          object, array, string, number, integer, boolean, null, or a list of them;
//                 without it, the types whose keywords appear (properties... -> object), else any
//   properties, required, additionalProperties
//                 properties appear in the schema's order; the required ones always, the others
//                 may be left out; no other property is ever generated (additionalProperties
//                 false, or absent, or true); an object schema without properties and without
//                 additionalProperties: false is any object
//   enum, const   the values exactly as compact JSON (with `type` beside them: those of the type)
//   items, minItems, maxItems      (items absent or true: any values; false: none)
//   minLength, maxLength           characters as JSON Schema counts them
//   anyOf         any of the schemas (nothing else beside it but annotations)
//   $ref          a local JSON pointer: "#", "#/$defs/NAME", "#/definitions/NAME", ...;
//                 recursion allowed, kMaxNesting levels deep (each $ref expansion is one)
//   true, false   as schemas: any value, no value
//   ignored       description, title, $comment, $schema, $id (at the root), default,
//                 examples, deprecated, readOnly, writeOnly; $defs and definitions are read
//                 only where a $ref points
// The text's whitespace, numbers and strings keep to json_pieces.hpp's bounds.
//
// Bounds on the compile (a hostile schema costs at most this much): kMaxSubschemas subschemas
// compiled, GrammarBuilder::Limits states and closure entries; past them, the refusal says
// which and where.
#pragma once

#include <ringattn/error.hpp>

#include <cstddef>

#include "../common/json.hpp"
#include "grammar.hpp"

namespace infer::constrain {

inline constexpr std::size_t kMaxSubschemas = 10000;

// A schema this compiler refuses: the message names the keyword (or the bound) and where.
class Unsupported : public ringattn::InvalidArgument {
 public:
  using ringattn::InvalidArgument::InvalidArgument;
};

Grammar json_schema_grammar(const Json& schema);  // throws Unsupported
Grammar json_object_grammar();

}  // namespace infer::constrain
