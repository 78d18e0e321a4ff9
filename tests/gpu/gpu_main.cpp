// Entry point of the GPU suite: without a usable GPU it says so and exits 77, which ctest
// reports as SKIPPED (never as passed).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "common/device.hpp"

namespace flashjit::gpu_test {
void set_self_path(const char* p);
int second_process_main();
}  // namespace flashjit::gpu_test

int main(int argc, char** argv) {
  flashjit::gpu_test::set_self_path(argv[0]);
  if (argc == 2 && std::string(argv[1]) == "--second-process") return flashjit::gpu_test::second_process_main();
  auto gpu = flashjit::tools::GpuContext::open(0);
  if (!gpu.ok()) {
    std::printf("SKIPPED: GPU suite needs a CUDA device: %s\n", gpu.error().to_string().c_str());
    return 77;
  }
  std::printf("GPU: %s (%s, %d SMs)\n", gpu->info().name.c_str(), gpu->info().arch.c_str(), gpu->info().sm_count);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
