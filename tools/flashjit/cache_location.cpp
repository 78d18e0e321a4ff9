#include "cache_location.hpp"

#include <filesystem>

#include "base/printable.hpp"
#include "cache/cache_dir.hpp"

namespace flashjit::tools {

void add_cache_dir_option(CLI::App* sub, std::string& dir) {
  sub->add_option("--cache-dir", dir,
                  "Cache root (default: $FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else ~/.cache/flashjit)")
      ->type_name("DIR");
}

Result<std::string> resolve_root(const std::string& dir) {
  if (dir.empty()) return cache::resolve_cache_root();
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  if (ec) return Error(Code::io_error, "--cache-dir '" + printable(dir) + "': " + ec.message());
  auto root = abs.lexically_normal();
  if (root.has_relative_path() && root.filename().empty()) root = root.parent_path();  // "dir/" -> "dir"
  return root.string();
}

bool is_lock_wait_notice(const std::string& line) { return line.rfind("lock wait: ", 0) == 0; }

Result<cache::DiskCache> open_cache(const std::string& dir, std::ostream& notices, const std::string& command) {
  auto root = resolve_root(dir);
  if (!root.ok()) return std::move(root).error();
  cache::Options o;
  o.root = root.value();
  o.logger = [&notices, command, env = cache::env_logger()](const std::string& line) {
    if (is_lock_wait_notice(line)) notices << "flashjit " << command << ": " << line << "\n" << std::flush;
    else if (env) env(line);
  };
  return cache::DiskCache::open(o);
}

Result<std::optional<std::string>> arch_filter(const std::string& arch) {
  if (arch.empty()) return std::optional<std::string>{};
  if (auto st = cache::validate_arch(arch); !st.ok())
    return Error(Code::invalid_argument, "--arch: " + st.error().message());
  return std::optional<std::string>{arch};
}

}  // namespace flashjit::tools
