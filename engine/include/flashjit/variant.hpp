// A kernel variant is two values kept apart:
//   Semantics: what changes results (dtype, head dims, mask, GQA, LSE output, fp32 math) plus the
//              access width the problem's alignment dictates; the autotuner never varies it.
//   Tiling:    what only changes speed (BLOCK_M, BLOCK_N, warps, stages); the autotuner's space.
// The same values name the kernel, render its compile-time constants and key every cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

enum class DType : int { f16 = 0, bf16 = 1, f32 = 2 };
enum class Mask : int { none = 0, causal = 1 };
enum class Fp32Math : int { exact = 0, tf32 = 1 };

const char* dtype_name(DType);
std::size_t dtype_size(DType);
const char* mask_name(Mask);

// Largest head dim a variant may have (two 128-wide halves of shared memory on sm_80).
constexpr int kMaxHeadDim = 256;

struct Semantics {
  DType dtype = DType::f16;             // Q, K, V and O share it; accumulation is fp32
  Fp32Math fp32_math = Fp32Math::exact; // fp32 inputs only: exact (3xTF32) or tf32
  int head_dim_qk = 128;
  int head_dim_v = 128;
  Mask mask = Mask::none;
  bool gqa = false;        // Hq != Hkv: query heads share key/value heads
  bool write_lse = false;  // also write the fp32 natural-log log-sum-exp per row
  int vec = 8;             // elements per global access (1, 2, 4, 8); 1 also allows a strided head dim

  bool operator==(const Semantics& o) const;
  bool operator!=(const Semantics& o) const { return !(*this == o); }
  std::string name() const;  // readable, e.g. "f16-d128-causal-lse-v8"
  Status check() const;      // ranges and combinations a kernel can be built for
};

struct Tiling {
  int block_m = 128;
  int block_n = 64;
  int warps = 4;
  int stages = 2;

  bool operator==(const Tiling& o) const;
  bool operator!=(const Tiling& o) const { return !(*this == o); }
  std::string name() const;  // "m128n64w4s2"
};

struct KernelVariant {
  std::string family;  // kernel family, e.g. "fa2_sm80"
  Semantics semantics;
  Tiling tiling;

  bool operator==(const KernelVariant& o) const;
  bool operator!=(const KernelVariant& o) const { return !(*this == o); }
  std::string name() const;          // family-semantics-tiling, safe as a file name
  std::string content_hash() const;  // 32 hex digits over every field
  std::size_t fast_hash() const;     // for in-memory maps on the dispatch path
};

// Parses "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a" (and newer "sm_NNN[a|f]").
struct Arch {
  int major = 0;
  int minor = 0;
  char suffix = 0;  // 0, 'a' (arch-specific features such as wgmma) or 'f'

  static Result<Arch> parse(const std::string& text);
  std::string name() const;  // "sm_90a"
  int number() const { return major * 10 + minor; }
  bool operator==(const Arch& o) const { return major == o.major && minor == o.minor && suffix == o.suffix; }
};

}  // namespace flashjit
