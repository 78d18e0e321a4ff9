// Loading NVRTC: the search, and FLASHJIT_NVRTC_PATH's path as the only candidate when set.
// load() is called directly (get() opens once per process, so the variable cannot be varied
// there; tests/tools/test_cli_env.cpp covers it end to end).
#include <doctest/doctest.h>

#include <string>

#include "cudalib/nvrtc_library.hpp"
#include "tests/support/test_support.hpp"

using namespace flashjit;

TEST_CASE("a FLASHJIT_NVRTC_PATH that cannot be loaded is an error naming the variable and the path") {
  test_support::TempDir dir("fj-nvrtc-test");
  auto missing = NvrtcLibrary::load((dir / "no-such-libnvrtc.so").c_str());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Code::library_missing);
  CHECK(missing.error().message().rfind("FLASHJIT_NVRTC_PATH = '" + dir / "no-such-libnvrtc.so" + "'", 0) == 0);
  CHECK(missing.error().detail("variable") == std::string("FLASHJIT_NVRTC_PATH"));

  test_support::write_file(dir / "junk.so", "not a shared object");
  auto junk = NvrtcLibrary::load((dir / "junk.so").c_str());
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().message().find("could not be loaded") != std::string::npos);

  auto raw = NvrtcLibrary::load("/nonexistent/\x1b[2J\xff.so");
  REQUIRE_FALSE(raw.ok());
  CHECK(raw.error().to_string().find('\x1b') == std::string::npos);
  CHECK(raw.error().message().find("\\x1b[2J\\xff.so") != std::string::npos);
}

TEST_CASE("unset or empty, the usual names are searched") {
  // The machines that run the cpu suite have NVRTC: the compile tests need it anyway.
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    auto lib = NvrtcLibrary::load(unset);
    REQUIRE_MESSAGE(lib.ok(), lib.error().to_string());
    CHECK_FALSE(lib->version.empty());
  }
}
