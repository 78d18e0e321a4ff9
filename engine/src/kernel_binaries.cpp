#include "kernel_binaries.hpp"

#include "compiler.hpp"
#include "base/content_hash.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "template_store.hpp"

namespace flashjit {

KernelBinaries::KernelBinaries(bool use_disk, std::optional<std::string> cache_dir, Log log)
    : use_disk_(use_disk), cache_dir_(std::move(cache_dir)), log_(std::move(log)) {}

cache::EntryKey KernelBinaries::cache_key_from(const KernelVariant& v, const Arch& arch, const std::string& templates_hash,
                                               const std::string& nvrtc_version, const std::vector<std::string>& options,
                                               int engine_format) {
  ContentHasher h;
  h.field("engine_format", engine_format)
      .field("templates", templates_hash)
      .field("variant", v.content_hash())
      .field("nvrtc", nvrtc_version)
      .field("arch", arch.name());
  for (const auto& o : options) h.field("option", o);
  // Named by the code: tilings that differ only in how the plan launches it share one entry.
  return cache::EntryKey{arch.name(), v.code_name(), h.hex()};
}

Result<cache::EntryKey> KernelBinaries::cache_key(const KernelVariant& v, const Arch& arch) {
  auto nv = NvrtcLibrary::get();
  if (!nv.ok()) return std::move(nv).error();
  return cache_key_from(v, arch, TemplateStore::instance().content_hash(), nv.value()->version, compile_options(arch));
}

cache::DiskCache* KernelBinaries::open_disk() {
  std::call_once(open_once_, [&] {
    if (!use_disk_) return;
    cache::Options o;
    o.root = cache_dir_;
    o.logger = log_;
    auto d = cache::DiskCache::open(o);
    if (!d.ok()) {
      disk_open_problem_ = "disk cache disabled: " + d.error().message();
      if (log_) log_("disk cache disabled, compiling in memory: " + d.error().to_string());
      return;
    }
    disk_ = std::make_unique<cache::DiskCache>(std::move(d).value());
  });
  return disk_.get();
}

cache::DiskCache* KernelBinaries::disk() { return open_disk(); }

Result<KernelBinary> KernelBinaries::get(const KernelVariant& v, const Arch& arch) {
  FJ_TRY(check_variant(v, arch));
  KernelBinary out;
  auto build = [&]() -> Result<std::string> {
    // The program name ends up in the cubin: named by the code, as the cache key is, so that
    // tilings differing only in plan-only knobs (which share an entry) compile to the same bytes.
    auto compiled = compile_cubin({v.code_name(), render_source(*find_family(v.family), v), arch});
    if (!compiled.ok()) return std::move(compiled).error().with("variant", v.name());
    out.compile_ms = compiled->compile_ms;
    out.nvrtc_log = compiled->log;
    return std::move(compiled->cubin);
  };
  auto in_memory = [&](std::string problem) -> Result<KernelBinary> {
    auto cubin = build();
    if (!cubin.ok()) return std::move(cubin).error();
    out.cubin = std::move(cubin).value();
    out.disk_cache_problem = std::move(problem);
    return out;
  };
  cache::DiskCache* disk = open_disk();
  if (!disk) return in_memory(disk_open_problem_);
  auto key = cache_key(v, arch);
  if (!key.ok()) return std::move(key).error();
  cache::LookupOutcome outcome = cache::LookupOutcome::built;
  std::optional<Error> store_error;
  bool build_failed = false;
  auto cubin = disk->get_or_build(
      key.value(),
      [&]() -> Result<std::string> {
        auto r = build();
        build_failed = !r.ok();
        return r;
      },
      &outcome, &store_error);
  if (!cubin.ok()) {
    if (build_failed) return std::move(cubin).error();
    // The cache refused a folder (an unsafe arch or locks folder) or failed otherwise: as with an
    // unsafe root, the kernel is compiled in memory and nothing is read from or written there.
    if (log_) log_("disk cache not used for " + v.name() + ", compiling in memory: " + cubin.error().to_string());
    return in_memory(cubin.error().message());
  }
  out.cubin = std::move(cubin).value();
  out.origin = outcome == cache::LookupOutcome::built ? BinaryOrigin::compiled : BinaryOrigin::disk;
  // The cache has logged the failed store; the caller learns it here.
  if (store_error) out.disk_cache_problem = "could not store it: " + store_error->message();
  return out;
}

}  // namespace flashjit
