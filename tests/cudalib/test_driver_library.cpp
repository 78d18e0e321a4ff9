// Loading the CUDA driver: a FLASHJIT_LIBCUDA_PATH that cannot be loaded is named in the error
// (no GPU or driver is needed to check that).
#include <doctest/doctest.h>

#include <string>

#include "cudalib/driver_library.hpp"
#include "tests/support/test_support.hpp"

using namespace flashjit;

TEST_CASE("a FLASHJIT_LIBCUDA_PATH that cannot be loaded is an error naming the variable and the path") {
  test_support::TempDir dir("fj-driver-test");
  auto missing = DriverLibrary::load((dir / "no-such-libcuda.so").c_str());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == Code::library_missing);
  CHECK(missing.error().message().rfind("FLASHJIT_LIBCUDA_PATH = '" + dir / "no-such-libcuda.so" + "'", 0) == 0);
  CHECK(missing.error().detail("path") == dir / "no-such-libcuda.so");

  auto raw = DriverLibrary::load("/nonexistent/\x1b]0;x\x07.so");
  REQUIRE_FALSE(raw.ok());
  CHECK(raw.error().to_string().find('\x1b') == std::string::npos);
}
