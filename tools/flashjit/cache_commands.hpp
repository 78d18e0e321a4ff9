// The leaves of `flashjit cache`, one group per file: inspecting (list, stats, path), upkeep
// (verify, prune, clear) and moving entries between machines (export, import). Each adds itself
// to the `cache` subcommand and takes --cache-dir.
#pragma once

#include <chrono>
#include <string>

#include "context.hpp"

namespace flashjit::tools {

void add_cache_inspect_commands(CLI::App& cache, Context& ctx);  // list, stats, path
void add_cache_upkeep_commands(CLI::App& cache, Context& ctx);   // verify, prune, clear
void add_cache_bundle_commands(CLI::App& cache, Context& ctx);   // export, import

// "2024-05-01 12:34:56" in local time, or ISO 8601 UTC ("2024-05-01T10:34:56Z") with utc.
std::string format_time(std::chrono::system_clock::time_point t, bool utc);

}  // namespace flashjit::tools
