#include "autotune/tune_mode.hpp"

#include <cstdlib>
#include <string>

#include "base/printable.hpp"

namespace flashjit::autotune {

namespace {

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

}  // namespace

const char* tune_mode_name(TuneMode mode) {
  switch (mode) {
    case TuneMode::off: return "off";
    case TuneMode::on_first_use: return "first-use";
    case TuneMode::offline_only: return "offline";
  }
  return "?";
}

Result<TuneMode> parse_tune_mode(std::string_view text) {
  const std::string t = ascii_lower(text);
  if (t == "off") return TuneMode::off;
  if (t == "first-use" || t == "on_first_use") return TuneMode::on_first_use;
  if (t == "offline" || t == "offline_only") return TuneMode::offline_only;
  return Error(Code::invalid_argument,
               "tune mode must be 'off', 'first-use' (or 'on_first_use') or 'offline' (or "
               "'offline_only'), got '" + printable(text) + "'")
      .with("value", printable(text));
}

TuneMode tune_mode_from_env(TuneMode fallback, const Logger& logger) {
  const char* v = std::getenv(kTuneModeEnv);
  if (!v || !*v) return fallback;
  auto mode = parse_tune_mode(v);
  if (mode) return *mode;
  if (logger)
    logger(std::string(kTuneModeEnv) + ": " + mode.error().message() + "; using '" +
           tune_mode_name(fallback) + "'");
  return fallback;
}

}  // namespace flashjit::autotune
