#include "kernel_binaries.hpp"

#include "compiler.hpp"
#include "base/content_hash.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"
#include "nvrtc_library.hpp"
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
  return cache::EntryKey{arch.name(), v.name(), h.hex()};
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
      if (log_) log_("disk cache disabled: " + d.error().to_string());
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
    auto compiled = compile_cubin({v.name(), render_source(*find_family(v.family), v), arch});
    if (!compiled.ok()) return std::move(compiled).error().with("variant", v.name());
    out.compile_ms = compiled->compile_ms;
    out.nvrtc_log = compiled->log;
    return std::move(compiled->cubin);
  };
  cache::DiskCache* disk = open_disk();
  if (!disk) {
    auto cubin = build();
    if (!cubin.ok()) return std::move(cubin).error();
    out.cubin = std::move(cubin).value();
    return out;
  }
  auto key = cache_key(v, arch);
  if (!key.ok()) return std::move(key).error();
  cache::LookupOutcome outcome = cache::LookupOutcome::built;
  auto cubin = disk->get_or_build(key.value(), build, &outcome);
  if (!cubin.ok()) return std::move(cubin).error();
  out.cubin = std::move(cubin).value();
  out.origin = outcome == cache::LookupOutcome::built ? BinaryOrigin::compiled : BinaryOrigin::disk;
  return out;
}

}  // namespace flashjit
