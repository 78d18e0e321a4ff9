// The engine's catalog (flashjit/catalog.hpp), asked without an Engine or a GPU: thin views of the
// family registry (kernel_family.hpp), the disk cache's key (kernel_binaries.hpp) and the versions.
#include "flashjit/catalog.hpp"

#include "base/printable.hpp"
#include "cudalib/nvrtc_library.hpp"
#include "flashjit/flashjit.hpp"
#include "kernel_binaries.hpp"
#include "kernel_family.hpp"
#include "problem.hpp"
#include "template_store.hpp"

#ifndef FLASHJIT_VERSION_STRING
#error "FLASHJIT_VERSION_STRING is set by engine/CMakeLists.txt from the project's version"
#endif

namespace flashjit {

namespace {

// Whether `text` has `knobs`' tags, in order, with only digits between them.
bool spells_tags(const KnobTable& knobs, const std::string& text) {
  std::string letters, tags;
  for (char c : text)
    if (c < '0' || c > '9') letters += c;
  for (const Knob& k : knobs.knobs) tags += k.tag;
  return letters == tags;
}

Result<const KernelFamily*> known_family(const std::string& name) {
  const KernelFamily* f = find_family(name);
  if (!f) return Error(Code::invalid_argument, "unknown kernel family '" + printable(name) + "'");
  return f;
}

// `name`'s family, when it serves `s` on `arch` for some shape (the tilings it offers are then
// meaningful); the refusal as an error otherwise, worded as check_variant() words it.
Result<const KernelFamily*> serving_family(const std::string& name, const Arch& arch, const Semantics& s) {
  auto f = known_family(name);
  if (!f.ok()) return f;
  FJ_TRY(s.check());
  if (const char* why_not = f.value()->refusal(arch, s, nullptr))
    return Error(Code::unsupported, name + " cannot build " + s.name() + " for " + arch.name() + ": " +
                                        explain_refusal(*f.value(), arch, s, why_not));
  return f;
}

}  // namespace

const char* pass_name(Pass pass) { return pass == Pass::backward ? "backward" : "forward"; }

Semantics backward_semantics(const Semantics& forward) {
  Semantics s = forward;
  s.write_lse = false;
  return s;
}

Semantics forward_semantics(const Semantics& s) {
  Semantics out = s;
  out.deterministic = false;
  return out;
}

std::vector<std::string> kernel_family_names(Pass pass) {
  std::vector<std::string> out;
  for (const auto* f : kernel_families(pass)) out.push_back(f->name());
  return out;
}

Result<Pass> family_pass(const std::string& family) {
  auto f = known_family(family);
  if (!f.ok()) return std::move(f).error();
  return f.value()->pass();
}

Result<std::vector<std::string>> families_serving(const Arch& arch, const Semantics& semantics, Pass pass) {
  FJ_TRY(semantics.check());
  std::vector<std::string> out;
  for (const KernelFamily* f : families_for(arch, semantics, pass)) out.push_back(f->name());
  if (out.empty()) {
    auto why = choose_family(arch, semantics, nullptr, pass);  // each family's reason
    if (!why.ok()) return std::move(why).error();
    return Error(Code::internal, "no family serves " + semantics.name() + " on " + arch.name() + " for every shape");
  }
  return out;
}

Result<std::vector<Tiling>> default_tilings(const std::string& family, const Arch& arch, const Semantics& semantics) {
  auto f = serving_family(family, arch, semantics);
  if (!f.ok()) return std::move(f).error();
  return f.value()->default_tilings(arch, semantics);
}

Result<std::vector<Tiling>> candidate_tilings(const std::string& family, const Arch& arch, const Semantics& semantics) {
  auto f = serving_family(family, arch, semantics);
  if (!f.ok()) return std::move(f).error();
  return f.value()->candidate_tilings(arch, semantics);
}

Result<KernelVariant> family_variant(const std::string& family, const AttentionArgs& args, const Arch& arch) {
  auto f = known_family(family);
  if (!f.ok()) return std::move(f).error();
  auto p = validate_problem(args);
  if (!p.ok()) return std::move(p).error();
  if (const char* why_not = f.value()->refusal(arch, p->semantics, &p->shape))
    return Error(Code::unsupported, family + " refuses this call on " + arch.name() + ": " +
                                        explain_refusal(*f.value(), arch, p->semantics, why_not));
  return KernelVariant{family, p->semantics, f.value()->default_tiling(arch, p->semantics, &p->shape)};
}

Result<Tiling> parse_tiling(const std::string& family, const std::string& text) {
  if (family.empty()) {
    // Each family's tilings have letters of their own, so the letters name the family; the
    // caller then hears that family's rules, not those of whichever family comes first.
    std::string forms;
    for (Pass pass : {Pass::forward, Pass::backward})
      for (const auto* f : kernel_families(pass)) {
        if (spells_tags(f->knobs(), text)) return Tiling::parse(f->knobs(), text);
        forms += std::string(forms.empty() ? "" : "; ") + "a " + f->name() + " tiling looks like " + f->knobs().form();
      }
    return Error(Code::invalid_argument, "'" + printable(text) + "' is not a tiling of any family: " + forms);
  }
  auto f = known_family(family);
  if (!f.ok()) return std::move(f).error();
  return Tiling::parse(f.value()->knobs(), text);
}

Result<TileShape> tile_shape(const Tiling& tiling) {
  const KernelFamily* f = tiling.table ? find_family(tiling.table->family) : nullptr;
  if (!f) return Error(Code::invalid_argument, "tile_shape: the tiling belongs to no kernel family");
  return f->tile_shape(tiling);
}

Status check_buildable(const KernelVariant& variant, const Arch& arch) { return check_variant(variant, arch); }

Result<DiskCacheKey> disk_cache_key(const KernelVariant& variant, const Arch& arch) {
  auto key = KernelBinaries::cache_key(variant, arch);
  if (!key.ok()) return std::move(key).error();
  return DiskCacheKey{key->arch, key->name, key->content_hash};
}

std::string library_version() { return FLASHJIT_VERSION_STRING; }

Result<NvrtcInfo> nvrtc_info() {
  auto nv = NvrtcLibrary::get();
  if (!nv.ok()) return std::move(nv).error();
  return NvrtcInfo{nv.value()->version, nv.value()->path};
}

int engine_format_version() { return kEngineFormatVersion; }

std::string templates_hash() { return TemplateStore::instance().content_hash(); }

std::string version() {
  std::string v = "flashjit " + library_version();
  if (auto nv = nvrtc_info(); nv.ok()) v += " (NVRTC " + nv->version + ")";
  return v;
}

}  // namespace flashjit
