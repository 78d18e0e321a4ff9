// Validation of user arguments into a problem the kernel families can plan: every rule is
// checked on the host before anything touches device memory, and each error names the argument
// and the rule. A family turns the result into its own kernel params (attention_params.hpp).
#pragma once

#include "base/problem_shape.hpp"
#include "flashjit/flashjit.hpp"

namespace flashjit {

struct AttentionProblem {
  const AttentionArgs* args = nullptr;  // the caller's views, all checked
  // varlen: batch = sequences, seqlen_q / seqlen_k = the max lengths. Within problem_shape.hpp's
  // bounds (batch, heads <= 65535, lengths <= 2^30), which families' size arithmetic relies on.
  ProblemShape shape;
  Semantics semantics;  // everything but the tiling
  float scale = 0;      // the softmax scale, default resolved
  // Effective window (semantics.window), clamped to the lengths so that row + offset + right
  // never overflows int32 in a kernel; causal makes right 0.
  int window_left = 0, window_right = 0;
  float softcap = 0;    // semantics.softcap
  bool empty = false;   // zero-size: valid, nothing to launch
};

Result<AttentionProblem> validate_problem(const AttentionArgs& args);

}  // namespace flashjit
