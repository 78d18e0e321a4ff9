// The C ABI: status codes, the thread-local message, and argument conversion (no GPU needed).
#include <cstddef>
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "flashjit/flashjit.h"
#include "tests/support/test_support.hpp"

namespace {

flashjit_tensor tensor(std::uintptr_t addr, int dtype, int64_t b, int64_t s, int64_t h, int64_t d) {
  flashjit_tensor t{};
  t.data = reinterpret_cast<const void*>(addr);
  t.dtype = dtype;
  const int64_t shape[4] = {b, s, h, d}, stride[4] = {s * h * d, h * d, d, 1};
  for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.stride[i] = stride[i];
  return t;
}

flashjit_attention_args args() {
  flashjit_attention_args a{};
  a.q = tensor(0x7f0100000000ull, FLASHJIT_F16, 1, 64, 4, 64);
  a.k = tensor(0x7f0200000000ull, FLASHJIT_F16, 1, 64, 4, 64);
  a.v = tensor(0x7f0300000000ull, FLASHJIT_F16, 1, 64, 4, 64);
  a.o = tensor(0x7f0400000000ull, FLASHJIT_F16, 1, 64, 4, 64);
  return a;
}

}  // namespace

TEST_CASE("C ABI reports errors with codes and a thread-local message") {
  CHECK(flashjit_abi_version() == FLASHJIT_ABI_VERSION);
  CHECK(flashjit_args_size() == sizeof(flashjit_attention_args));
  CHECK(std::string(flashjit_version()).find("flashjit") == 0);

  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  REQUIRE(e);

  CHECK(flashjit_forward(nullptr, nullptr, nullptr) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(std::string(flashjit_last_error()) == "engine is null");

  flashjit_attention_args a = args();
  a.k.shape[2] = 3;
  a.v.shape[2] = 3;
  CHECK(flashjit_forward(e, &a, nullptr) == FLASHJIT_INVALID_ARGUMENT);
  const std::string msg = flashjit_last_error();
  CHECK(msg.find("multiple of k.shape[2]") != std::string::npos);

  // Another thread has its own message.
  std::string other;
  std::thread([&] { other = flashjit_last_error(); }).join();
  CHECK(other.empty());

  a = args();
  a.mask = 7;
  CHECK(flashjit_forward(e, &a, nullptr) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(std::string(flashjit_last_error()).find("mask must be") != std::string::npos);

  a = args();
  a.q.dtype = 9;
  CHECK(flashjit_forward(e, &a, nullptr) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(std::string(flashjit_last_error()).find("q.dtype") != std::string::npos);

  // Zero-size: a valid no-op even without a GPU.
  a = args();
  a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = 0;
  CHECK(flashjit_forward(e, &a, nullptr) == FLASHJIT_OK);

  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI precompiles for a named arch without a GPU") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args a = args();
  a.mask = FLASHJIT_MASK_CAUSAL;
  char name[128] = {0};
  const flashjit_status st = flashjit_precompile(e, &a, "sm_80", name, sizeof name);
  INFO(flashjit_last_error());
  CHECK(st == FLASHJIT_OK);
  CHECK(std::string(name).rfind("fa2_sm80-f16-dqk64-dv64-causal-vec8-m", 0) == 0);  // tiling: the arch default
  CHECK(flashjit_precompile(e, &a, "sm_70x", name, sizeof name) == FLASHJIT_INVALID_ARGUMENT);
  flashjit_engine_destroy(e);
}

namespace {

flashjit_attention_args_v2 args_v2() {
  const flashjit_attention_args v1 = args();
  flashjit_attention_args_v2 a{};
  a.struct_size = sizeof a;
  a.abi_version = FLASHJIT_ABI_VERSION;
  a.q = v1.q, a.k = v1.k, a.v = v1.v, a.o = v1.o;
  return a;
}

// The message of a v2 forward that must fail before touching the GPU.
std::string v2_error(flashjit_engine* e, const flashjit_attention_args_v2& a) {
  const flashjit_status st = flashjit_forward_v2(e, &a, nullptr);
  return st == FLASHJIT_OK ? "OK" : flashjit_last_error();
}

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("C ABI v2: the struct's size and version are checked, unknown trailing fields must be zero") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  CHECK(flashjit_args_v2_size() == sizeof(flashjit_attention_args_v2));

  flashjit_attention_args_v2 a = args_v2();
  a.struct_size = 8;
  CHECK(has(v2_error(e, a), "args.struct_size is 8 but must be at least"));
  a = args_v2();
  a.abi_version = 1;
  CHECK(has(v2_error(e, a), "args.abi_version must be 2 or newer"));
  a = args_v2();
  a.struct_size = 1u << 20;
  CHECK(has(v2_error(e, a), "more than any version has"));

  // A caller built against a newer header: its struct is longer. Zeros past what this library
  // knows are accepted; a set byte there is refused (the caller asked for something unknown).
  struct Newer {
    flashjit_attention_args_v2 known;
    std::int64_t future_field;
  } newer{};
  newer.known = args_v2();
  newer.known.struct_size = sizeof newer;
  newer.known.q.shape[0] = newer.known.k.shape[0] = newer.known.v.shape[0] = newer.known.o.shape[0] = 0;
  CHECK(flashjit_forward_v2(e, &newer.known, nullptr) == FLASHJIT_OK);  // zero-size: a no-op
  newer.future_field = 5;
  CHECK(flashjit_forward_v2(e, &newer.known, nullptr) == FLASHJIT_UNSUPPORTED);
  CHECK(has(flashjit_last_error(), "does not know"));

  // A caller built against ABI version 3's header: its struct ends before the workspace.
  newer.future_field = 0;
  newer.known.struct_size = offsetof(flashjit_attention_args_v2, workspace);
  newer.known.abi_version = 3;
  CHECK(flashjit_forward_v2(e, &newer.known, nullptr) == FLASHJIT_OK);

  // A caller built against ABI version 2's header: its struct ends before flags.
  newer.future_field = 0;
  newer.known.struct_size = offsetof(flashjit_attention_args_v2, flags);
  newer.known.abi_version = 2;
  CHECK(flashjit_forward_v2(e, &newer.known, nullptr) == FLASHJIT_OK);
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI v2 flags: the checked mode bit is taken, unknown bits and bad SM margins are refused") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args_v2 a = args_v2();
  a.flags = 1u << 7;
  CHECK(flashjit_forward_v2(e, &a, nullptr) == FLASHJIT_UNSUPPORTED);
  CHECK(has(flashjit_last_error(), "args.flags sets bits this flashjit does not know: 128"));
  a.flags = FLASHJIT_CHECK_METADATA;
  a.sm_margin = 5000;  // the field that was `reserved` before ABI version 6
  CHECK(has(v2_error(e, a), "sm_margin must be in [0, 4096] (SMs left to other kernels), got 5000"));
  a.sm_margin = 0xffffffffu;
  CHECK(has(v2_error(e, a), "args.sm_margin is 4294967295"));
  a.sm_margin = 8;  // taken; checked mode validates on the host first like any call
  a.softmax_scale = -1.f;
  CHECK(has(v2_error(e, a), "softmax_scale must be finite and > 0"));
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI: the engine's default SM margin is checked by name") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  CHECK(flashjit_engine_set_sm_margin(nullptr, 4) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "engine is null"));
  CHECK(flashjit_engine_set_sm_margin(e, -1) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "sm_margin is -1 but must be 0 to 4096"));
  CHECK(flashjit_engine_set_sm_margin(e, 4097) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(flashjit_engine_set_sm_margin(e, 16) == FLASHJIT_OK);
  CHECK(flashjit_engine_set_sm_margin(e, 0) == FLASHJIT_OK);
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI v2: every new field is converted and checked by name") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args_v2 a = args_v2();
  flashjit_window w{-3, 0};
  a.window = &w;
  CHECK(has(v2_error(e, a), "window.left must be >= 0, or -1 for unbounded, got -3"));
  w = {16, 4};
  a.mask = FLASHJIT_MASK_CAUSAL;
  CHECK(has(v2_error(e, a), "window.right must be 0 or -1 with a causal mask"));

  a = args_v2();
  a.softcap = -1.f;
  CHECK(has(v2_error(e, a), "softcap must be finite and > 0, got -1"));
  a.softcap = std::numeric_limits<float>::quiet_NaN();
  CHECK(has(v2_error(e, a), "softcap must be finite and > 0"));

  a = args_v2();
  flashjit_alibi alibi{nullptr, 0};
  a.alibi = &alibi;
  CHECK(has(v2_error(e, a), "alibi.slopes is null"));
  alibi.slopes = reinterpret_cast<const float*>(0x7f0500000002ull);
  CHECK(has(v2_error(e, a), "alibi.slopes.data must be aligned"));

  a = args_v2();
  a.sinks = reinterpret_cast<const float*>(0x7f0600000001ull);
  CHECK(has(v2_error(e, a), "sinks.data must be aligned"));

  a = args_v2();
  flashjit_varlen vl{nullptr, reinterpret_cast<const int32_t*>(0x7f0700000000ull), 2, 32, 32};
  a.varlen = &vl;
  CHECK(has(v2_error(e, a), "varlen.cu_seqlens_q is null"));
  vl.cu_seqlens_q = reinterpret_cast<const int32_t*>(0x7f0800000000ull);
  vl.max_seqlen_q = 65;
  CHECK(has(v2_error(e, a), "varlen.max_seqlen_q must be in [0, q.shape[1] = 64]"));

  // Everything at once names the variant's semantics when it compiles ahead of time.
  a = args_v2();
  a.mask = FLASHJIT_MASK_CAUSAL;
  w = {128, 0};
  a.window = &w;
  a.softcap = 30.f;
  vl = {reinterpret_cast<const int32_t*>(0x7f0800000000ull), reinterpret_cast<const int32_t*>(0x7f0900000000ull), 1, 64, 64};
  a.varlen = &vl;
  alibi = {reinterpret_cast<const float*>(0x7f0a00000000ull), 0};
  a.alibi = &alibi;
  a.sinks = reinterpret_cast<const float*>(0x7f0b00000000ull);
  char name[256] = {0};
  const flashjit_status st = flashjit_precompile_v2(e, &a, "sm_90a", name, sizeof name);
  INFO(flashjit_last_error());
  CHECK(st == FLASHJIT_OK);
  CHECK(has(name, "fa3_sm90-f16-dqk64-dv64-causal-varlen-window-softcap-alibi-sinks-vec8-g"));  // fa3 on sm_90a
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI precompile falls back to compiling in memory when an arch folder of the cache is unsafe") {
  flashjit::test_support::TempDir dir("fj-capi-test");
  const std::string root = dir / "root";
  REQUIRE(::mkdir(root.c_str(), 0700) == 0);
  REQUIRE(::mkdir((root + "/sm_80").c_str(), 0700) == 0);
  REQUIRE(::chmod((root + "/sm_80").c_str(), 0777) == 0);  // unsafe: writable by others
  flashjit::test_support::EnvGuard env("FLASHJIT_CACHE_DIR", root);
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args a = args();
  char name[128] = {0};
  const flashjit_status st = flashjit_precompile(e, &a, "sm_80", name, sizeof name);
  INFO(flashjit_last_error());
  CHECK(st == FLASHJIT_OK);
  CHECK(std::string(name).rfind("fa2_sm80-f16-dqk64", 0) == 0);
  CHECK(flashjit::test_support::files_in(root + "/sm_80").empty());
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI errors echo the arch string escaped and cut (issue 6, defect 10)") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args a = args();
  CHECK(flashjit_precompile(e, &a, "sm_\x1b[2J\xff", nullptr, 0) == FLASHJIT_INVALID_ARGUMENT);
  const std::string msg = flashjit_last_error();
  CHECK_MESSAGE(msg.find("'sm_\\x1b[2J\\xff'") != std::string::npos, msg);
  const std::string huge = "sm_" + std::string(1 << 20, '8');
  CHECK(flashjit_precompile(e, &a, huge.c_str(), nullptr, 0) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(std::string(flashjit_last_error()).size() < 1024);
  a.softmax_scale = -1e-30f;
  CHECK(flashjit_precompile(e, &a, "sm_80", nullptr, 0) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(std::string(flashjit_last_error()).find("got -1e-30") != std::string::npos);
  flashjit_engine_destroy(e);
}

namespace {
// Paged decode through the v2 struct: B sequences of one query, pools [pages, page_size, 2, 64].
struct PagedV2 {
  flashjit_attention_args_v2 a = args_v2();
  flashjit_paged_kv paged{reinterpret_cast<const int32_t*>(0x7f0c00000000ull), 4, 4};
  PagedV2(int64_t B, int64_t pages, int64_t page_size) {
    a.q = tensor(0x7f0100000000ull, FLASHJIT_F16, B, 1, 8, 64);
    a.o = tensor(0x7f0400000000ull, FLASHJIT_F16, B, 1, 8, 64);
    a.k = tensor(0x7f0200000000ull, FLASHJIT_F16, pages, page_size, 2, 64);
    a.v = tensor(0x7f0300000000ull, FLASHJIT_F16, pages, page_size, 2, 64);
    a.kv_lens = reinterpret_cast<const int32_t*>(0x7f0d00000000ull);
    a.paged = &paged;
  }
  PagedV2(const PagedV2&) = delete;  // a.paged points into this object
};
}  // namespace

TEST_CASE("C ABI v2: paged max_pages near 2^56 is refused, not wrapped into a compiled kernel (issue 21 G1)") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  PagedV2 p(2, 32, 256);
  char name[256] = {0};
  flashjit_status st = flashjit_precompile_v2(e, &p.a, "sm_80", name, sizeof name);
  INFO(flashjit_last_error());
  CHECK(st == FLASHJIT_OK);  // the valid pool compiles
  p.paged.max_pages = p.paged.table_stride = int64_t(1) << 56;
  st = flashjit_precompile_v2(e, &p.a, "sm_80", name, sizeof name);
  CHECK(st == FLASHJIT_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "paged.max_pages must be in [1, 4194304]"));
  flashjit_engine_destroy(e);
}

TEST_CASE("C ABI v2 workspace: bytes need a pointer, the pointer an alignment; the size query checks its arguments") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  flashjit_attention_args_v2 a = args_v2();
  a.workspace_bytes = 64;
  CHECK(has(v2_error(e, a), "workspace.bytes is 64 but workspace.data is null"));
  alignas(256) static unsigned char scratch[512];
  a.workspace = scratch + 16;
  CHECK(has(v2_error(e, a), "workspace.data must be 256-byte aligned"));

  std::uint64_t bytes = 7;
  CHECK(flashjit_workspace_size_v2(e, &a, nullptr, nullptr) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "bytes_out is null"));
  CHECK(flashjit_workspace_size_v2(e, &a, nullptr, &bytes) == FLASHJIT_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "workspace.data must be 256-byte aligned"));
  CHECK(bytes == 7);  // nothing written on failure
  a = args_v2();
  a.q.shape[0] = a.k.shape[0] = a.v.shape[0] = a.o.shape[0] = 0;
  CHECK(flashjit_workspace_size_v2(e, &a, nullptr, &bytes) == FLASHJIT_OK);  // zero-size: no GPU needed
  CHECK(bytes == 0);
  CHECK(flashjit_workspace_size_v2(nullptr, &a, nullptr, &bytes) == FLASHJIT_INVALID_ARGUMENT);
  flashjit_engine_destroy(e);
}

