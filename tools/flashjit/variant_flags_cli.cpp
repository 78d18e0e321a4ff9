#include "variant_flags_cli.hpp"

#include <type_traits>

#include "common/command_line.hpp"

namespace flashjit::tools {

void add_variant_flags(CLI::App* g, VariantFlags& flags) {
  g->add_option("--dtype", flags.dtypes, "f16, bf16, f32 or tf32; comma list allowed (default f16)")
      ->delimiter(',')
      ->type_name("DTYPE");
  g->add_option("--head-dim", flags.head_dims, "Head dim of Q and K (1..256); comma list allowed")
      ->delimiter(',')
      ->type_name("D")
      ->check(in_range(1, kMaxHeadDim));
  g->add_option("--head-dim-v", flags.head_dim_v, "Head dim of V and O (default: --head-dim)")
      ->type_name("D")
      ->check(in_range(1, kMaxHeadDim));
  g->add_option("--mask", flags.masks, "none or causal; comma list allowed (default none)")
      ->delimiter(',')
      ->type_name("MASK");
  Semantics{}.visit([&](const SemanticsField& f, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
      const std::string name = f.name;
      add_switch(g, bool_field_flag(f), [&flags, name](bool on) { flags.features[name] = on; }, f.why);
    }
  });
  g->add_option("--family", flags.family, "Kernel family (default: every family that serves the variant)")
      ->type_name("NAME");
  g->add_option("--tiling", flags.tiling, "Fixed tiling such as m128n64w4s2 (default: each family's defaults, one per shape class where they differ)")
      ->type_name("TILING");
  g->add_option("--vec", flags.vec, "Elements per global access: 1, 2, 4 or 8 (default: the widest the dims allow)")
      ->type_name("N")
      ->check(in_range(1, kMaxVec));
}

}  // namespace flashjit::tools
