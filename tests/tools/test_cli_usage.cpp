// The command line itself: --help everywhere, and bad arguments refused with exit code 2, a
// message naming the argument, and nothing compiled or written. No NVRTC work.
#include <doctest/doctest.h>

#include <set>

#include "cli_test_util.hpp"
#include "flashjit/flashjit.hpp"

using namespace flashjit::tools::test;

TEST_CASE("--help on the tool and on every subcommand exits 0 and lists the options") {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases{
      {{"--help"}, {"warmup", "cache", "version", "FLASHJIT_CACHE_DIR", "Exit codes"}},
      {{"warmup", "--help"},
       {"--arch", "--set", "default", "prefill", "all-dims", "training", "--pass", "backward", "--dtype", "--head-dim", "--head-dim-v", "--mask", "--gqa",
        "--lse", "--tiling", "--vec", "--variants", "--all-tilings", "--threads", "--cache-dir", "--json", "--dry-run"}},
      {{"cache", "--help"}, {"list", "stats", "verify", "prune", "clear", "export", "import", "path"}},
      {{"cache", "list", "--help"}, {"--arch", "--json", "--cache-dir"}},
      {{"cache", "stats", "--help"}, {"--json", "--cache-dir"}},
      {{"cache", "verify", "--help"}, {"--remove-bad", "--json", "--cache-dir"}},
      {{"cache", "prune", "--help"}, {"--max-bytes", "512M", "--cache-dir"}},
      {{"cache", "clear", "--help"}, {"--arch", "--yes", "--cache-dir"}},
      {{"cache", "export", "--help"}, {"FILE", "--arch", "--cache-dir"}},
      {{"cache", "import", "--help"}, {"FILE", "--replace", "--cache-dir"}},
      {{"cache", "path", "--help"}, {"--cache-dir"}},
      {{"version", "--help"}, {"--json", "NVRTC"}},
  };
  for (const auto& c : cases) {
    std::string cmd;
    for (const auto& a : c.args) cmd += a + " ";
    CAPTURE(cmd);
    auto r = run_flashjit(c.args);
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    for (const auto& m : c.mentions) CHECK_MESSAGE(contains(r.out, m), m);
  }
}

TEST_CASE("no subcommand, or an unknown one, is a usage error") {
  CHECK(run_flashjit({}).code == 2);
  CHECK(run_flashjit({"cache"}).code == 2);
  auto r = run_flashjit({"warmpu"});
  CHECK(r.code == 2);
  CHECK(contains(r.err, "warmpu"));
}

TEST_CASE("warmup refuses bad arguments before touching the cache folder") {
  TempDir dir;
  const std::string cache = dir / "cache";
  check_usage_errors({"warmup", "--cache-dir", cache}, {
      {{"--arch", "sm_7x", "--head-dim", "64"}, "--arch"},
      {{"--arch", "sm_80,sm_7x", "--head-dim", "64"}, "sm_7x"},
      {{"--arch", "sm_75", "--head-dim", "64"}, "--arch"},
      {{"--head-dim", "64"}, "--arch"},
      {{"--arch", "sm_80", "--dtype", "f8", "--head-dim", "64"}, "--dtype"},
      {{"--arch", "sm_80", "--head-dim", "64", "--mask", "sliding"}, "--mask"},
      {{"--arch", "sm_80", "--head-dim", "300"}, "--head-dim"},
      {{"--arch", "sm_80", "--head-dim", "x"}, "--head-dim"},
      {{"--arch", "sm_80", "--head-dim", "64", "--tiling", "m128n64"}, "--tiling"},
      {{"--arch", "sm_80", "--head-dim", "256", "--tiling", "m128n128w4s4"}, "shared memory"},
      {{"--arch", "sm_80", "--set", "huge"}, "--set"},
      {{"--arch", "sm_80", "--variants", dir / "none.json"}, "--variants"},
      {{"--arch", "sm_80"}, "nothing to compile"},
      {{"--arch", "sm_80", "--head-dim", "64", "--threads", "0"}, "--threads"},
      {{"--arch", "sm_80", "--head-dim", "64", "--pass", "sideways"}, "--pass: must be one of forward, backward, both"},
      {{"--arch", "sm_80", "--head-dim", "64", "--family", "bwd_sm80"}, "bwd_sm80 is a backward family"},
      {{"--arch", "sm_80", "--head-dim", "64", "--family", "fa2_sm80", "--pass", "both"}, "fa2_sm80 is a forward family"},
      {{"--arch", "sm_80", "--head-dim", "64", "--pass", "backward", "--tiling", "m128n64w4s2"},
       "not a tiling of any backward family"},
  }, [&](const CliResult&) { CHECK(missing_or_empty(cache)); });
}

