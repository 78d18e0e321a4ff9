// The C ABI's validation, as a foreign caller reaches it: flashjit_precompile with an arbitrary
// args struct and arch string (c_abi_fuzz_support.hpp says how, and what is checked).
//
// Input: the bytes of a flashjit_attention_args (zero-filled when short); the lowest bit of its
// `lse` field says whether a flashjit_lse follows (its bytes next); what remains is the arch
// string (up to a NUL; "sm_80" when empty). tests/fuzz/make_corpus.py writes the seeds.
#include <cstring>
#include <string>

#include "c_abi_fuzz_support.hpp"

using namespace flashjit::fuzz;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  c_engine();
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
  const std::string arch = arch_from(data, size, used);

  char name[128];
  const flashjit_status st = flashjit_precompile(c_engine(), &args, arch.c_str(), name, sizeof name);
  if (accepted(st)) check_accepted_tensors({&args.q, &args.k, &args.v, &args.o}, args.lse);
  return 0;
}
