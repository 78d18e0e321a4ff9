#include "warmup_plan.hpp"

#include <unordered_set>

#include "kernel_family.hpp"

namespace flashjit::tools {

Result<std::vector<WarmupJob>> plan_warmup(const Engine& engine, const std::vector<VariantSpec>& specs,
                                           const std::vector<Arch>& archs, bool all_tilings) {
  std::vector<WarmupJob> jobs;
  std::unordered_set<std::string> seen;
  auto add = [&](const KernelVariant& v, const Arch& arch, const VariantSpec& spec) -> Status {
    if (auto st = check_variant(v, arch); !st.ok())
      return Error(st.error().code(), spec.origin + ": " + v.name() + " cannot be built for " + arch.name() + ": " +
                                          st.error().message());
    if (seen.insert(arch.name() + "/" + v.name()).second) jobs.push_back({v, arch});
    return {};
  };
  for (const Arch& arch : archs) {
    for (const VariantSpec& spec : specs) {
      auto base = engine.default_variant(spec.semantics, arch.name());
      if (!base.ok())
        return Error(base.error().code(), spec.origin + ": " + spec.semantics.name() + " on " + arch.name() + ": " +
                                              base.error().message());
      KernelVariant v = std::move(base).value();
      if (spec.tiling) v.tiling = *spec.tiling;
      FJ_TRY(add(v, arch, spec));
      if (!all_tilings) continue;
      const KernelFamily* family = find_family(v.family);
      for (const Tiling& t : family->candidate_tilings(arch, v.semantics)) {
        KernelVariant c = v;
        c.tiling = t;
        FJ_TRY(add(c, arch, spec));
      }
    }
  }
  return jobs;
}

}  // namespace flashjit::tools