TEST_CASE("warmup --dry-run lists the plan and writes nothing") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto r = run_flashjit({"warmup", "--arch", "sm_80,sm_90a", "--set", "default", "--dry-run", "--json", "--cache-dir", cache});
  REQUIRE(r.code == 0);
  auto j = r.json();
  // 8 variants x 2 archs x the prefill and decode families, and fa3_sm90 for sm_90a, per dtype:
  // at D = 64 three kernels without a mask (short sequences, long ones, long ones in CTA pairs)
  // and two causal; at D = 128 three without a mask (128 keys, 176, 176 in pairs) and one causal
  // (the persistent grid runs the same compiled kernel as one CTA per tile).
  CHECK(j["variants"].size() == 16 * 2 + 2 * (3 + 2 + 3 + 1));
  CHECK(j["variants"][0]["arch"] == "sm_80");
  std::set<std::string> families;
  for (const auto& v : j["variants"]) families.insert(v["name"].get<std::string>().substr(0, v["name"].get<std::string>().find('-')));
  CHECK(families == std::set<std::string>{"decode_sm80", "fa2_sm80", "fa3_sm90"});
  CHECK(missing_or_empty(cache));
}

TEST_CASE("warmup --pass and the training set list the backward's kernels beside the forward's") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto count = [](const nlohmann::json& j, const char* pass) {
    std::size_t n = 0;
    for (const auto& v : j["variants"]) n += v["pass"] == pass;
    return n;
  };
  // The default is the forward alone, as before --pass existed.
  auto forward = run_flashjit({"warmup", "--arch", "sm_80", "--head-dim", "64", "--dry-run", "--json", "--cache-dir", cache});
  REQUIRE(forward.code == 0);
  CHECK(count(forward.json(), "backward") == 0);
  CHECK(count(forward.json(), "forward") == forward.json()["variants"].size());

  // One backward kernel per variant and arch (its default tiling), on sm_80 and sm_90a alike.
  auto backward = run_flashjit({"warmup", "--arch", "sm_80,sm_90a", "--head-dim", "64,128", "--mask", "none,causal",
                                "--pass", "backward", "--dry-run", "--json", "--cache-dir", cache});
  REQUIRE(backward.code == 0);
  auto jb = backward.json();
  REQUIRE(jb["variants"].size() == 2 * 2 * 2);
  for (const auto& v : jb["variants"]) {
    CHECK(v["pass"] == "backward");
    CHECK(v["family"] == (v["arch"] == "sm_90a" ? "bwd_sm90" : "bwd_sm80"));  // the engine's choice per arch
  }
  CHECK(jb["variants"][0]["arch"] == "sm_80");
  CHECK(jb["variants"][7]["arch"] == "sm_90a");
  auto text = run_flashjit({"warmup", "--arch", "sm_80", "--head-dim", "64", "--pass", "backward", "--dry-run", "--cache-dir", cache});
  REQUIRE(text.code == 0);
  CHECK(contains(text.out, "sm_80 bwd_sm80-f16-dqk64-dv64-vec8-"));
  CHECK(contains(text.out, "1 backward kernel would be compiled"));
  // fp32 too (bwd_sm80's fp32 tiles: 64 x 64 on 8 warps at D = 64).
  auto fp32 = run_flashjit({"warmup", "--arch", "sm_80", "--dtype", "f32", "--head-dim", "64", "--pass", "backward",
                            "--dry-run", "--cache-dir", cache});
  REQUIRE(fp32.code == 0);
  CHECK(contains(fp32.out, "sm_80 bwd_sm80-f32-dqk64-dv64-vec4-m64n64w8q2"));

  // The training set: its forward writes the LSE, its backward (the same 32 variants) does not.
  auto training = run_flashjit({"warmup", "--arch", "sm_80", "--set", "training", "--dry-run", "--json", "--cache-dir", cache});
  REQUIRE(training.code == 0);
  auto jt = training.json();
  CHECK(count(jt, "backward") == 32);
  for (const auto& v : jt["variants"]) {
    const std::string semantics = v["semantics"];
    CHECK_MESSAGE(contains(semantics, "-lse") == (v["pass"] == "forward"), semantics);
  }
  auto training_text = run_flashjit({"warmup", "--arch", "sm_80", "--set", "training", "--dry-run", "--cache-dir", cache});
  CHECK(contains(training_text.out, " forward, 32 backward) would be compiled"));
  // --pass overrides a set's own passes.
  auto only_forward = run_flashjit(
      {"warmup", "--arch", "sm_80", "--set", "training", "--pass", "forward", "--dry-run", "--json", "--cache-dir", cache});
  REQUIRE(only_forward.code == 0);
  CHECK(count(only_forward.json(), "backward") == 0);
  CHECK(only_forward.json()["variants"].size() == jt["variants"].size() - 32);
  CHECK(missing_or_empty(cache));
}

