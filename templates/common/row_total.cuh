// The end of a softmax row, for every forward family: the factor its output is multiplied by,
// its LSE with the attention sinks in the denominator, and where that LSE is stored.
#pragma once

#include "common/attention_params.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"

namespace fj {

constexpr float kLog2e = 1.44269504089f;  // scores and sinks go to log2 units (exp2 is one instruction)
constexpr float kLn2 = 0.69314718056f;    // and the LSE comes back in natural log, as FA reports it

// The end of one row: the factor its output is multiplied by (1 / the softmax denominator; 0 for
// a row whose denominator is empty) and its natural-log LSE (-inf when empty). `sum` is the
// row's whole sum of exp2 relative to `row_max` (raw score units; -inf for a row that saw no key).
// With sinks, exp(sink) joins the denominator: the output shrinks by the sink's share and the
// LSE includes it.
struct RowTotal {
  float inv, lse;
};
template <bool kHasSinks>
FJ_DEVICE RowTotal row_total(float sum, float row_max, float score_scale, float sink_log2) {
  const float shift = row_max == neg_inf() ? neg_inf() : row_max * score_scale;
  RowTotal r;
  if constexpr (kHasSinks) {
    // Against the larger of the row's max and the sink: neither term overflows.
    const float top = fmaxf(shift, sink_log2);
    const float a = exp2_approx(shift - top);  // 0 for a row that saw no key
    const float total = top == neg_inf() ? 0.f : sum * a + exp2_approx(sink_log2 - top);
    r.inv = total > 0.f ? a * rcp_approx(total) : 0.f;  // total >= 1: one of its terms is exp2(0)
    r.lse = total > 0.f ? (top + log2f(total)) * kLn2 : neg_inf();
  } else {
    // rows that saw no key give zeros; sum >= 1 otherwise (the max's own term), so the approximate
    // reciprocal (1 ulp, no IEEE slow path per row) is exact enough for every output type.
    r.inv = sum > 0.f ? rcp_approx(sum) : 0.f;
    r.lse = sum > 0.f ? (shift + log2f(sum)) * kLn2 : neg_inf();  // -inf: the log of an empty sum
  }
  return r;
}

// A head's sink logit in log2 units (0 without sinks: row_total ignores it then).
FJ_DEVICE float sink_log2_of(const float* sinks, int head, bool has_sinks) {
  return has_sinks ? sinks[head] * kLog2e : 0.f;
}

// The LSE of `row` (a row of sequence `seq`, in its own numbering) of query head `head`.
FJ_DEVICE void store_lse(const FjAttentionParams& p, const Sequence& seq, int head, int row, float lse) {
  p.lse[seq.batch * p.lse_stride[0] + head * p.lse_stride[1] + (seq.q_start + row) * p.lse_stride[2]] = lse;
}

}  // namespace fj
