// The --cache-dir option every cache-touching subcommand takes, and opening the cache it names.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cache/disk_cache.hpp"
#include "flashjit/status.hpp"

namespace flashjit::tools {

// Adds "--cache-dir DIR" storing into `dir` (empty: the default root).
void add_cache_dir_option(CLI::App* sub, std::string& dir);

// The root a subcommand works on: `dir` made absolute, else cache::resolve_cache_root().
// Creates nothing.
Result<std::string> resolve_root(const std::string& dir);

// Opens (creating if needed, mode 0700) and checks the cache at resolve_root(dir).
Result<cache::DiskCache> open_cache(const std::string& dir);

// --arch filter of the cache subcommands: empty means all; otherwise must be a valid arch name.
Result<std::optional<std::string>> arch_filter(const std::string& arch);

}  // namespace flashjit::tools