TEST_CASE("cache subcommands refuse bad arguments") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto clear = run_flashjit({"cache", "clear", "--cache-dir", cache});
  CHECK(clear.code == 2);
  CHECK(contains(clear.err, "--yes"));
  auto prune = run_flashjit({"cache", "prune", "--max-bytes", "12X", "--cache-dir", cache});
  CHECK(prune.code == 2);
  CHECK(contains(prune.err, "--max-bytes"));
  CHECK(run_flashjit({"cache", "prune", "--cache-dir", cache}).code == 2);  // --max-bytes is required
  auto list = run_flashjit({"cache", "list", "--arch", "sm_8", "--cache-dir", cache});
  CHECK(list.code == 2);
  CHECK(contains(list.err, "--arch"));
  auto import = run_flashjit({"cache", "import", dir / "missing.fjb", "--cache-dir", cache});
  CHECK(import.code == 2);
  CHECK(contains(import.err, "FILE"));
  CHECK(missing_or_empty(cache));
}

TEST_CASE("cache path prints the resolved root and creates nothing") {
  TempDir dir;
  auto r = run_flashjit({"cache", "path", "--cache-dir", dir / "some/cache/"});
  CHECK(r.code == 0);
  CHECK(r.out == dir / "some/cache" + "\n");
  CHECK(missing_or_empty(dir / "some"));
}

TEST_CASE("version names the library and NVRTC") {
  auto r = run_flashjit({"version", "--json"});
  REQUIRE(r.code == 0);  // the test machines have NVRTC: the NVRTC suites need it anyway
  auto j = r.json();
  CHECK(j["version"].get<std::string>().size() > 0);
  CHECK(j["nvrtc"]["version"].get<std::string>().size() > 0);
  CHECK(j["backward_kernel_families"] == "bwd_sm90, bwd_sm80");
  auto text = run_flashjit({"version"});
  CHECK(contains(text.out, "flashjit "));
  CHECK(contains(text.out, "NVRTC "));
  CHECK(contains(text.out, "backward kernel families: bwd_sm90, bwd_sm80\n"));
}

TEST_CASE("user text in errors is escaped and cut (issue 6, defect 10)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto esc = run_flashjit({"warmup", "--cache-dir", cache, "--arch", "sm_\x1b]0;pwned\x07\xff", "--head-dim", "64"});
  CHECK(esc.code == 2);
  CHECK_MESSAGE(contains(esc.err, "'sm_\\x1b]0;pwned\\x07\\xff'"), esc.err);
  CHECK_FALSE(contains(esc.err, "\x1b"));
  auto huge = run_flashjit({"warmup", "--cache-dir", cache, "--arch", "sm_" + std::string(1 << 20, '9'), "--head-dim", "64"});
  CHECK(huge.code == 2);
  CHECK(contains(huge.err, "... (1048579 bytes)"));
  CHECK(huge.err.size() < 1024);
  auto dtype = run_flashjit({"warmup", "--cache-dir", cache, "--arch", "sm_80", "--dtype", "\xc3\x28", "--head-dim", "64"});
  CHECK(dtype.code == 2);
  CHECK_MESSAGE(contains(dtype.err, "'\\xc3('"), dtype.err);
  auto vec = run_flashjit({"warmup", "--cache-dir", cache, "--arch", "sm_80", "--head-dim", "64", "--vec", "0"});
  CHECK(vec.code == 2);
  CHECK(contains(vec.err, "--vec"));
  CHECK(missing_or_empty(cache));
}

TEST_CASE("feature flags honour true/false values and refuse any other (issue 21 G4)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  // The kernels a dry run plans, as one string of names.
  auto planned = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args{"warmup", "--arch", "sm_80", "--head-dim", "64", "--family", "fa2_sm80",
                                  "--dry-run", "--json", "--cache-dir", cache};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run_flashjit(args);
    std::string names;
    if (r.code != 0) return "exit " + std::to_string(r.code) + ": " + r.err;
    const auto doc = r.json();
    for (const auto& v : doc["variants"]) names += v["name"].get<std::string>() + " ";
    return names;
  };
  for (const char* on : {"--window", "--window=true", "--window=yes", "--window=1"}) {
    CAPTURE(on);
    CHECK(contains(planned({on}), "-window-"));
  }
  for (const char* off : {"--window=false", "--window=no", "--window=0"}) {
    CAPTURE(off);
    const std::string names = planned({off});
    CHECK_MESSAGE(contains(names, "fa2_sm80-"), names);
    CHECK_FALSE(contains(names, "window"));
  }
  const auto names_the_rule = [](const CliResult& r) {
    CHECK_MESSAGE(contains(r.err, "takes no value (on) or =true/false"), r.err);
    CHECK_FALSE(contains(r.err, "stoll"));
  };
  check_usage_errors({"warmup", "--cache-dir", cache, "--arch", "sm_80", "--head-dim", "64", "--dry-run"},
                     {{{"--softcap=1e99"}, "--softcap: "},
                      {{"--paged=abc"}, "--paged: "},
                      {{"--window=2"}, "--window: "},
                      {{"--gqa=on"}, "--gqa: "}},
                     names_the_rule);
  check_usage_errors({"tune", "--cache-dir", cache, "--head-dim", "64"}, {{{"--softcap=xyz"}, "--softcap: "}}, names_the_rule);
  CHECK(missing_or_empty(cache));
}

