#include "warmup_plan.hpp"

#include <unordered_set>

namespace flashjit::tools {

namespace {

// `e` with `context` before its message.
Error within(const std::string& context, const Error& e) { return Error(e.code(), context + ": " + e.message()); }

// The families a spec compiles on an arch for a pass: the one it names (which must be of that
// pass), else with a fixed tiling the first serving family whose knobs that tiling names, else
// every family of the pass that serves its semantics.
Result<std::vector<std::string>> spec_families(const VariantSpec& spec, const Semantics& semantics, Pass pass,
                                               const Arch& arch, const std::string& where) {
  if (!spec.family.empty()) {
    auto family_is = family_pass(spec.family);
    if (!family_is.ok()) return within(where, family_is.error());
    if (family_is.value() != pass)
      return Error(Code::invalid_argument, where + ": " + spec.family + " is a " + pass_name(family_is.value()) +
                                               " family, but " + pass_name(pass) +
                                               " kernels were asked for (see --pass, or drop --family)");
    return std::vector<std::string>{spec.family};
  }
  auto serving = families_serving(arch, semantics, pass);
  if (!serving.ok()) return within(where, serving.error());
  if (spec.tiling.empty()) return serving;
  for (const std::string& family : serving.value())
    if (parse_tiling(family, spec.tiling).ok()) return std::vector<std::string>{family};
  return Error(Code::invalid_argument, where + ": tiling '" + spec.tiling + "' is not a tiling of any " + pass_name(pass) +
                                           " family that serves this variant (name one with --family)");
}

}  // namespace

Result<std::vector<WarmupJob>> plan_warmup(const std::vector<VariantSpec>& specs,
                                           const std::vector<Arch>& archs, bool all_tilings) {
  std::vector<WarmupJob> jobs;
  std::unordered_set<std::string> seen;
  auto add = [&](const KernelVariant& v, const Arch& arch, Pass pass, const VariantSpec& spec) -> Status {
    if (auto st = check_buildable(v, arch); !st.ok())
      return within(spec.origin + ": " + v.name() + " cannot be built for " + arch.name(), st.error());
    // One job per compiled kernel: tilings that differ only in plan-only knobs share it.
    if (seen.insert(arch.name() + "/" + v.code_name()).second) jobs.push_back({v, arch, pass});
    return {};
  };
  for (const Arch& arch : archs) {
    for (const VariantSpec& spec : specs) {
      for (Pass pass : spec.passes) {
        const Semantics semantics = pass == Pass::backward ? backward_semantics(spec.semantics) : forward_semantics(spec.semantics);
        const std::string where = spec.origin + ": " + semantics.name() + (pass == Pass::backward ? " backward" : "") +
                                  " on " + arch.name();
        auto families = spec_families(spec, semantics, pass, arch, where);
        if (!families.ok()) return std::move(families).error();
        for (const std::string& family : families.value()) {
          KernelVariant v{family, semantics, {}};
          if (!spec.tiling.empty()) {
            auto t = parse_tiling(family, spec.tiling);
            if (!t.ok()) return within(where, t.error());
            v.tiling = t.value();
            FJ_TRY(add(v, arch, pass, spec));
          } else {
            auto defaults = default_tilings(family, arch, semantics);  // one per shape class
            if (!defaults.ok()) return within(spec.origin, defaults.error());
            for (const Tiling& t : defaults.value()) {
              v.tiling = t;
              FJ_TRY(add(v, arch, pass, spec));
            }
          }
          if (!all_tilings) continue;
          auto candidates = candidate_tilings(family, arch, semantics);
          if (!candidates.ok()) return within(spec.origin, candidates.error());
          for (const Tiling& t : candidates.value()) {
            KernelVariant c = v;
            c.tiling = t;
            FJ_TRY(add(c, arch, pass, spec));
          }
        }
      }
    }
  }
  return jobs;
}

}  // namespace flashjit::tools
