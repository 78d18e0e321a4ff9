// Turns what warmup was asked for (variant specs x archs x passes, optionally x every candidate
// tiling) into the list of kernels to compile, checked in full before anything is compiled or
// written.
#pragma once

#include <string>
#include <vector>

#include "flashjit/flashjit.hpp"
#include "variant_spec.hpp"

namespace flashjit::tools {

struct WarmupJob {
  KernelVariant variant;
  Arch arch;
  Pass pass = Pass::forward;  // the pass of the variant's family
};

// Per arch, per spec, per pass the spec asks for: the engine's default variant (family and
// tiling), the spec's tiling when it names one, and with `all_tilings` every tiling the family's
// autotuner may pick as well. A backward variant has backward_semantics() of the spec's, as
// Engine::backward() names it, so it lands on the cache entry that call reads. Duplicates are
// dropped, order is kept. Every job passes check_buildable(); the first that does not, or a
// spec a pass it asks for cannot serve, is an error naming the spec's origin, the pass and the
// arch.
Result<std::vector<WarmupJob>> plan_warmup(const std::vector<VariantSpec>& specs,
                                           const std::vector<Arch>& archs, bool all_tilings);

}  // namespace flashjit::tools