TEST_CASE("range refusals are one short line naming the flag and the rule (issue 21 G9)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  const auto is_short = [](const CliResult& r) { CHECK_MESSAGE(r.err.size() < 160, r.err); };
  check_usage_errors({"warmup", "--cache-dir", cache, "--arch", "sm_80"},
                     {{{"--head-dim", "64", "--threads", "0"}, "--threads: must be at least 1, got 0"},
                      {{"--head-dim", "64", "--threads", "x"}, "--threads: must be an integer, got 'x'"},
                      {{"--head-dim", "64", "--threads", "4294967297"}, "--threads: must be at most 2147483647, got 4294967297"},
                      {{"--head-dim", "300"}, "--head-dim: must be in [1, 256], got 300"},
                      {{"--head-dim", "64", "--vec", "0"}, "--vec: must be in [1, 8], got 0"}},
                     is_short);
  check_usage_errors({"tune", "--cache-dir", cache, "--head-dim", "64"},
                     {{{"--device", "-1"}, "--device: must be at least 0, got -1"},
                      {{"--seq", "4096,0"}, "--seq: must be in [1, 1073741824], got 0"},
                      {{"--seq-k", "0x10"}, "--seq-k: must be an integer, got '0x10'"},
                      {{"--batch-heads", "0"}, "--batch-heads: must be in [1, "}},
                     is_short);
  CHECK(missing_or_empty(cache));
}

TEST_CASE("a refused tiling names what the caller set and the form of the chosen family's tilings (issue 21 G6)") {
  TempDir dir;
  const std::string cache = dir / "cache";
  auto refusal = [&](std::vector<std::string> flags) {
    std::vector<std::string> args{"warmup", "--arch", "sm_80,sm_90a", "--head-dim", "64", "--dry-run", "--cache-dir", cache};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = run_flashjit(args);
    CHECK(r.code == 2);
    return r.err;
  };
  const std::string fa2_form = "a fa2_sm80 tiling looks like m<block_m>n<block_n>w<warps>s<stages>";
  const std::string decode_form = "a decode_sm80 tiling looks like r<row_tiles>w<warps>k<warp_keys>s<stages>p<splits>";
  const std::string fa3_form = "a fa3_sm90 tiling looks like g<warpgroups>n<block_n>s<stages>p<persistent>c<cluster>";
  // The reproducer: the named family's form, the text as typed.
  const std::string decode = refusal({"--family", "decode_sm80", "--tiling", "m4294967424n64w4s2"});
  CHECK_MESSAGE(contains(decode, decode_form + ", got 'm4294967424n64w4s2'"), decode);
  CHECK_FALSE(contains(decode, "block_m"));
  // A number the family's form allows no room for is named, as typed, with its knob.
  const std::string fa2 = refusal({"--family", "fa2_sm80", "--tiling", "m4294967424n64w4s2"});
  CHECK_MESSAGE(contains(fa2, fa2_form + ", got 'm4294967424n64w4s2': block_m 4294967424 has more than 6 digits"), fa2);
  // No family named: the family whose knobs the text spells, not the first family tried.
  const std::string any = refusal({"--tiling", "m4294967424n64w4s2"});
  CHECK_MESSAGE(contains(any, fa2_form + ", got 'm4294967424n64w4s2': block_m 4294967424 has more than 6 digits"), any);
  CHECK_FALSE(contains(any, "decode_sm80"));
  const std::string leading_zero = refusal({"--tiling", "r1w08k16s2p0"});
  CHECK_MESSAGE(contains(leading_zero, decode_form + ", got 'r1w08k16s2p0': warps 08 has a leading zero"), leading_zero);
  // Text that spells no family's knobs: every family's form.
  const std::string none = refusal({"--tiling", "x1y2"});
  CHECK_MESSAGE(contains(none, "'x1y2' is not a tiling of any family"), none);
  for (const auto& form : {fa2_form, decode_form, fa3_form}) CHECK_MESSAGE(contains(none, form.substr(2)), none);
  CHECK(missing_or_empty(cache));
}
