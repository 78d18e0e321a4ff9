// A kernel family is one template (and its tile rules) that implements attention for some
// archs and semantics: fa2_sm80 today; Hopper (wgmma/TMA), decode and paged-KV families plug in
// here. The engine asks the registry, in priority order, which family serves a request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/problem_shape.hpp"
#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

struct LaunchGrid {
  unsigned x = 1, y = 1, z = 1;
  unsigned threads = 0;
  unsigned smem_bytes = 0;
};

// Shared memory one block may use on an arch (opt-in maximum), used to prune tilings without a
// GPU; at run time the device's own attribute is used instead.
int arch_smem_limit(const Arch& arch);

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual const char* name() const = 0;
  virtual const char* entry_template() const = 0;  // path under templates/
  virtual bool supports(const Arch& arch, const Semantics& s) const = 0;
  // Structural rules of a tiling (divisibility, ranges); resource limits are checked apart.
  virtual Status check_tiling(const Semantics& s, const Tiling& t) const = 0;
  virtual int smem_bytes(const Semantics& s, const Tiling& t) const = 0;
  virtual Tiling default_tiling(const Arch& arch, const Semantics& s) const = 0;
  // Every tiling worth timing on this arch (structurally valid and fitting shared memory).
  virtual std::vector<Tiling> candidate_tilings(const Arch& arch, const Semantics& s) const = 0;
  virtual LaunchGrid grid(const ProblemShape& p, const Semantics& s, const Tiling& t) const = 0;
};

const std::vector<const KernelFamily*>& kernel_families();
const KernelFamily* find_family(std::string_view name);
Result<const KernelFamily*> choose_family(const Arch& arch, const Semantics& s);

// Full rendered source: a prelude of compile-time constants from the variant, then the
// family's entry template.
std::string render_source(const KernelFamily& family, const KernelVariant& v);

// Checks a whole variant can be built for an arch (family known and willing, tiling valid, fits).
Status check_variant(const KernelVariant& v, const Arch& arch);

}  // namespace flashjit
