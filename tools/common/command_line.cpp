#include "common/command_line.hpp"

#include <charconv>
#include <optional>

#include "base/printable.hpp"

namespace flashjit::tools {
namespace {

// CLI11's messages quote the argument they refuse: enough for any real one, while a megabyte
// argument cannot flood the terminal.
constexpr std::size_t kMaxCliErrorBytes = 1024;

// One documented set of values, said in --help and in every refusal.
constexpr const char* kSwitchValues = "=true/false, =yes/no, =1/0";

std::optional<bool> switch_value(const std::string& text) {
  if (text == "true" || text == "yes" || text == "1") return true;
  if (text == "false" || text == "no" || text == "0") return false;
  return std::nullopt;
}

// `rule` is what a value outside [min, max] is told; `open_ended` rules say "at least min", so a
// value above max is told the type's limit instead.
CLI::Validator integer_rule(std::int64_t min, std::int64_t max, const std::string& rule, bool open_ended) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || stop != end || ec == std::errc::invalid_argument)
          return "must be an integer, got '" + printable(text) + "'";
        const bool below = ec == std::errc::result_out_of_range ? text[0] == '-' : value < min;
        const bool above = ec == std::errc::result_out_of_range ? text[0] != '-' : value > max;
        if (above && open_ended) return "must be at most " + std::to_string(max) + ", got " + printable(text);
        if (below || above) return rule + ", got " + printable(text);
        text = std::to_string(value);
        return std::string();
      },
      open_ended ? ">= " + std::to_string(min) : "[" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

}  // namespace

std::string usage_message(const std::string& tool, const std::string& message) {
  return tool + ": " + printable(message, kMaxCliErrorBytes) + "\nRun with --help for more information.\n";
}

std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                                      std::ostream& err, const ExplainRefusal& explain) {
  app.failure_message([explain](const CLI::App* a, const CLI::Error& e) {
    return usage_message(a->get_name(), explain ? explain(*a, e) : std::string(e.what()));
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help arrives here too, with exit code 0.
    return app.exit(e, out, err) == 0 ? kExitOk : kExitUsage;
  }
  return std::nullopt;
}

CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return CLI::Validator(
      [names = std::move(names), list](std::string& text) {
        for (const auto& n : names)
          if (text == n) return std::string();
        return "must be one of " + list + ", got '" + printable(text) + "'";
      },
      "");
}

CLI::Validator in_range(std::int64_t min, std::int64_t max) {
  return integer_rule(min, max, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]", false);
}

CLI::Validator at_least(std::int64_t min, std::int64_t max) {
  return integer_rule(min, max, "must be at least " + std::to_string(min), true);
}

CLI::Option* add_switch(CLI::App* app, const std::string& name, std::function<void(bool)> set,
                        const std::string& description) {
  const CLI::Validator rule(
      [](std::string& text) {
        if (switch_value(text)) return std::string();
        return "takes no value (on) or " + std::string(kSwitchValues) + ", got '" + printable(text) + "'";
      },
      "");
  // A bare flag arrives as CLI11's "true"; the validator sees every value before the callback does.
  const std::string help = description + "; bare: on, or " + kSwitchValues;
  return app->add_flag(name, help)
      ->check(rule)
      ->each([set = std::move(set)](const std::string& text) { set(*switch_value(text)); });
}

}  // namespace flashjit::tools
