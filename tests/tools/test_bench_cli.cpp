// flashjit-bench's command line, run as a fresh process: what it refuses before it looks for a
// GPU, so nothing here needs one.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_test_util.hpp"

using namespace flashjit::tools::test;

namespace {

ProgramRun run_bench(std::vector<std::string> args) { return run_program(FLASHJIT_BENCH_PATH, std::move(args)); }

}  // namespace

TEST_CASE("range refusals are one short line naming the flag and the rule (issue 21 G9)") {
  auto r = run_bench({"--group", "0"});
  CHECK(r.code != 0);
  CHECK_MESSAGE(contains(r.output, "--group: must be at least 1, got 0"), r.output);
  CHECK_MESSAGE(r.output.size() < 160, r.output);
}
