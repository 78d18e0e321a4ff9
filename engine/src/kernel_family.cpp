#include "kernel_family.hpp"

#include <sstream>

namespace flashjit {

const KernelFamily& fa2_sm80_family();

int arch_smem_limit(const Arch& arch) {
  // Opt-in dynamic shared memory per block, from the CUDA programming guide's tables.
  switch (arch.number()) {
    case 80: case 87: return 163 * 1024;
    case 86: case 89: return 99 * 1024;
    case 90: return 227 * 1024;
    default: return arch.number() >= 100 ? 227 * 1024 : 48 * 1024;
  }
}

const std::vector<const KernelFamily*>& kernel_families() {
  static const std::vector<const KernelFamily*> families{&fa2_sm80_family()};
  return families;
}

const KernelFamily* find_family(std::string_view name) {
  for (const auto* f : kernel_families())
    if (name == f->name()) return f;
  return nullptr;
}

Result<const KernelFamily*> choose_family(const Arch& arch, const Semantics& s) {
  for (const auto* f : kernel_families())
    if (f->supports(arch, s)) return f;
  return Error(Code::unsupported, "no kernel family supports " + s.name() + " on " + arch.name() +
                                      " (flashjit needs sm_80 or newer)");
}

std::string render_source(const KernelFamily& family, const KernelVariant& v) {
  const Semantics& s = v.semantics;
  const Tiling& t = v.tiling;
  auto b = [](bool x) { return x ? "true" : "false"; };
  std::ostringstream o;
  o << "// flashjit kernel " << v.name() << "\n"
    << "namespace fj { namespace cfg {\n"
    << "// Semantics: change results.\n"
    << "constexpr int kDtype = " << static_cast<int>(s.dtype) << ";  // " << dtype_name(s.dtype) << "\n"
    << "constexpr bool kTf32 = " << b(s.fp32_math == Fp32Math::tf32) << ";\n"
    << "constexpr int kHeadDimQK = " << s.head_dim_qk << ";\n"
    << "constexpr int kHeadDimV = " << s.head_dim_v << ";\n"
    << "constexpr bool kCausal = " << b(s.mask == Mask::causal) << ";\n"
    << "constexpr bool kGqa = " << b(s.gqa) << ";\n"
    << "constexpr bool kWriteLse = " << b(s.write_lse) << ";\n"
    << "constexpr int kVec = " << s.vec << ";\n"
    << "// Tiling: changes speed only.\n"
    << "constexpr int kBlockM = " << t.block_m << ";\n"
    << "constexpr int kBlockN = " << t.block_n << ";\n"
    << "constexpr int kWarps = " << t.warps << ";\n"
    << "constexpr int kStages = " << t.stages << ";\n"
    << "} }  // namespace fj::cfg\n"
    << "#include \"" << family.entry_template() << "\"\n";
  return o.str();
}

Status check_variant(const KernelVariant& v, const Arch& arch) {
  const KernelFamily* f = find_family(v.family);
  if (!f) return Error(Code::invalid_argument, "unknown kernel family '" + v.family + "'");
  FJ_TRY(v.semantics.check());
  if (!f->supports(arch, v.semantics))
    return Error(Code::unsupported, std::string(f->name()) + " does not support " + v.semantics.name() + " on " + arch.name());
  FJ_TRY(f->check_tiling(v.semantics, v.tiling));
  const int smem = f->smem_bytes(v.semantics, v.tiling);
  if (smem > arch_smem_limit(arch))
    return Error(Code::invalid_argument, "tiling " + v.tiling.name() + " needs " + std::to_string(smem) +
                                             " bytes of shared memory; " + arch.name() + " allows " +
                                             std::to_string(arch_smem_limit(arch)));
  return {};
}

}  // namespace flashjit