namespace {

// A backward over args_v2()'s forward (with its LSE): gradients at their own fake addresses.
struct BackwardV1 {
  flashjit_lse lse{};
  flashjit_attention_args_v2 forward = args_v2();
  flashjit_backward_args_v1 b{};
  BackwardV1() {
    lse.data = reinterpret_cast<float*>(0x7f0500000000ull);
    lse.shape[0] = 1, lse.shape[1] = 4, lse.shape[2] = 64;
    lse.stride[0] = 256, lse.stride[1] = 64, lse.stride[2] = 1;
    forward.lse = &lse;
    b.struct_size = sizeof b;
    b.abi_version = FLASHJIT_ABI_VERSION;
    b.forward = &forward;
    b.dout = tensor(0x7f0600000000ull, FLASHJIT_F16, 1, 64, 4, 64);
    b.dq = tensor(0x7f0700000000ull, FLASHJIT_F16, 1, 64, 4, 64);
    b.dk = tensor(0x7f0800000000ull, FLASHJIT_F16, 1, 64, 4, 64);
    b.dv = tensor(0x7f0900000000ull, FLASHJIT_F16, 1, 64, 4, 64);
  }
  BackwardV1(const BackwardV1&) = delete;
};

std::string backward_error(flashjit_engine* e, const flashjit_backward_args_v1* b) {
  const flashjit_status st = flashjit_backward_v1(e, b, nullptr);
  return st == FLASHJIT_OK ? "OK" : flashjit_last_error();
}

}  // namespace

