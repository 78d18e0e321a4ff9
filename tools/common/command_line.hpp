// What every command-line tool shares on top of CLI11: flags whose values follow one documented
// rule, and refusals that name the flag and the rule.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

namespace flashjit::tools {

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
