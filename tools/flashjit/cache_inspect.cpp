// `flashjit cache list | stats | path`.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "byte_size.hpp"
#include "cache_commands.hpp"
#include "cache_location.hpp"

namespace flashjit::tools {
namespace {

struct InspectOptions {
  std::string cache_dir;
  std::string arch;
  bool json = false;
};

int list(Context& ctx, const InspectOptions& o) {
  auto arch = arch_filter(o.arch);
  if (!arch.ok()) return usage_error(ctx, "cache list", arch.error().message());
  auto disk = open_cache(o.cache_dir, ctx.err, "cache list");
  if (!disk.ok()) return failure(ctx, "cache list", "", disk.error());
  auto entries = disk->list(arch.value());
  if (!entries.ok()) return failure(ctx, "cache list", "", entries.error());
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries.value())
      list.push_back({{"arch", e.key.arch}, {"name", e.key.name}, {"content_hash", e.key.content_hash},
                      {"path", e.path}, {"bytes", e.file_bytes}, {"last_used", format_time(e.last_used, true)},
                      {"problem", e.problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.problem)}});
    ctx.out << nlohmann::json{{"root", disk->root()}, {"entries", list}}.dump(2) << "\n";
    return kExitOk;
  }
  std::uint64_t total = 0;
  char line[128];
  std::snprintf(line, sizeof line, "%-8s %10s  %-19s  %s\n", "ARCH", "SIZE", "LAST USED", "NAME");
  ctx.out << line;
  for (const auto& e : entries.value()) {
    std::snprintf(line, sizeof line, "%-8s %10s  %-19s  ", e.key.arch.c_str(), format_bytes(e.file_bytes).c_str(),
                  format_time(e.last_used, false).c_str());
    ctx.out << line << e.key.name << (e.problem.empty() ? "" : "  (damaged: " + e.problem + ")") << "\n";
    total += e.file_bytes;
  }
  ctx.out << entries->size() << " entries, " << format_bytes(total) << " in " << disk->root() << "\n";
  return kExitOk;
}

int stats(Context& ctx, const InspectOptions& o) {
  auto disk = open_cache(o.cache_dir, ctx.err, "cache stats");
  if (!disk.ok()) return failure(ctx, "cache stats", "", disk.error());
  auto sum = disk->scan();
  if (!sum.ok()) return failure(ctx, "cache stats", "", sum.error());
  if (o.json) {
    nlohmann::json arches = nlohmann::json::array();
    for (const auto& a : sum->arches) arches.push_back({{"arch", a.arch}, {"entries", a.entries}, {"bytes", a.bytes}});
    ctx.out << nlohmann::json{{"root", disk->root()}, {"max_bytes", disk->max_bytes()}, {"arches", arches},
                              {"entries", sum->entries}, {"bytes", sum->bytes}, {"temp_files", sum->temp_files},
                              {"lock_files", sum->lock_files}}
                   .dump(2)
            << "\n";
    return kExitOk;
  }
  char line[160];
  ctx.out << "root: " << disk->root() << "\n";
  std::snprintf(line, sizeof line, "%-8s %8s %12s\n", "ARCH", "ENTRIES", "SIZE");
  ctx.out << line;
  for (const auto& a : sum->arches) {
    std::snprintf(line, sizeof line, "%-8s %8llu %12s\n", a.arch.c_str(), (unsigned long long)a.entries,
                  format_bytes(a.bytes).c_str());
    ctx.out << line;
  }
  std::snprintf(line, sizeof line, "%-8s %8llu %12s  (cap %s, %.0f%% used)\n", "total", (unsigned long long)sum->entries,
                format_bytes(sum->bytes).c_str(), format_bytes(disk->max_bytes()).c_str(),
                100.0 * double(sum->bytes) / double(disk->max_bytes()));
  ctx.out << line;
  ctx.out << "temp files: " << sum->temp_files << " (in-flight or crashed writes; prune removes stale ones), lock files: "
          << sum->lock_files << "\n";
  return kExitOk;
}

int path(Context& ctx, const InspectOptions& o) {
  auto root = resolve_root(o.cache_dir);
  if (!root.ok()) return failure(ctx, "cache path", "", root.error());
  ctx.out << root.value() << "\n";
  return kExitOk;
}

}  // namespace

void add_cache_inspect_commands(CLI::App& cache, Context& ctx) {
  {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* sub = cache.add_subcommand("list", "List cached kernels: arch, size, last use, name");
    sub->add_option("--arch", o->arch, "Only this arch's entries (e.g. sm_90a)")->type_name("ARCH");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return list(ctx, *o); });
  }
  {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* sub = cache.add_subcommand("stats", "Entries and bytes per arch, totals, the cap, temp and lock files");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return stats(ctx, *o); });
  }
  {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* sub = cache.add_subcommand("path", "Print the resolved cache root (creates nothing)");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return path(ctx, *o); });
  }
}

}  // namespace flashjit::tools
