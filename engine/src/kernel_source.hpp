// The source NVRTC compiles for a variant: a prelude of compile-time constants generated from
// the semantics field list and the family's knob table, then the family's entry template.
#pragma once

#include <string>

#include "kernel_family.hpp"

namespace flashjit {

std::string render_source(const KernelFamily& family, const KernelVariant& v);

}  // namespace flashjit
