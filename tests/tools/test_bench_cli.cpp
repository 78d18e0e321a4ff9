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
  CHECK(r.code == 2);
  CHECK_MESSAGE(contains(r.output, "--group: must be at least 1, got 0"), r.output);
  CHECK_MESSAGE(r.output.size() < 160, r.output);
}

TEST_CASE("a bad command line exits 2 naming the flag, never CLI11's own codes or a division by zero (issue 21 G11)") {
  const std::vector<UsageCase> cases{
      {{"--bogus"}, "--bogus"},
      {{"--tokens"}, "--tokens"},
      {{"--seqs", "0"}, "--seqs: must be at least 1, got 0"},
      {{"--dims", "0"}, "--dims: must be at least 1, got 0"},
      {{"--seqs", "4096x"}, "--seqs: must be an integer, got '4096x'"},
      {{"--dims", "64,abc"}, "--dims: must be an integer, got 'abc'"},
      {{"--reps", "0"}, "--reps: must be at least 1, got 0"},
      {{"--dtype", "f8"}, "--dtype"},
      {{"--causal", "maybe"}, "--causal"},
      {{"--family", "fa9_sm200"}, "--family"},
      {{"--dims", "64", "--hidden", "2048", "--group", "3"}, "--group: 3 does not divide the 32 query heads of D=64"},
  };
  for (const auto& c : cases) {
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    CAPTURE(cmd);
    auto r = run_bench(c.args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.output, c.says), r.output);
  }
  auto help = run_bench({"--help"});
  CHECK(help.code == 0);
  CHECK(contains(help.output, "--window"));
}
