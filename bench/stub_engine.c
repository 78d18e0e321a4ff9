/* Stand-ins for libflashjit's entry points that do nothing and succeed, for bench/op_overhead.py
 * --stub-engine: bound to the torch op's C++ kernel they leave the dispatcher's and the kernel's
 * own host time (checks, allocations, packing), with no engine and no launch.
 *   cc -O2 -shared -fPIC bench/stub_engine.c -o stub_engine.so */
#include <stdint.h>

int stub_forward_v2(void* engine, const void* args, void* stream) {
  (void)engine, (void)args, (void)stream;
  return 0;
}

int stub_workspace_size_v2(void* engine, const void* args, void* stream, uint64_t* bytes) {
  (void)engine, (void)args, (void)stream;
  *bytes = 0;
  return 0;
}

const char* stub_last_error(void) { return ""; }
