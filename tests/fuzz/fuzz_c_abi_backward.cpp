// The backward's C ABI, as a foreign caller reaches it without a GPU: flashjit_precompile_backward_v1,
// flashjit_backward_workspace_size_v1 and flashjit_backward_v1 with an arbitrary
// flashjit_backward_args_v1 (sizes, strides, pointers, flags, dsinks, workspace; any struct_size and
// abi_version) and its forward's flashjit_attention_args_v2. NVRTC and the CUDA driver are made
// unloadable (c_abi_fuzz_support.hpp), so each call either refuses the arguments or passes
// validation and fails where it would first compile or touch the device; an empty problem
// succeeds at once. Checked besides the sanitizers:
//   - each status is one validation can give, and its message is printable;
//   - the workspace size and the backward agree (they validate alike), and precompile accepts
//     only what they accept;
//   - nothing is written: not the caller's structs, not bytes_out or name_out on a failure;
//   - what precompile accepts passes an independent 128-bit recomputation of every range the
//     kernels touch: the forward's rules (args_v2_fuzz.hpp), gradients shaped like their
//     tensors, and dq, dk, dv and dsinks overlapping nothing the kernels read or write.
//
// Input: the bytes of a flashjit_backward_args_v1 (zero-filled when short). The lowest bit of its
// `forward` pointer says whether the forward's struct follows, as args_v2_fuzz.hpp reads it; the
// other pointers (gradients, dsinks, workspace) are device addresses, never read, taken as
// given. Then the arch string for precompile (up to a NUL; "sm_80" when empty); what remains
// lands right after the backward's struct, where a newer caller's fields would be.
// tests/fuzz/make_corpus.py writes the seeds.
#include <algorithm>
#include <cstring>
#include <string>

#include "args_v2_fuzz.hpp"

using namespace flashjit::fuzz;