TEST_CASE("C ABI backward: size-prefixed args, the forward's rules, refusals named, precompile without a GPU") {
  flashjit_engine* e = nullptr;
  REQUIRE(flashjit_engine_create(&e) == FLASHJIT_OK);
  CHECK(flashjit_backward_args_v1_size() == sizeof(flashjit_backward_args_v1));
  CHECK(has(backward_error(e, nullptr), "args is null"));
  {
    BackwardV1 a;
    a.b.struct_size = 16;
    CHECK(has(backward_error(e, &a.b), "sizeof(flashjit_backward_args_v1)"));
  }
  {
    BackwardV1 a;
    a.b.abi_version = 4;
    CHECK(has(backward_error(e, &a.b), "args.abi_version must be 5 or newer"));
  }
  {
    BackwardV1 a;
    a.b.forward = nullptr;
    CHECK(has(backward_error(e, &a.b), "args.forward is null"));
  }
  {
    BackwardV1 a;
    a.forward.lse = nullptr;
    CHECK(flashjit_backward_v1(e, &a.b, nullptr) == FLASHJIT_INVALID_ARGUMENT);
    CHECK(has(flashjit_last_error(), "forward.lse is required"));
  }
  {
    BackwardV1 a;
    a.forward.struct_size = 8;  // the forward struct's own rules, said to be the forward's
    CHECK(has(backward_error(e, &a.b), "forward: args.struct_size is 8"));
  }
  {
    BackwardV1 a;
    a.b.flags = 2;
    CHECK(flashjit_backward_v1(e, &a.b, nullptr) == FLASHJIT_UNSUPPORTED);
    a.b.flags = 0;
    a.b.reserved = 1;
    CHECK(has(backward_error(e, &a.b), "args.reserved must be 0"));
  }
  {
    BackwardV1 a;
    a.b.dv.dtype = 7;
    CHECK(has(backward_error(e, &a.b), "dv.dtype must be"));
  }
  {
    BackwardV1 a;
    a.forward.kv_starts = reinterpret_cast<const int32_t*>(0x7f0b00000000ull);
    char name[128] = {0};
    CHECK(flashjit_precompile_backward_v1(e, &a.b, "sm_80", name, sizeof name) == FLASHJIT_UNSUPPORTED);
    CHECK(has(flashjit_last_error(), "kv_starts"));
  }
  {
    BackwardV1 a;
    a.forward.mask = FLASHJIT_MASK_CAUSAL;
    char name[128] = {0};
    const flashjit_status st = flashjit_precompile_backward_v1(e, &a.b, "sm_80", name, sizeof name);
    INFO(flashjit_last_error());
    CHECK(st == FLASHJIT_OK);
    CHECK(std::string(name) == "bwd_sm80-f16-dqk64-dv64-causal-vec8-m64n128w8q2");  // two stages before FA2's D = 64 shape on sm_80's 163 KB
    a.b.flags = FLASHJIT_DETERMINISTIC;  // a variant of its own, with the fixed dQ order compiled in
    CHECK(flashjit_precompile_backward_v1(e, &a.b, "sm_80", name, sizeof name) == FLASHJIT_OK);
    CHECK(std::string(name) == "bwd_sm80-f16-dqk64-dv64-causal-det-vec8-m64n128w8q2");
  }
  flashjit_engine_destroy(e);
}
