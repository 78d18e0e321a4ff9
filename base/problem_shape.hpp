// The sizes of one attention problem: what the engine, the kernel families and the autotuner's
// buckets all reason about, with no pointers or strides.
#pragma once

#include <cstdint>

namespace flashjit {

// Largest sizes the engine accepts; the tools check them up front too.
inline constexpr std::int64_t kMaxSeqLen = std::int64_t(1) << 30;  // keeps row indices and tile ends in int32
inline constexpr std::int64_t kMaxBatch = 65535;                   // CUDA's grid y/z limit: batch and heads
inline constexpr std::int64_t kMaxHeads = 65535;
// Keys per page of a paged cache: serving stacks use 16 to 256, FlashAttention's tests 512; the
// kernels index pages with int math, and larger pages are better served as a contiguous cache.
inline constexpr std::int64_t kMaxPageSize = 4096;
inline constexpr std::int64_t kMaxPages = (std::int64_t(1) << 31) - 1;  // page indices are int32 in kernels

struct ProblemShape {
  std::int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0;
  std::int64_t page_size = 0;  // keys per page of a paged cache; 0 when K and V are not paged
};

}  // namespace flashjit
