// The C ABI: status codes, the thread-local message, and argument conversion (no GPU needed).
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <thread>

#include "flashjit/flashjit.h"

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
  CHECK(std::string(name).rfind("fa2_sm80-f16-d64-causal-v8-m", 0) == 0);  // tiling: the arch default
  CHECK(flashjit_precompile(e, &a, "sm_70x", name, sizeof name) == FLASHJIT_INVALID_ARGUMENT);
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
