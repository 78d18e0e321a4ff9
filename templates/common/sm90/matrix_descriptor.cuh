// The shared-memory matrix descriptor wgmma reads its operands through (sm_90a): plain C++, so the
// CPU emulation (tests/templates/emu/) uses this header as it is.
#pragma once

#include "common/ptx.cuh"

namespace fj::sm90 {

// How rows of a tile are permuted across 16-byte chunks in shared memory; TMA writes and wgmma
// reads must agree. Values as the descriptor's bits 62-63 encode them.
enum class Swizzle : int { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// The 64-bit descriptor of a matrix in shared memory: its start, the byte offsets between
// core-matrix groups along the leading and the strided dimension, and the swizzle. Bits: 0-13
// start >> 4; 16-29 leading offset >> 4; 32-45 stride offset >> 4; 62-63 swizzle. The start
// must sit at its swizzle pattern's alignment (1024 bytes for b128), so the base offset stays 0.
FJ_DEVICE unsigned long long matrix_descriptor(const void* smem, unsigned leading_bytes, unsigned stride_bytes,
                                               Swizzle swizzle) {
  const unsigned long long start = (smem_addr(smem) & 0x3FFFFu) >> 4;
  return start | (static_cast<unsigned long long>((leading_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<unsigned long long>((stride_bytes >> 4) & 0x3FFFu) << 32) |
         (static_cast<unsigned long long>(static_cast<int>(swizzle)) << 62);
}

}  // namespace fj::sm90
