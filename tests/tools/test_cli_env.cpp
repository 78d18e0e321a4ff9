// The environment as the real `flashjit` binary sees it: each case runs the built tool in a
// fresh process (the libraries it names are opened once per process), with one variable set.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_test_util.hpp"

using namespace flashjit::tools::test;

namespace {

// Runs the flashjit binary with `name=value` added to the environment.
ProgramRun run_tool(const std::string& name, const std::string& value, std::vector<std::string> args) {
  return run_program(FLASHJIT_CLI_PATH, std::move(args), {{name, value}});
}

}  // namespace

TEST_CASE("FLASHJIT_NVRTC_PATH naming a missing or unloadable file is an error, not ignored (issue 6, defect 10)") {
  TempDir dir;
  auto missing = run_tool("FLASHJIT_NVRTC_PATH", dir / "no-such-libnvrtc.so", {"version", "--json"});
  CHECK_MESSAGE(contains(missing.output, "FLASHJIT_NVRTC_PATH"), missing.output);
  CHECK(contains(missing.output, dir / "no-such-libnvrtc.so"));
  flashjit::test_support::write_file(dir / "not-a-library.so", "plain text");
  auto junk = run_tool("FLASHJIT_NVRTC_PATH", dir / "not-a-library.so",
                       {"warmup", "--arch", "sm_80", "--head-dim", "64", "--cache-dir", dir / "cache"});
  CHECK(junk.code == 1);
  CHECK_MESSAGE(contains(junk.output, "FLASHJIT_NVRTC_PATH"), junk.output);
  CHECK(contains(junk.output, dir / "not-a-library.so"));
  auto raw = run_tool("FLASHJIT_NVRTC_PATH", "/nonexistent/\x1b[2J.so", {"version"});
  CHECK_MESSAGE(contains(raw.output, "/nonexistent/\\x1b[2J.so"), raw.output);
  CHECK_FALSE(contains(raw.output, "\x1b"));
}

TEST_CASE("FLASHJIT_LIBCUDA_PATH naming a missing file says so (issue 6, defect 10)") {
  TempDir dir;
  auto r = run_tool("FLASHJIT_LIBCUDA_PATH", dir / "no-such-libcuda.so", {"tune", "--head-dim", "64"});
  CHECK(r.code == 1);
  CHECK_MESSAGE(contains(r.output, "FLASHJIT_LIBCUDA_PATH"), r.output);
  CHECK(contains(r.output, dir / "no-such-libcuda.so"));
}
