#include "common/command_line.hpp"

#include <optional>

#include "base/printable.hpp"

namespace flashjit::tools {
namespace {

// One documented set of values, said in --help and in every refusal.
constexpr const char* kSwitchValues = "=true/false, =yes/no, =1/0";

std::optional<bool> switch_value(const std::string& text) {
  if (text == "true" || text == "yes" || text == "1") return true;
  if (text == "false" || text == "no" || text == "0") return false;
  return std::nullopt;
}

}  // namespace

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
