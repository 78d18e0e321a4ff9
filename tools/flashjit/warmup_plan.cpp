#include "warmup_plan.hpp"

#include <unordered_set>

#include "kernel_family.hpp"

namespace flashjit::tools {

Result<std::vector<WarmupJob>> plan_warmup(const std::vector<VariantSpec>& specs,
                                           const std::vector<Arch>& archs, bool all_tilings) {
  std::vector<WarmupJob> jobs;
  std::unordered_set<std::string> seen;
  auto add = [&](const KernelVariant& v, const Arch& arch, const VariantSpec& spec) -> Status {
    if (auto st = check_variant(v, arch); !st.ok())
      return Error(st.error().code(), spec.origin + ": " + v.name() + " cannot be built for " + arch.name() + ": " +
                                          st.error().message());
    // One job per compiled kernel: tilings that differ only in plan-only knobs share it.
    if (seen.insert(arch.name() + "/" + v.code_name()).second) jobs.push_back({v, arch});
    return {};
  };
  for (const Arch& arch : archs) {
    for (const VariantSpec& spec : specs) {
      const auto where = [&] { return spec.origin + ": " + spec.semantics.name() + " on " + arch.name(); };
      std::vector<const KernelFamily*> families;
      if (!spec.family.empty()) {
        const KernelFamily* f = find_family(spec.family);
        if (!f) return Error(Code::invalid_argument, where() + ": unknown kernel family '" + spec.family + "'");
        families.push_back(f);
      } else if (!spec.tiling.empty()) {  // a fixed tiling: the first family whose knobs it names
        for (const KernelFamily* f : families_for(arch, spec.semantics))
          if (Tiling::parse(f->knobs(), spec.tiling).ok()) {
            families.push_back(f);
            break;
          }
        if (families.empty())
          return Error(Code::invalid_argument, where() + ": tiling '" + spec.tiling + "' is not a tiling of any family "
                                                         "that serves this variant (name one with --family)");
      } else {
        families = families_for(arch, spec.semantics);
      }
      if (families.empty()) {
        auto why = choose_family(arch, spec.semantics, nullptr);
        return Error(Code::unsupported, where() + ": " + (why.ok() ? "no family" : why.error().message()));
      }
      for (const KernelFamily* family : families) {
        KernelVariant v{family->name(), spec.semantics, family->default_tiling(arch, spec.semantics, nullptr)};
        if (!spec.tiling.empty()) {
          auto t = Tiling::parse(family->knobs(), spec.tiling);
          if (!t.ok()) return Error(Code::invalid_argument, where() + ": " + t.error().message());
          v.tiling = t.value();
          FJ_TRY(add(v, arch, spec));
        } else {
          for (const Tiling& t : family->default_tilings(arch, spec.semantics)) {  // one per shape class
            v.tiling = t;
            FJ_TRY(add(v, arch, spec));
          }
        }
        if (!all_tilings) continue;
        for (const Tiling& t : family->candidate_tilings(arch, v.semantics)) {
          KernelVariant c = v;
          c.tiling = t;
          FJ_TRY(add(c, arch, spec));
        }
      }
    }
  }
  return jobs;
}

}  // namespace flashjit::tools
