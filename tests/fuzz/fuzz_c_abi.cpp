// The C ABI's validation, as a foreign caller reaches it: flashjit_precompile with an arbitrary
// args struct and arch string. No GPU is involved, and NVRTC is made unloadable on purpose
// (FLASHJIT_NVRTC_PATH names a missing file): validation and planning run in full, then the
// compile step fails at once with FLASHJIT_LIBRARY_MISSING, so each input costs microseconds.
//
// Input: the bytes of a flashjit_attention_args (zero-filled when short); the lowest bit of its
// `lse` field says whether a flashjit_lse follows (its bytes next); what remains is the arch
// string (up to a NUL; "sm_80" when empty). tests/fuzz/make_corpus.py writes the seeds.
//
// Checks besides the sanitizers: the status is one validation can give; the message is safe to
// print; and whatever validation accepts passes an independent 128-bit recomputation of every
// tensor's byte range (no range wraps past 2^64, o and lse overlap no input and each other).
#include <cstdlib>
#include <cstring>
#include <string>

#include "flashjit/flashjit.h"
#include "fuzz_support.hpp"

namespace {

using u128 = unsigned __int128;
constexpr u128 kAddressSpace = u128(1) << 64;

flashjit_engine* engine() {
  static flashjit_engine* e = [] {
    flashjit_engine* made = nullptr;
    if (flashjit_engine_create(&made) != FLASHJIT_OK) flashjit::fuzz::fail("engine_create", flashjit_last_error());
    return made;
  }();
  return e;
}

struct Range {
  u128 lo = 0, hi = 0;  // empty when equal
};

// [data, data + (last element offset + 1) * elem), computed without any chance of overflow.
Range range_of(const void* data, const int64_t* shape, const int64_t* stride, int rank, unsigned elem) {
  u128 last = 0;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 0) return {};
    last += u128(uint64_t(shape[i] - 1)) * u128(uint64_t(stride[i]));
  }
  const u128 lo = reinterpret_cast<uintptr_t>(data);
  if (last >> 100) return {lo, kAddressSpace + 1};  // no memory is that large; keeps the sums below from wrapping
  return {lo, lo + (last + 1) * elem};
}

bool overlap(const Range& a, const Range& b) { return a.lo != a.hi && b.lo != b.hi && a.lo < b.hi && b.lo < a.hi; }

// Validation accepted `a` (precompile got as far as the compiler): re-derive what it promised.
void check_accepted(const flashjit_attention_args& a) {
  const unsigned elem = a.q.dtype == FLASHJIT_F32 ? 4 : 2;
  const flashjit_tensor* t[4] = {&a.q, &a.k, &a.v, &a.o};
  Range r[5];
  for (int i = 0; i < 4; ++i) {
    for (int d = 0; d < 4; ++d)
      flashjit::fuzz::check(t[i]->shape[d] >= 0 && t[i]->stride[d] >= 0, "accepted a negative shape or stride");
    r[i] = range_of(t[i]->data, t[i]->shape, t[i]->stride, 4, elem);
  }
  if (a.lse) {
    for (int d = 0; d < 3; ++d)
      flashjit::fuzz::check(a.lse->shape[d] >= 0 && a.lse->stride[d] >= 0, "accepted a negative lse shape or stride");
    r[4] = range_of(a.lse->data, a.lse->shape, a.lse->stride, 3, 4);
  }
  for (const Range& x : r) flashjit::fuzz::check(x.hi <= kAddressSpace, "accepted a range that wraps past 2^64");
  for (int in = 0; in < 3; ++in) flashjit::fuzz::check(!overlap(r[3], r[in]), "accepted o overlapping an input");
  for (int other = 0; other < 4; ++other) flashjit::fuzz::check(!overlap(r[4], r[other]), "accepted lse overlapping a tensor");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Deliberately unloadable: see the top of the file. The disk cache stays out of the way.
  ::setenv("FLASHJIT_NVRTC_PATH", "/nonexistent/flashjit-fuzz/libnvrtc.so", 1);
  ::setenv("FLASHJIT_DISK_CACHE", "0", 1);
  engine();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flashjit_attention_args args;
  std::memset(&args, 0, sizeof args);
  size_t used = size < sizeof args ? size : sizeof args;
  std::memcpy(&args, data, used);
  flashjit_lse lse;
  std::memset(&lse, 0, sizeof lse);
  const bool has_lse = reinterpret_cast<uintptr_t>(args.lse) & 1;
  args.lse = nullptr;
  if (has_lse) {
    const size_t n = size - used < sizeof lse ? size - used : sizeof lse;
    std::memcpy(&lse, data + used, n);
    used += n;
    args.lse = &lse;
  }
  std::string arch(reinterpret_cast<const char*>(data) + used, size - used);
  arch = arch.substr(0, arch.find('\0'));
  if (arch.empty()) arch = "sm_80";

  char name[128];
  const flashjit_status st = flashjit_precompile(engine(), &args, arch.c_str(), name, sizeof name);
  const std::string message = flashjit_last_error();
  flashjit::fuzz::check_printable(message, "precompile's message has raw bytes");
  switch (st) {
    case FLASHJIT_INVALID_ARGUMENT:
    case FLASHJIT_UNSUPPORTED:
      break;
    case FLASHJIT_LIBRARY_MISSING:  // validation and planning passed; the compile could not start
      flashjit::fuzz::check(message.find("FLASHJIT_NVRTC_PATH") != std::string::npos, "unexpected library error", message);
      check_accepted(args);
      break;
    default:
      flashjit::fuzz::fail("precompile returned a status validation never gives", message);
  }
  return 0;
}
