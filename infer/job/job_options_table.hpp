// infer — the one table of the job options (infer::JobOptions) that the three programs
// running a model read: the batch job `infer` (options.cpp), `ringattn generate`
// (src/generate/generate_options.cpp) and `ringattn serve` (src/serve/serve_config.cpp: its
// flags, TOML keys and RINGATTN_* variables). Each option is here once with its grammar, its
// bounds, its help and how it is stored; each program only says how it spells it (its flag,
// the default it shows), so `--threads 4294967297` is refused alike by all three, as
// "--threads takes a whole number in [0, 4096], got '4294967297'", and every program's
// --help lists the same option the same way. (As redis's config.c keeps every option once.)
// Options only one program has beyond these (serve's ports, generate's --nodes) stay in that
// program's own table.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "options.hpp"

namespace infer {

// The programs that read job options, each its own front end to the table.
enum class Program { infer, generate, serve };
inline constexpr int kPrograms = 3;
std::string_view to_string(Program p);

// The grammar of an option's value.
enum class OptionKind {
  whole,  // option_number.hpp's whole numbers, in [lo, hi]
  real,   // a decimal number in [real_lo, real_hi]
  word,   // one of `choices` (a dtype, a layout)
  text,   // a path or a prompt, taken as given
  flag,   // on when given (a TOML true/false, a variable's 1/0)
};

// How one program spells an option: nullptr flag, the program does not take it.
struct Spelling {
  const char* flag = nullptr;  // without "--"; serve's TOML key is this with '_' for '-'
  const char* def = nullptr;   // the value used when the option is not given (shown in help)
  const char* note = nullptr;  // what this program adds to the help: a default it computes, a form of its own
  bool hidden = false;         // taken, not listed (generate's test-only --rope-positions)
};

// A value checked against its option's kind and bounds, for the option's store.
struct OptionValue {
  std::int64_t whole = 0;  // whole, and flag (1 on, 0 off)
  double real = 0;         // real
  std::string text;        // as given (word, text)
  std::string source;      // where it came from: "--threads", "RINGATTN_THREADS", "ring.toml: threads"
};

struct JobOption {
  const char* name;   // what it is (tests, messages): "threads"
  const char* value;  // the placeholder in help: "N", "FILE"
  const char* help;
  OptionKind kind;
  std::int64_t lo = 0, hi = 0;          // whole
  double real_lo = 0, real_hi = 0;      // real
  const char* choices = nullptr;        // word: "fp32 or bf16", as help and errors say it
  const char* env = nullptr;            // serve's environment variable, if any
  bool shape = false;                   // one of the model's sizes (a seed's model; no checkpoint)
  std::array<Spelling, kPrograms> in;   // indexed by Program
  // Stores a value already checked against kind and bounds into o (a word's store throws
  // InvalidArgument for a word not in choices; store_job_option says which).
  void (*store)(JobOptions& o, const OptionValue& v);

  const Spelling& spelling(Program p) const { return in[static_cast<int>(p)]; }
  bool taken_by(Program p) const { return spelling(p).flag != nullptr; }
};

// Every job option, in the order each program's --help lists them.
std::span<const JobOption> job_options();

// The option program p spells `flag` (without "--"), or nullptr.
const JobOption* find_job_option(Program p, std::string_view flag);

// Parses `text` by the option's grammar and stores it into o. Every refusal is an
// InvalidArgument naming `source` (a flag "--threads", a variable "RINGATTN_THREADS", a key
// "ring.toml: threads"): "<source> takes a whole number in [lo, hi], got '<text>'",
// "<source> takes a number in [lo, hi], got '<text>'", "<source> = '<text>': expected <choices>",
// "<source> = '<text>' is not a boolean (1/0, true/false)".
void store_job_option(const JobOption& opt, JobOptions& o, const std::string& text, const std::string& source);

// The help of an option as program p shows it: its text, then its default in words (a
// `note`) or, with `with_default`, its value ("(default 4)"; Args prints its own).
std::string job_option_help(const JobOption& opt, Program p, bool with_default);

}  // namespace infer
