// `flashjit cache verify | prune | clear`.
#include <memory>

#include <nlohmann/json.hpp>

#include "byte_size.hpp"
#include "cache_commands.hpp"
#include "cache_location.hpp"

namespace flashjit::tools {
namespace {

struct UpkeepOptions {
  std::string cache_dir;
  std::string arch;
  std::string max_bytes;
  bool remove_bad = false;
  bool yes = false;
  bool json = false;
};

int verify(Context& ctx, const UpkeepOptions& o) {
  auto disk = open_cache(o.cache_dir, ctx.err, "cache verify");
  if (!disk.ok()) return failure(ctx, "cache verify", "", disk.error());
  auto report = disk->verify(o.remove_bad);
  if (!report.ok()) return failure(ctx, "cache verify", "", report.error());
  const auto& r = report.value();
  if (o.json) {
    nlohmann::json bad = nlohmann::json::array();
    for (const auto& b : r.bad) bad.push_back({{"path", b.path}, {"reason", b.reason}});
    ctx.out << nlohmann::json{{"root", disk->root()}, {"checked", r.checked}, {"good", r.good}, {"bad", bad},
                              {"removed", r.removed}}
                   .dump(2)
            << "\n";
  } else {
    for (const auto& b : r.bad) ctx.out << "BAD " << b.path << ": " << b.reason << "\n";
    ctx.out << "verified " << r.checked << " entries in " << disk->root() << ": " << r.good << " good, " << r.bad.size()
            << " bad";
    if (o.remove_bad) ctx.out << ", " << r.removed << " removed";
    ctx.out << "\n";
    if (!r.bad.empty() && !o.remove_bad) ctx.out << "rerun with --remove-bad to delete them (they are rebuilt on next use)\n";
  }
  return r.bad.empty() ? kExitOk : kExitFailed;
}

int prune(Context& ctx, const UpkeepOptions& o) {
  auto cap = parse_byte_size(o.max_bytes, "--max-bytes");
  if (!cap.ok()) return usage_error(ctx, "cache prune", cap.error().message());
  auto disk = open_cache(o.cache_dir, ctx.err, "cache prune");
  if (!disk.ok()) return failure(ctx, "cache prune", "", disk.error());
  auto report = disk->prune(cap.value());
  if (!report.ok()) return failure(ctx, "cache prune", "", report.error());
  const auto& r = report.value();
  if (o.json) {
    ctx.out << nlohmann::json{{"root", disk->root()}, {"max_bytes", cap.value()}, {"evicted", r.evicted},
                              {"bytes_freed", r.bytes_freed}, {"bytes_after", r.bytes_after},
                              {"temp_files_removed", r.temp_files_removed}, {"lock_files_removed", r.lock_files_removed}}
                   .dump(2)
            << "\n";
  } else {
    ctx.out << "pruned " << disk->root() << " to " << format_bytes(cap.value()) << ": evicted " << r.evicted
            << " least recently used entries (" << format_bytes(r.bytes_freed) << "), " << format_bytes(r.bytes_after)
            << " left; removed " << r.temp_files_removed << " stale temp files and " << r.lock_files_removed
            << " unused lock files\n";
  }
  return kExitOk;
}

int clear(Context& ctx, const UpkeepOptions& o) {
  auto arch = arch_filter(o.arch);
  if (!arch.ok()) return usage_error(ctx, "cache clear", arch.error().message());
  const std::string what = arch.value() ? "every cached kernel for " + *arch.value() : "every cached kernel";
  if (!o.yes) return usage_error(ctx, "cache clear", "--yes is required: clear deletes " + what);
  auto disk = open_cache(o.cache_dir, ctx.err, "cache clear");
  if (!disk.ok()) return failure(ctx, "cache clear", "", disk.error());
  auto report = disk->clear(arch.value());
  if (!report.ok()) return failure(ctx, "cache clear", "", report.error());
  const auto& r = report.value();
  if (o.json) {
    ctx.out << nlohmann::json{{"root", disk->root()}, {"arch", arch.value() ? nlohmann::json(*arch.value()) : nullptr},
                              {"entries_removed", r.entries_removed}, {"bytes_freed", r.bytes_freed},
                              {"temp_files_removed", r.temp_files_removed}, {"lock_files_removed", r.lock_files_removed}}
                   .dump(2)
            << "\n";
  } else {
    ctx.out << "cleared " << disk->root() << (arch.value() ? " (" + *arch.value() + ")" : "") << ": removed "
            << r.entries_removed << " entries (" << format_bytes(r.bytes_freed) << "), " << r.temp_files_removed
            << " temp files, " << r.lock_files_removed << " lock files\n";
  }
  return kExitOk;
}

}  // namespace

void add_cache_upkeep_commands(CLI::App& cache, Context& ctx) {
  {
    auto o = std::make_shared<UpkeepOptions>();
    CLI::App* sub = cache.add_subcommand("verify", "Read and check every entry; exit code 1 if any is bad");
    sub->add_flag("--remove-bad", o->remove_bad, "Delete the entries that fail (they are rebuilt on next use)");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return verify(ctx, *o); });
  }
  {
    auto o = std::make_shared<UpkeepOptions>();
    CLI::App* sub = cache.add_subcommand(
        "prune", "Evict least recently used entries down to a size; remove stale temp and unused lock files");
    sub->add_option("--max-bytes", o->max_bytes, "Size to keep at most, e.g. 536870912, 512M, 2G (powers of 1024)")
        ->required()
        ->type_name("SIZE");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return prune(ctx, *o); });
  }
  {
    auto o = std::make_shared<UpkeepOptions>();
    CLI::App* sub = cache.add_subcommand("clear", "Delete every entry (or one arch's), with temp and lock files");
    sub->add_option("--arch", o->arch, "Only this arch's entries (e.g. sm_80)")->type_name("ARCH");
    sub->add_flag("--yes", o->yes, "Required: confirms the deletion");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return clear(ctx, *o); });
  }
}

}  // namespace flashjit::tools
