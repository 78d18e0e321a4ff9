// What every command-line tool shares on top of CLI11: flags whose values follow one documented
// rule, and refusals that name the flag and the rule.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace flashjit::tools {

// A feature flag: bare means on, and =true/=false (also =yes/=no, =1/=0) are honoured; any other
// value is refused, naming the flag and this rule. (CLI11's own flags read "false" and "0" as a
// count, and throw std::stoll's text for words.) `set` receives the value; given twice, the
// last one counts.
CLI::Option* add_switch(CLI::App* app, const std::string& name, std::function<void(bool)> set,
                        const std::string& description);

}  // namespace flashjit::tools
