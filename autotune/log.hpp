// Where the autotune module's diagnostics go: one line per notable event (a stale or corrupt
// tuning file, a pruned or failed candidate, a tuning run and its result).
#pragma once

#include <functional>
#include <string>

namespace flashjit::autotune {

// Receives one line, without a trailing newline. An empty Logger discards lines.
using Logger = std::function<void(const std::string&)>;

// The logger used when a caller gives none: stderr, prefixed "[flashjit tune] ", when
// $FLASHJIT_LOG is set and not "0" (the convention of the rest of flashjit); else empty.
Logger default_logger();

// Wraps `logger` so that calls from many threads never interleave; empty stays empty.
Logger serialized_logger(Logger logger);

}  // namespace flashjit::autotune
