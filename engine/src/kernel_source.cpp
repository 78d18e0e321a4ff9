#include "kernel_source.hpp"

#include <sstream>

namespace flashjit {
namespace {

// One constant per field, typed as the kernel reads it; enums as their number with the name.
void constant(std::ostream& o, const SemanticsField& f, bool v) {
  o << "constexpr bool " << f.constant << " = " << (v ? "true" : "false") << ";\n";
}
void constant(std::ostream& o, const SemanticsField& f, int v) { o << "constexpr int " << f.constant << " = " << v << ";\n"; }
void constant(std::ostream& o, const SemanticsField& f, DType v) {
  o << "constexpr int " << f.constant << " = " << int(v) << ";  // " << dtype_name(v) << "\n";
}
void constant(std::ostream& o, const SemanticsField& f, Mask v) {
  o << "constexpr int " << f.constant << " = " << int(v) << ";  // " << mask_name(v) << "\n";
}
void constant(std::ostream& o, const SemanticsField& f, Fp32Math v) {
  o << "constexpr int " << f.constant << " = " << int(v) << ";  // " << fp32_math_name(v) << "\n";
}

}  // namespace

std::string render_source(const KernelFamily& family, const KernelVariant& v) {
  std::ostringstream o;
  o << "// flashjit kernel " << v.name() << "\n"
    << "namespace fj { namespace cfg {\n"
    << "// Semantics: change results.\n";
  v.semantics.visit([&](const SemanticsField& f, const auto& value) { constant(o, f, value); });
  o << "// Tiling: changes speed only.\n";
  for (int i = 0; i < v.tiling.size(); ++i)
    if (const char* c = v.tiling.table->knobs[std::size_t(i)].constant)
      o << "constexpr int " << c << " = " << v.tiling[i] << ";\n";
  o << "} }  // namespace fj::cfg\n"
    << "#include \"" << family.entry_template() << "\"\n";
  return o.str();
}

}  // namespace flashjit
