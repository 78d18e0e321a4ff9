// What every command-line tool shares on top of CLI11: exit codes, parsing into them, flags whose
// values follow one documented rule, and refusals that name the flag and the rule.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace flashjit::tools {

// Exit codes of every tool: 0 success; 1 the operation failed; 2 the command line was wrong
// (nothing was done).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// "TOOL: MESSAGE" and a pointer to --help, MESSAGE escaped and cut (it may quote any argument).
std::string usage_message(const std::string& tool, const std::string& message);

// Rewrites CLI11's message for a refused command line (say, to name an unknown subcommand).
using ExplainRefusal = std::function<std::string(const CLI::App& app, const CLI::Error& error)>;

// Parses argv into `app`, whose name starts every message. Returns std::nullopt to go on, or
// the exit code when parsing ends the run: kExitOk after --help (written to `out`), kExitUsage for
// a refused command line (usage_message on `err`). CLI11's own codes (105 for a failed check, 109
// for an unknown flag, ...) are not the documented 2 that scripts test for.
std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                                      std::ostream& err, const ExplainRefusal& explain = {});

// An option whose value must be one of `names`: "--dtype: must be one of f16, bf16, f32, tf32,
// got 'f8'".
CLI::Validator one_of(std::vector<std::string> names);

// A feature flag: bare means on, and =true/=false (also =yes/=no, =1/=0) are honoured; any other
// value is refused, naming the flag and this rule. (CLI11's own flags read "false" and "0" as a
// count, and throw std::stoll's text for words.) `set` receives the value; given twice, the
// last one counts.
CLI::Option* add_switch(CLI::App* app, const std::string& name, std::function<void(bool)> set,
                        const std::string& description);

// Integer options: the value must be a decimal integer in [min, max], read whole. Refusals are
// one line, "--threads: must be at least 1, got 0" (CLI11's own ranges print both bounds as
// doubles, 400 characters for PositiveNumber). The validator hands CLI11 the value in plain
// decimal, since CLI11 alone would read "010" as octal 8.
CLI::Validator in_range(std::int64_t min, std::int64_t max);
// in_range(min, max) said as "at least min": for counts and ordinals, whose only upper bound is
// what the option's type holds (an int unless said otherwise).
CLI::Validator at_least(std::int64_t min, std::int64_t max = std::numeric_limits<int>::max());

}  // namespace flashjit::tools
