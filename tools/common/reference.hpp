// The float64 CPU reference of one (sequence, query head): the definition of every semantic the
// kernels implement, written as plainly as possible. GPU tests and the demo compare against it.
//
//   s_ij  = scale * q_i . k_j                       (raw score)
//   s_ij  = cap * tanh(s_ij / cap)                  (softcap)
//   s_ij -= slope * |i + Sk - Sq - j|               (ALiBi)
//   key j is visible to query i when j <= i + Sk - Sq (causal),
//         and i + Sk - Sq - left <= j <= i + Sk - Sq + right (window; -1: that side unbounded)
//   out_i = sum_j exp(s_ij) v_j / (sum_j exp(s_ij) + exp(sink))   over visible j
//   lse_i = log(sum_j exp(s_ij) + exp(sink));  -inf (and out_i = 0) when nothing is in the sum
#pragma once

#include <cstdint>
#include <optional>

namespace flashjit::tools {

struct ReferenceHead {
  // Row-major operands of one sequence and head: q [len_q, dqk], k [len_k, dqk], v [len_k, dv],
  // with the given row strides in elements.
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t q_row = 0, k_row = 0, v_row = 0;
  std::int64_t len_q = 0, len_k = 0, dqk = 0, dv = 0;
  double scale = 1;
  bool causal = false;
  std::optional<std::int64_t> window_left, window_right;  // unset: unbounded
  std::optional<double> softcap;
  std::optional<double> alibi_slope;
  std::optional<double> sink;
};

// out [len_q, dv] row-major, lse [len_q].
void reference_head(const ReferenceHead& h, double* out, double* lse);

}  // namespace flashjit::tools
