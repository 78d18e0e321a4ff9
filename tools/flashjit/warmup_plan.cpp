#include "warmup_plan.hpp"

#include <algorithm>
#include <unordered_set>

namespace flashjit::tools {

namespace {

// `e` with `context` before its message.
Error within(const std::string& context, const Error& e) { return Error(e.code(), context + ": " + e.message()); }

// The families a spec compiles on an arch: the one it names, else with a fixed tiling the first
// serving family whose knobs that tiling names, else every family that serves its semantics.
Result<std::vector<std::string>> spec_families(const VariantSpec& spec, const Arch& arch, const std::string& where) {
  const std::vector<std::string> names = kernel_family_names();
  if (!spec.family.empty()) {
    if (std::find(names.begin(), names.end(), spec.family) == names.end())
      return Error(Code::invalid_argument, where + ": unknown kernel family '" + spec.family + "'");
    return std::vector<std::string>{spec.family};
  }
  auto serving = families_serving(arch, spec.semantics);
  if (!serving.ok()) return within(where, serving.error());
  if (spec.tiling.empty()) return serving;
  for (const std::string& family : serving.value())
    if (parse_tiling(family, spec.tiling).ok()) return std::vector<std::string>{family};
  return Error(Code::invalid_argument, where + ": tiling '" + spec.tiling + "' is not a tiling of any family "
                                               "that serves this variant (name one with --family)");
}

}  // namespace

Result<std::vector<WarmupJob>> plan_warmup(const std::vector<VariantSpec>& specs,
                                           const std::vector<Arch>& archs, bool all_tilings) {
  std::vector<WarmupJob> jobs;
  std::unordered_set<std::string> seen;
  auto add = [&](const KernelVariant& v, const Arch& arch, const VariantSpec& spec) -> Status {
    if (auto st = check_buildable(v, arch); !st.ok())
      return within(spec.origin + ": " + v.name() + " cannot be built for " + arch.name(), st.error());
    // One job per compiled kernel: tilings that differ only in plan-only knobs share it.
    if (seen.insert(arch.name() + "/" + v.code_name()).second) jobs.push_back({v, arch});
    return {};
  };
  for (const Arch& arch : archs) {
    for (const VariantSpec& spec : specs) {
      const std::string where = spec.origin + ": " + spec.semantics.name() + " on " + arch.name();
      auto families = spec_families(spec, arch, where);
      if (!families.ok()) return std::move(families).error();
      for (const std::string& family : families.value()) {
        KernelVariant v{family, spec.semantics, {}};
        if (!spec.tiling.empty()) {
          auto t = parse_tiling(family, spec.tiling);
          if (!t.ok()) return within(where, t.error());
          v.tiling = t.value();
          FJ_TRY(add(v, arch, spec));
        } else {
          auto defaults = default_tilings(family, arch, spec.semantics);  // one per shape class
          if (!defaults.ok()) return within(spec.origin, defaults.error());
          for (const Tiling& t : defaults.value()) {
            v.tiling = t;
            FJ_TRY(add(v, arch, spec));
          }
        }
        if (!all_tilings) continue;
        auto candidates = candidate_tilings(family, arch, spec.semantics);
        if (!candidates.ok()) return within(spec.origin, candidates.error());
        for (const Tiling& t : candidates.value()) {
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
