// The launches every backward family makes for one call, and the workspace they share: three
// kernels of one module on one stream —
//   preprocess: a CTA per (block_m query rows, q-head, batch): D = rowsum(dO * O), each row's LSE
//               as P's exponent takes it, the dQ accumulator zeroed;
//   main:       a CTA per (block_n keys, KV head, batch): dK, dV written, dQ added;
//   convert:    a CTA per (block_m query rows, q-head, batch): the dQ accumulator to dq.
// The families differ in their main kernel only (bwd_sm90 runs bwd_sm80's preprocess and convert).
#pragma once

#include "kernel_family.hpp"

namespace flashjit {

// What a family's tiling decides about the three launches.
struct BackwardLaunchShape {
  int block_m = 0, block_n = 0;
  unsigned aux_threads = 0;   // preprocess and convert
  unsigned main_threads = 0;
  int main_smem = 0, convert_smem = 0;
};

Status plan_backward_launches(const AttentionProblem& p, const KernelVariant& v, WorkspaceSource& workspace,
                              const BackwardLaunchShape& shape, LaunchPlan& out);

}  // namespace flashjit
