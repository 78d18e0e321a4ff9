// Validation of user arguments into a launchable problem: every rule is checked on the host
// before anything touches device memory, and each error names the argument and the rule.
#pragma once

#include "flashjit/flashjit.hpp"
#include "kernel_family.hpp"
#include "templates/common/params.cuh"

namespace flashjit {

struct ValidatedProblem {
  ProblemShape shape;
  Semantics semantics;  // everything but tiling
  FjFwdParams params;
  bool empty = false;   // zero-size: valid, nothing to launch
};

Result<ValidatedProblem> validate_problem(const AttentionArgs& args);

}  // namespace flashjit
