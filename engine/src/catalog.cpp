// The engine's catalog, asked without an Engine or a GPU: its kernel families, their tilings
// and the library's version.
#include "flashjit/flashjit.hpp"

#include "base/printable.hpp"
#include "kernel_family.hpp"
#include "cudalib/nvrtc_library.hpp"

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

}  // namespace

Result<Tiling> parse_tiling(const std::string& family, const std::string& text) {
  if (family.empty()) {
    // Each family's tilings have letters of their own, so the letters name the family; the
    // caller then hears that family's rules, not those of whichever family comes first.
    std::string forms;
    for (const auto* f : kernel_families()) {
      if (spells_tags(f->knobs(), text)) return Tiling::parse(f->knobs(), text);
      forms += std::string(forms.empty() ? "" : "; ") + "a " + f->name() + " tiling looks like " + f->knobs().form();
    }
    return Error(Code::invalid_argument, "'" + printable(text) + "' is not a tiling of any family: " + forms);
  }
  const KnobTable* knobs = family_knobs(family);
  if (!knobs) return Error(Code::invalid_argument, "unknown kernel family '" + family + "'");
  return Tiling::parse(*knobs, text);
}

Result<TileShape> tile_shape(const Tiling& tiling) {
  const KernelFamily* f = tiling.table ? find_family(tiling.table->family) : nullptr;
  if (!f) return Error(Code::invalid_argument, "tile_shape: the tiling belongs to no kernel family");
  return f->tile_shape(tiling);
}

std::vector<std::string> kernel_family_names() {
  std::vector<std::string> out;
  for (const auto* f : kernel_families()) out.push_back(f->name());
  return out;
}

std::string version() {
  std::string v = "flashjit 0.1.0";
  if (auto nv = NvrtcLibrary::get(); nv.ok()) v += " (NVRTC " + nv.value()->version + ")";
  return v;
}

}  // namespace flashjit
