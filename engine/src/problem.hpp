// Validation of user arguments into a problem the kernel families can plan: every rule is
// checked on the host before anything touches device memory, and each error names the argument
// and the rule. A family turns the result into its own kernel params (attention_params.hpp).
#pragma once

#include <cstddef>
#include <initializer_list>

#include "base/problem_shape.hpp"
#include "flashjit/flashjit.hpp"

namespace flashjit {

struct AttentionProblem {
  const AttentionArgs* args = nullptr;  // the caller's views, all checked
  const BackwardArgs* backward = nullptr;  // a backward call's gradients (args is its forward), checked
  // varlen: batch = sequences, seqlen_q / seqlen_k = the max lengths. Within problem_shape.hpp's
  // bounds (batch, heads <= 65535, lengths <= 2^30), which families' size arithmetic relies on.
  ProblemShape shape;
  Semantics semantics;  // everything but the tiling
  float scale = 0;      // the softmax scale, default resolved
  // Effective window (semantics.window), clamped to the lengths so that row + offset + right
  // never overflows int32 in a kernel; causal makes right 0.
  int window_left = 0, window_right = 0;
  // The per-call scalars' validated values (flashjit/scalars.h), each 0 where its semantic is off.
#define FJ_PROBLEM_SCALAR(type, field, rule, constant, tag, typical, backward, params, why) type field = 0;
  FLASHJIT_SCALAR_ROWS(FJ_PROBLEM_SCALAR)
#undef FJ_PROBLEM_SCALAR
  bool empty = false;   // zero-size: valid, nothing to launch

  // The caller's workspace for this call (null data: the engine's pool).
  const AttentionArgs::Workspace& workspace() const { return backward ? backward->workspace : args->workspace; }
};

Result<AttentionProblem> validate_problem(const AttentionArgs& args);

// The widest access (elements, up to 16 bytes) that every view's pointer, strides and head dim
// allow; 1 when a view's head dim is strided. Semantics::vec for the views a kernel touches.
int widest_vec(std::initializer_list<const TensorView*> views, std::size_t elem_bytes);

}  // namespace flashjit
