// What every fuzz target shares: the libFuzzer entry points it defines, and the checks it makes
// beyond "no crash, no sanitizer report". A failed check aborts, which libFuzzer and the replay
// driver both report as a finding, with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "base/printable.hpp"

// Defined by each target (tests/fuzz/fuzz_*.cpp); called by libFuzzer or by replay_main.cpp.
// A target that needs set-up once per process also defines LLVMFuzzerInitialize.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace flashjit::fuzz {

[[noreturn]] inline void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "fuzz check failed: %s\n  %s\n", what, printable(detail, 4096).c_str());
  std::abort();
}

inline void check(bool ok, const char* what, std::string_view detail = {}) {
  if (!ok) fail(what, detail);
}

// A message shown to people must carry no raw control bytes, invalid UTF-8 or hidden controls:
// every piece between its line breaks and backslashes (both legitimate: details are one per
// line, escapes start with one) must be left alone by printable().
inline void check_printable(std::string_view message, const char* what) {
  std::size_t start = 0;
  for (std::size_t i = 0; i <= message.size(); ++i) {
    if (i < message.size() && message[i] != '\n' && message[i] != '\\') continue;
    const std::string_view piece = message.substr(start, i - start);
    if (printable(piece, piece.size()) != piece) fail(what, message);
    start = i + 1;
  }
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace flashjit::fuzz
