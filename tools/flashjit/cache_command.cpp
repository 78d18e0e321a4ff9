// `flashjit cache`: inspect and manage the on-disk kernel cache (see cache_commands.hpp).
#include <ctime>

#include "cache_commands.hpp"

namespace flashjit::tools {

std::string format_time(std::chrono::system_clock::time_point t, bool utc) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  if (utc) ::gmtime_r(&s, &tm);
  else ::localtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, utc ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void add_cache_command(CLI::App& app, Context& ctx) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect and manage the on-disk kernel cache");
  cache->require_subcommand(1);
  cache->footer("Each subcommand takes --cache-dir DIR and --help. Layout: <root>/<arch>/<kernel>-<hash>.fjk");
  add_cache_inspect_commands(*cache, ctx);
  add_cache_upkeep_commands(*cache, ctx);
  add_cache_bundle_commands(*cache, ctx);
}

}  // namespace flashjit::tools
