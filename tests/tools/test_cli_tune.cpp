// `flashjit tune`: what it refuses before looking for a GPU. Every bad value is a usage error
// (exit 2) naming the argument and the rule; nothing here needs a GPU or NVRTC.
#include <doctest/doctest.h>

#include <string>

#include "cli_test_util.hpp"

using namespace flashjit::tools::test;
using flashjit::test_support::fork_child;
using flashjit::test_support::wait_child;
using flashjit::test_support::write_file;

namespace {

std::string nested(std::size_t depth, const std::string& inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

// Runs `flashjit args` in a forked child, so that a crash fails this test instead of ending
// the test program; 0 when the child saw a usage error (exit 2) mentioning every word in `want`.
int usage_error_in_child(const std::vector<std::string>& args, const std::vector<std::string>& want) {
  return wait_child(fork_child([&] {
    auto r = run_flashjit(args);
    if (r.code != 2) return 10 + r.code;
    for (const auto& w : want)
      if (!contains(r.err, w)) return 1;
    return 0;
  }));
}

}  // namespace

TEST_CASE("a workload nested 200,000 deep is refused, not a crash (issue 6, defect 3)") {
  TempDir dir;
  write_file(dir / "deep.json", nested(200000));
  CHECK(usage_error_in_child({"tune", "--workload", dir / "deep.json"}, {"--workload", "nested deeper than"}) == 0);
  write_file(dir / "deep_object.json", "[" + std::string(100000, '{') + "]");
  CHECK(usage_error_in_child({"tune", "--workload", dir / "deep_object.json"}, {"nested deeper than"}) == 0);
}

TEST_CASE("workload integers are range-checked, not narrowed (issue 6, defect 6)") {
  TempDir dir;
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"([{"head_dim": 4294967360, "seqlen_q": 1024}])", "head_dim: must be an integer in [1, 256], got 4294967360"},
      {R"([{"head_dim": 64, "vec": 4294967304, "seqlen_q": 1024}])", "vec: must be an integer in [1, 8], got 4294967304"},
      {R"([{"head_dim": 64, "seqlen_q": 18446744073709551615}])", "seqlen_q: must be an integer in [1, 1073741824]"},
      {R"([{"head_dim": 64, "seqlen_q": 1024, "seqlen_k": 9223372036854775808}])", "seqlen_k: must be an integer"},
      {R"([{"head_dim": 64, "seqlen_q": 1024, "batch_x_heads": -1}])", "batch_x_heads: must be an integer in [1, "},
      {R"([{"head_dim": 64, "seqlen_q": 1e3}])", "seqlen_q: must be an integer in [1, 1073741824], got 1000"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.json);
    write_file(dir / "w.json", c.json);
    auto r = run_flashjit({"tune", "--workload", dir / "w.json"});
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.err, c.says), r.err);
  }
}

TEST_CASE("numeric flags are refused out of range, never ignored (issue 6, defect 10)") {
  check_usage_errors({"tune"}, {
      {{"--head-dim", "64", "--seq-k", "-5"}, "--seq-k"},
      {{"--head-dim", "64", "--seq-k", "0"}, "--seq-k"},
      {{"--head-dim", "64", "--seq", "4096,-1"}, "--seq"},
      {{"--head-dim", "64", "--seq", "2147483648"}, "--seq"},
      {{"--head-dim", "64", "--batch-heads", "0"}, "--batch-heads"},
      {{"--head-dim", "64", "--device", "-1"}, "--device"},
      {{"--head-dim", "64", "--head-dim-v", "0"}, "--head-dim-v"},
      {{"--head-dim", "-64"}, "--head-dim"},
  });
}

TEST_CASE("a bad workload path is echoed without its raw bytes") {
  auto r = run_flashjit({"tune", "--workload", "/nonexistent/\x1b[2J\xff.json"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "\\x1b[2J\\xff.json"));
  CHECK_FALSE(contains(r.err, "\x1b"));
}

TEST_CASE("--pass names forward, backward or both; anything else is a usage error naming it") {
  CHECK(usage_error_in_child({"tune", "--pass", "sideways", "--head-dim", "64"},
                             {"--pass", "must be forward, backward or both", "sideways"}) == 0);
  // A valid --pass gets past the command line: without a GPU here the tune fails at the device,
  // not as a usage error.
  auto r = run_flashjit({"tune", "--pass", "backward", "--head-dim", "64"});
  CHECK(r.code != 2);
}
