// The --cache-dir option every cache-touching subcommand takes, and opening the cache it names.
#pragma once

#include <CLI/CLI.hpp>

#include <ostream>
#include <string>

#include "cache/disk_cache.hpp"
#include "flashjit/status.hpp"

namespace flashjit::tools {

// Adds "--cache-dir DIR" storing into `dir` (empty: the default root).
void add_cache_dir_option(CLI::App* sub, std::string& dir);

// The root a subcommand works on: `dir` made absolute, else cache::resolve_cache_root().
// Creates nothing.
Result<std::string> resolve_root(const std::string& dir);

// Whether a log line of the cache (or the engine) tells of a lock wait still going on ("lock wait:
// ... held by pid 1234 (T (stopped)) ..."). Such lines are shown even when other log lines are
// not: otherwise a stopped lock holder is minutes of silence.
bool is_lock_wait_notice(const std::string& line);

// Opens (creating if needed, mode 0700) and checks the cache at resolve_root(dir). Lock-wait
// notices go to `notices` as "flashjit <command>: lock wait: ..."; other log lines go where
// $FLASHJIT_LOG sends them.
Result<cache::DiskCache> open_cache(const std::string& dir, std::ostream& notices, const std::string& command);

// --arch filter of the cache subcommands: empty means all; otherwise must be a valid arch name.
Result<std::optional<std::string>> arch_filter(const std::string& arch);

}  // namespace flashjit::tools
