#include "kernel_family.hpp"

#include <algorithm>

namespace flashjit {

namespace {
constexpr const char* kNoTilingFits = "no tiling fits the shared memory one block may use on this arch";
}  // namespace

const KernelFamily& fa2_sm80_family();
const KernelFamily& decode_sm80_family();
const KernelFamily& fa3_sm90_family();
const KernelFamily& bwd_sm80_family();
const KernelFamily& bwd_sm90_family();

int arch_smem_limit(const Arch& arch) {
  // Opt-in dynamic shared memory per block, from the CUDA programming guide's tables.
  switch (arch.number()) {
    case 80: case 87: return 163 * 1024;
    case 86: case 89: return 99 * 1024;
    case 90: return 227 * 1024;
    default: return arch.number() >= 100 ? 227 * 1024 : 48 * 1024;
  }
}

const char* smem_refusal(const KernelFamily& family, const Arch& arch, const Semantics& s) {
  return family.min_smem_bytes(s) > arch_smem_limit(arch) ? kNoTilingFits : nullptr;
}

std::string explain_refusal(const KernelFamily& family, const Arch& arch, const Semantics& s, const char* why_not) {
  std::string out = why_not;
  if (why_not == kNoTilingFits)
    out += ": " + std::string(dtype_name(s.dtype)) + " with head dims " + std::to_string(s.head_dim_qk) + " (q, k) and " +
           std::to_string(s.head_dim_v) + " (v) needs at least " + std::to_string(family.min_smem_bytes(s)) +
           " bytes (its smallest tiling); " + arch.name() + " allows " + std::to_string(arch_smem_limit(arch));
  return out;
}

namespace {
std::vector<const KernelFamily*> by_priority(std::vector<const KernelFamily*> f) {
  std::stable_sort(f.begin(), f.end(), [](auto* a, auto* b) { return a->priority() < b->priority(); });
  return f;
}
}  // namespace

const std::vector<const KernelFamily*>& kernel_families(Pass pass) {
  static const std::vector<const KernelFamily*> forward =
      by_priority({&fa2_sm80_family(), &decode_sm80_family(), &fa3_sm90_family()});
  static const std::vector<const KernelFamily*> backward = by_priority({&bwd_sm80_family(), &bwd_sm90_family()});
  return pass == Pass::forward ? forward : backward;
}

const KernelFamily* find_family(std::string_view name) {
  for (Pass pass : {Pass::forward, Pass::backward})
    for (const auto* f : kernel_families(pass))
      if (name == f->name()) return f;
  return nullptr;
}

const KnobTable* family_knobs(std::string_view family) {
  const KernelFamily* f = find_family(family);
  return f ? &f->knobs() : nullptr;
}

const KernelFamily* pick_family(const Arch& arch, const Semantics& s, const ProblemShape* shape, Pass pass) {
  for (const auto* f : kernel_families(pass))
    if (!f->refusal(arch, s, shape)) return f;
  return nullptr;
}

Result<FamilyChoice> choose_family(const Arch& arch, const Semantics& s, const ProblemShape* shape, Pass pass) {
  std::string refused;
  for (const auto* f : kernel_families(pass)) {
    const char* why_not = f->refusal(arch, s, shape);
    if (!why_not) {
      std::string why = std::string(f->name()) + " (priority " + std::to_string(f->priority()) + ") serves " +
                        s.name() + " on " + arch.name();
      if (!refused.empty()) why += "; before it, " + refused;
      return FamilyChoice{f, why};
    }
    refused += (refused.empty() ? "" : "; ") + std::string(f->name()) + " refused: " + explain_refusal(*f, arch, s, why_not);
  }
  return Error(Code::unsupported, std::string("no ") + (pass == Pass::backward ? "backward " : "") + "kernel family serves " +
                                      s.name() + " on " + arch.name() + ": " + refused);
}

std::vector<const KernelFamily*> families_for(const Arch& arch, const Semantics& s, Pass pass) {
  std::vector<const KernelFamily*> out;
  for (const auto* f : kernel_families(pass))
    if (!f->refusal(arch, s, nullptr)) {
      out.push_back(f);
      if (f->serves_every_shape()) break;  // the families after it never run these calls
    }
  return out;
}

int variant_smem_bytes(const KernelVariant& v) {
  const KernelFamily* f = find_family(v.family);
  int smem = 0;
  if (f)
    for (const EntryPoint& e : f->entry_points(v)) smem = std::max(smem, e.smem_bytes);
  return smem;
}

Status check_variant(const KernelVariant& v, const Arch& arch) {
  const KernelFamily* f = find_family(v.family);
  if (!f) return Error(Code::invalid_argument, "unknown kernel family '" + v.family + "'");
  FJ_TRY(v.semantics.check());
  if (const char* why_not = f->refusal(arch, v.semantics, nullptr))
    return Error(Code::unsupported, std::string(f->name()) + " cannot build " + v.semantics.name() + " for " +
                                        arch.name() + ": " + explain_refusal(*f, arch, v.semantics, why_not));
  if (v.tiling.table != &f->knobs())
    return Error(Code::invalid_argument, "tiling " + v.tiling.name() + " is not a " + f->name() + " tiling");
  FJ_TRY(f->check_tiling(v.semantics, v.tiling));
  const int smem = variant_smem_bytes(v);
  if (smem > arch_smem_limit(arch))
    return Error(Code::invalid_argument, "tiling " + v.tiling.name() + " needs " + std::to_string(smem) +
                                             " bytes of shared memory; " + arch.name() + " allows " +
                                             std::to_string(arch_smem_limit(arch)));
  return {};
}

}  // namespace flashjit
