// Fills the params every forward family reads (templates/common/attention_params.cuh) from a
// validated problem; a family wraps or extends them with its own.
#pragma once

#include "problem.hpp"
#include "templates/common/attention_params.cuh"

namespace flashjit {

FjAttentionParams attention_params(const AttentionProblem& problem);

}  // namespace flashjit
