// Shared by the C ABI fuzz targets (fuzz_c_abi: flashjit_precompile, fuzz_c_abi_v2:
// flashjit_precompile_v2, fuzz_c_abi_backward: the backward's three calls). No GPU is involved,
// and NVRTC is made unloadable on purpose (FLASHJIT_NVRTC_PATH names a missing file):
// validation and planning run in full, then the compile step fails at once with
// FLASHJIT_LIBRARY_MISSING, so each input costs microseconds. The CUDA driver likewise, for the
// targets that call what launches (FLASHJIT_LIBCUDA_PATH), so that a machine with a GPU never
// runs a kernel on the inputs' made-up pointers.
//
// Besides the sanitizers, each target checks that the status is one validation can give, that
// the message is safe to print, and that whatever validation accepts passes an independent
// 128-bit recomputation of every range the kernel would touch (none wraps past 2^64, what it
// writes overlaps nothing else).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "flashjit/flashjit.h"
#include "fuzz_support.hpp"

namespace flashjit::fuzz {

using u128 = unsigned __int128;
inline constexpr u128 kAddressSpace = u128(1) << 64;

// Called by c_engine() before it makes the engine: see the top of the file. The disk cache stays
// out of the way.
inline void make_compiles_fail_fast() {
  ::setenv("FLASHJIT_NVRTC_PATH", "/nonexistent/flashjit-fuzz/libnvrtc.so", 1);
  ::setenv("FLASHJIT_DISK_CACHE", "0", 1);
}

// Called from LLVMFuzzerInitialize, before c_engine(), by targets that call launching entry
// points: their calls then fail with FLASHJIT_LIBRARY_MISSING where they would first need the device.
inline void make_launches_fail_fast() { ::setenv("FLASHJIT_LIBCUDA_PATH", "/nonexistent/flashjit-fuzz/libcuda.so", 1); }

// The engine every call of a target goes to, made on the first call (each target's
// LLVMFuzzerInitialize) once compiles are made to fail fast.
inline flashjit_engine* c_engine() {
  static flashjit_engine* e = [] {
    make_compiles_fail_fast();
    flashjit_engine* made = nullptr;
    if (flashjit_engine_create(&made) != FLASHJIT_OK) fail("engine_create", flashjit_last_error());
    return made;
  }();
  return e;
}

// The arch string that follows a target's structs: up to a NUL, "sm_80" when empty. `used` moves
// past it (and its NUL).
inline std::string arch_from(const std::uint8_t* data, std::size_t size, std::size_t& used) {
  std::string arch(reinterpret_cast<const char*>(data) + used, size - used);
  arch = arch.substr(0, arch.find('\0'));
  used += std::min(size - used, arch.size() + 1);
  return arch.empty() ? "sm_80" : arch;
}

// Whether validation accepted the call that returned `st` (precompile got as far as the
// compiler; a launching call as far as the device, whose library `missing` names); fails on a
// status validation never gives or a message with raw bytes.
inline bool accepted(flashjit_status st, const char* missing = "FLASHJIT_NVRTC_PATH") {
  const std::string message = flashjit_last_error();
  check_printable(message, "the call's message has raw bytes");
  switch (st) {
    case FLASHJIT_INVALID_ARGUMENT:
    case FLASHJIT_UNSUPPORTED:
      return false;
    case FLASHJIT_LIBRARY_MISSING:  // validation and planning passed; the compile could not start
      check(message.find(missing) != std::string::npos, "unexpected library error", message);
      return true;
    default:
      fail("the call returned a status validation never gives", message);
  }
}

struct Range {
  u128 lo = 0, hi = 0;  // empty when equal
};

// [data, data + (last element offset + 1) * elem), computed without any chance of overflow.
// Shapes and strides must be >= 0 (checked first).
inline Range range_of(const void* data, const std::int64_t* shape, const std::int64_t* stride, int rank, unsigned elem,
                      const char* what) {
  u128 last = 0;
  for (int i = 0; i < rank; ++i) {
    check(shape[i] >= 0 && stride[i] >= 0, "accepted a negative shape or stride", what);
    if (shape[i] == 0) return {};
  }
  for (int i = 0; i < rank; ++i) last += u128(std::uint64_t(shape[i] - 1)) * u128(std::uint64_t(stride[i]));
  const u128 lo = reinterpret_cast<std::uintptr_t>(data);
  // Past 2^100 no memory is that large; capping keeps the sums below from wrapping.
  const Range r{lo, last >> 100 ? kAddressSpace + 1 : lo + (last + 1) * elem};
  check(r.hi <= kAddressSpace, "accepted a range that wraps past 2^64", what);
  return r;
}

// A small array of `rows` rows of `count` elements, `row_stride` apart.
inline Range array_range(const void* data, std::int64_t rows, std::int64_t count, std::int64_t row_stride,
                         unsigned elem, const char* what) {
  const std::int64_t shape[2] = {rows, count}, stride[2] = {row_stride, 1};
  return range_of(data, shape, stride, 2, elem, what);
}

inline bool overlap(const Range& a, const Range& b) { return a.lo != a.hi && b.lo != b.hi && a.lo < b.hi && b.lo < a.hi; }

// The tensors of an accepted call: what validation promised about q, k, v, o and lse (null:
// none). Returns o's and lse's ranges, which nothing the kernel reads may overlap either.
struct Outputs {
  Range o, lse;
};
inline Outputs check_accepted_tensors(const flashjit_tensor* const (&t)[4], const flashjit_lse* lse) {
  const unsigned elem = t[0]->dtype == FLASHJIT_F32 ? 4 : 2;
  const char* names[4] = {"q", "k", "v", "o"};
  Range r[4];
  for (int i = 0; i < 4; ++i) r[i] = range_of(t[i]->data, t[i]->shape, t[i]->stride, 4, elem, names[i]);
  Outputs out{r[3], {}};
  if (lse) out.lse = range_of(lse->data, lse->shape, lse->stride, 3, 4, "lse");
  for (int in = 0; in < 3; ++in) check(!overlap(out.o, r[in]), "accepted o overlapping an input");
  for (int other = 0; other < 4; ++other) check(!overlap(out.lse, r[other]), "accepted lse overlapping a tensor");
  return out;
}

}  // namespace flashjit::fuzz