namespace {

constexpr std::uint32_t kBackwardAbi = 5;        // the ABI version that published the struct
constexpr std::uintptr_t kWorkspaceAlign = 256;  // kWorkspaceAlignment
constexpr std::uint64_t kUnwritten = 0x5eed5eed5eed5eedull;

struct BackwardInput {
  union {
    flashjit_backward_args_v1 args;
    unsigned char bytes[kMaxStructSize];
  };
  ArgsV2Input forward;
};

Range tensor_range(const flashjit_tensor& t, const char* what) {
  return range_of(t.data, t.shape, t.stride, 4, t.dtype == FLASHJIT_F32 ? 4 : 2, what);
}

// Precompile accepted `c`: re-derive what validation promised of the backward's own arguments.
void check_accepted(const BackwardInput& c) {
  const flashjit_backward_args_v1& b = c.args;
  check(b.struct_size >= sizeof b && b.struct_size <= kMaxStructSize, "accepted a struct_size out of range");
  check(b.abi_version >= kBackwardAbi, "accepted an abi_version below 5");
  for (std::size_t i = sizeof b; i < b.struct_size; ++i) check(c.bytes[i] == 0, "accepted a set byte past the known struct");
  check(b.reserved == 0, "accepted a set reserved word");
  check((b.flags & ~FLASHJIT_DETERMINISTIC) == 0, "accepted a flag this flashjit does not know");
  check(b.forward == &c.forward.args, "accepted a null forward");
  const AcceptedV2 f = check_accepted_v2(c.forward);
  const flashjit_attention_args_v2& a = c.forward.args;
  check(a.lse != nullptr, "accepted a forward without lse");
  check(a.workspace == nullptr && a.workspace_bytes == 0, "accepted a workspace in the forward's arguments");
  check(b.workspace != nullptr || b.workspace_bytes == 0, "accepted workspace_bytes without a workspace");
  check(reinterpret_cast<std::uintptr_t>(b.workspace) % kWorkspaceAlign == 0, "accepted a misaligned workspace");

  const flashjit_tensor* grads[4] = {&b.dout, &b.dq, &b.dk, &b.dv};
  const flashjit_tensor* like[4] = {&a.o, &a.q, &a.k, &a.v};
  const char* names[4] = {"dout", "dq", "dk", "dv"};
  Range g[4];
  for (int i = 0; i < 4; ++i) {
    check(grads[i]->dtype == like[i]->dtype, "accepted a gradient of another dtype than its tensor", names[i]);
    for (int d = 0; d < 4; ++d) check(grads[i]->shape[d] == like[i]->shape[d], "accepted a gradient of another shape", names[i]);
    g[i] = tensor_range(*grads[i], names[i]);
  }
  Range dsinks;
  if (b.dsinks) {
    check(a.sinks != nullptr, "accepted dsinks without sinks");
    dsinks = array_range(b.dsinks, 1, a.q.shape[2], 0, 4, "dsinks");
  }
  // Everything the kernels read, and everything they write: no write may share a byte with either.
  std::vector<Range> reads = f.reads;
  for (const flashjit_tensor* t : {&a.q, &a.k, &a.v}) reads.push_back(tensor_range(*t, "forward tensor"));
  for (const Range& r : {f.out.o, f.out.lse, g[0]}) reads.push_back(r);
  const Range writes[4] = {g[1], g[2], g[3], dsinks};
  for (int w = 0; w < 4; ++w) {
    for (const Range& r : reads) check(!overlap(writes[w], r), "accepted a gradient overlapping what the kernels read");
    for (int other = w + 1; other < 4; ++other) check(!overlap(writes[w], writes[other]), "accepted two gradients overlapping");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  make_launches_fail_fast();
  c_engine();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static BackwardInput c;  // 8 KB: kept off the stack
  std::memset(&c, 0, sizeof c);
  flashjit_backward_args_v1& b = c.args;
  std::size_t used = std::min(size, sizeof b);
  std::memcpy(&b, data, used);
  const bool has_forward = reinterpret_cast<std::uintptr_t>(b.forward) & 1;
  b.forward = nullptr;
  if (has_forward) {
    read_args_v2(data, size, used, c.forward);
    b.forward = &c.forward.args;
  }
  const std::string arch = arch_from(data, size, used);
  std::memcpy(c.bytes + sizeof b, data + used, std::min(size - used, sizeof c.bytes - sizeof b));
  static BackwardInput before;  // the caller's memory before the calls, which must not write to it
  std::memcpy(&before, &c, sizeof c);

  char name[64];
  std::memset(name, 0x5a, sizeof name);
  const flashjit_status pre = flashjit_precompile_backward_v1(c_engine(), &b, arch.c_str(), name, sizeof name);
  check(pre != FLASHJIT_OK, "precompile succeeded with NVRTC missing");
  check(std::all_of(name, name + sizeof name, [](char ch) { return ch == 0x5a; }), "a failed precompile wrote name_out");
  const bool compiled = accepted(pre);
  if (compiled) check_accepted(c);

  // The launching calls: refused, or accepted as far as the device (missing), or done at once for
  // a problem with nothing to compute. Both validate alike, so they answer alike.
  std::uint64_t bytes = kUnwritten;
  const flashjit_status size_st = flashjit_backward_workspace_size_v1(c_engine(), &b, nullptr, &bytes);
  const std::string size_message = flashjit_last_error();
  const bool size_ok = size_st == FLASHJIT_OK || accepted(size_st, "FLASHJIT_LIBCUDA_PATH");
  check(size_st == FLASHJIT_OK ? bytes == 0 : bytes == kUnwritten,
        "the workspace size wrote bytes_out on a failure, or sized an empty problem above 0");
  const flashjit_status run = flashjit_backward_v1(c_engine(), &b, nullptr);
  const bool run_ok = run == FLASHJIT_OK || accepted(run, "FLASHJIT_LIBCUDA_PATH");
  check(run == size_st && run_ok == size_ok, "backward and its workspace size disagree", size_message);
  check(run == size_st && (run == FLASHJIT_OK || size_message == flashjit_last_error()),
        "backward and its workspace size refuse differently", size_message);
  check(!compiled || run_ok, "precompile accepted what backward refuses", size_message);
  check(std::memcmp(&before, &c, sizeof c) == 0, "a call wrote into the caller's arguments");
  return 0;
}
