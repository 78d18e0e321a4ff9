// When the engine may time kernels to pick a tiling. Tuning costs seconds per problem bucket
// (every candidate is compiled and timed), so it is opt-in at run time and can be done ahead of
// time instead (an offline run fills the tuning store; production reads it).
#pragma once

#include <string_view>

#include "autotune/log.hpp"
#include "flashjit/status.hpp"

namespace flashjit::autotune {

enum class TuneMode {
  off,           // always the family's default tiling; the store is not even read
  on_first_use,  // a stored result if there is one, else tune this bucket now and store it
  offline_only,  // stored results, else the default; never tunes at run time
};

// The environment variable tune_mode_from_env() reads.
inline constexpr const char* kTuneModeEnv = "FLASHJIT_TUNE";

// The canonical spelling: "off", "first-use", "offline".
const char* tune_mode_name(TuneMode mode);

// Accepts "off", "first-use" or "on_first_use", "offline" or "offline_only" (ASCII case is
// ignored). Anything else is Code::invalid_argument naming the accepted spellings.
Result<TuneMode> parse_tune_mode(std::string_view text);

// $FLASHJIT_TUNE parsed; `fallback` when it is unset or empty, and also when it is malformed,
// in which case one line saying so goes to `logger` (a typo must not stop the program, but
// must not pass silently either).
TuneMode tune_mode_from_env(TuneMode fallback, const Logger& logger = {});

}  // namespace flashjit::autotune
