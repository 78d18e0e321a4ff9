// The version 2 C ABI's validation, as a foreign caller reaches it: flashjit_precompile_v2 with
// an arbitrary args struct (every option: varlen, window, ALiBi, sinks, kv_lens, kv_starts, paged caches;
// any struct_size and abi_version) and arch string (c_abi_fuzz_support.hpp says how, and what is
// checked besides).
//
// Input: the struct and the structs it points to, as args_v2_fuzz.hpp reads them. Then the arch
// string (up to a NUL; "sm_80" when empty); what remains lands right after the struct, where a
// newer caller's fields would be (the library reads up to struct_size bytes, at most 4096).
// tests/fuzz/make_corpus.py writes the seeds.
#include <algorithm>
#include <cstring>
#include <string>

#include "args_v2_fuzz.hpp"

using namespace flashjit::fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  c_engine();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ArgsV2Input c;  // 4 KB: kept off the stack
  std::size_t used = 0;
  read_args_v2(data, size, used, c);
  const std::string arch = arch_from(data, size, used);
  std::memcpy(c.bytes + sizeof c.args, data + used, std::min(size - used, sizeof c.bytes - sizeof c.args));

  char name[256];
  const flashjit_status st = flashjit_precompile_v2(c_engine(), &c.args, arch.c_str(), name, sizeof name);
  if (accepted(st)) check_accepted_v2(c);
  return 0;
}
