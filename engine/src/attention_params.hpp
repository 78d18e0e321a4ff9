// Fills the params every forward family reads (templates/common/attention_params.cuh) from a
// validated problem; a family wraps or extends them with its own.
#pragma once

#include "problem.hpp"
#include "templates/common/attention_params.cuh"

namespace flashjit {

// Fills `p`, which the caller has zeroed (KernelParams::emplace).
void fill_attention_params(const AttentionProblem& problem, FjAttentionParams& p);

}  // namespace flashjit
