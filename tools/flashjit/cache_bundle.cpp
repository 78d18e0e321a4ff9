// `flashjit cache export | import`: one bundle file carries a warmed cache to other machines.
#include <memory>

#include <nlohmann/json.hpp>

#include "base/printable.hpp"
#include "byte_size.hpp"
#include "cache/bundle.hpp"
#include "cache_commands.hpp"
#include "cache_location.hpp"

namespace flashjit::tools {
namespace {

struct BundleOptions {
  std::string cache_dir;
  std::string file;
  std::string arch;
  bool replace = false;
  bool json = false;
};

int export_cmd(Context& ctx, const BundleOptions& o) {
  auto arch = arch_filter(o.arch);
  if (!arch.ok()) return usage_error(ctx, "cache export", arch.error().message());
  auto disk = open_cache(o.cache_dir, ctx.err, "cache export");
  if (!disk.ok()) return failure(ctx, "cache export", "", disk.error());
  auto report = cache::export_bundle(disk.value(), o.file, arch.value());
  if (!report.ok()) return failure(ctx, "cache export", printable(o.file), report.error());
  const auto& r = report.value();
  for (const auto& s : r.skipped) ctx.err << "skipped (failed verification) " << s.path << ": " << s.reason << "\n";
  if (o.json) {
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& s : r.skipped) skipped.push_back({{"path", s.path}, {"reason", s.reason}});
    ctx.out << nlohmann::json{{"root", disk->root()}, {"bundle", o.file}, {"entries", r.entries},
                              {"payload_bytes", r.payload_bytes}, {"skipped", skipped}}
                   .dump(2)
            << "\n";
  } else {
    ctx.out << "exported " << r.entries << " entries (" << format_bytes(r.payload_bytes) << ") from " << disk->root()
            << " to " << o.file;
    if (!r.skipped.empty()) ctx.out << "; skipped " << r.skipped.size() << " damaged entries";
    ctx.out << "\n";
  }
  return kExitOk;
}

int import_cmd(Context& ctx, const BundleOptions& o) {
  auto disk = open_cache(o.cache_dir, ctx.err, "cache import");
  if (!disk.ok()) return failure(ctx, "cache import", "", disk.error());
  cache::ImportOptions io;
  io.replace_existing = o.replace;
  auto report = cache::import_bundle(disk.value(), o.file, io);
  if (!report.ok()) {
    // An error while publishing comes after some entries were written; say how many.
    const auto imported = report.error().detail("imported");
    return failure(ctx, "cache import",
                   imported ? printable(o.file) + ": stopped after importing " + *imported + " entries"
                            : printable(o.file) + " rejected, nothing imported",
                   report.error());
  }
  const auto& r = report.value();
  for (const auto& c : r.collisions)
    ctx.err << "not imported: " << c.key << ": its file " << c.path << " holds " << c.other_key
            << " (entry file names keep only the first 16 hex digits of the hash)\n";
  if (o.json) {
    nlohmann::json collisions = nlohmann::json::array();
    for (const auto& c : r.collisions) collisions.push_back({{"key", c.key}, {"other_key", c.other_key}, {"path", c.path}});
    ctx.out << nlohmann::json{{"root", disk->root()}, {"bundle", o.file}, {"entries", r.entries}, {"imported", r.imported},
                              {"already_present", r.already_present}, {"payload_bytes", r.payload_bytes},
                              {"collisions", collisions}}
                   .dump(2)
            << "\n";
  } else {
    ctx.out << "imported " << r.imported << " of " << r.entries << " entries (" << format_bytes(r.payload_bytes)
            << ") from " << o.file << " into " << disk->root() << "; " << r.already_present << " already present";
    if (!r.collisions.empty()) ctx.out << "; " << r.collisions.size() << " not imported (file name collision)";
    ctx.out << "\n";
  }
  return r.collisions.empty() ? kExitOk : kExitFailed;
}

}  // namespace

void add_cache_bundle_commands(CLI::App& cache, Context& ctx) {
  {
    auto o = std::make_shared<BundleOptions>();
    CLI::App* sub = cache.add_subcommand("export", "Write the verified entries (all, or one arch's) to a bundle file");
    sub->add_option("FILE", o->file, "Bundle to write: a new file, or a regular file replaced atomically")->required()->type_name("FILE");
    sub->add_option("--arch", o->arch, "Only this arch's entries (e.g. sm_90a)")->type_name("ARCH");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return export_cmd(ctx, *o); });
  }
  {
    auto o = std::make_shared<BundleOptions>();
    CLI::App* sub = cache.add_subcommand(
        "import", "Check a whole bundle file, then add its entries to the cache (a damaged bundle changes nothing)");
    sub->add_option("FILE", o->file, "Bundle written by `flashjit cache export`")
        ->required()
        ->check(CLI::ExistingFile.description(""))
        ->type_name("FILE");
    sub->add_flag("--replace", o->replace, "Overwrite entries the cache already has (default: keep them)");
    sub->add_flag("--json", o->json, "Machine-readable output on stdout");
    add_cache_dir_option(sub, o->cache_dir);
    on_parsed(sub, ctx, [&ctx, o] { return import_cmd(ctx, *o); });
  }
}

}  // namespace flashjit::tools
