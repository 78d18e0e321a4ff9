// The sizes of one attention problem: what the engine, the kernel families and the autotuner's
// buckets all reason about, with no pointers or strides.
#pragma once

#include <cstdint>

namespace flashjit {

struct ProblemShape {
  std::int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0;
};

}  // namespace flashjit
