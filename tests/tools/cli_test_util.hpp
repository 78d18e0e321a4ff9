// Helpers for the CLI tests: run the flashjit tool in-process with captured streams, or any built
// tool in a fresh process, in a private temp folder per test (TempDir, from
// tests/support/test_support.hpp).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "flashjit/flashjit.hpp"
#include "tests/support/test_support.hpp"

namespace flashjit::tools::test {

// A fresh folder /tmp/fj-cli-test-XXXXXX, removed with everything in it at the end.
class TempDir : public test_support::TempDir {
 public:
  TempDir() : test_support::TempDir("fj-cli-test") {}
};

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
  nlohmann::json json() const { return nlohmann::json::parse(out); }
};

// Runs `flashjit <args...>` (stderr is not a terminal: plain progress lines).
inline CliResult run_flashjit(std::vector<std::string> args) {
  args.insert(args.begin(), "flashjit");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  std::ostringstream out, err;
  CliResult r;
  r.code = run_cli(int(args.size()), argv.data(), out, err, /*err_is_tty=*/false);
  r.out = out.str();
  r.err = err.str();
  return r;
}

struct ProgramRun {
  int code = -1;       // exit code, 128 + signal if killed, -1 if it could not start
  std::string output;  // stdout and stderr together
};

// Runs the program at `path` with `args` in a fresh process, with `env` (name, value) added to its
// environment.
inline ProgramRun run_program(const std::string& path, std::vector<std::string> args,
                              const std::vector<std::pair<std::string, std::string>>& env = {}) {
  args.insert(args.begin(), path);
  ProgramRun r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.output.append(buf, std::size_t(n));
  ::close(fds[0]);
  r.code = test_support::wait_child(pid);
  return r;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A command line the tool must refuse, and what its message must say (the argument, the rule).
struct UsageCase {
  std::vector<std::string> args;
  std::string says;
};

// Runs `flashjit <command...> <case args...>` for each case and checks a usage error: exit code
// 2, stderr saying what the case says, nothing on stdout; `also` checks more of each.
inline void check_usage_errors(const std::vector<std::string>& command, const std::vector<UsageCase>& cases,
                               const std::function<void(const CliResult&)>& also = {}) {
  for (const auto& c : cases) {
    std::vector<std::string> args = command;
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    CAPTURE(cmd);
    auto r = run_flashjit(args);
    CHECK(r.code == 2);
    CHECK_MESSAGE(contains(r.err, c.says), r.err);
    CHECK(r.out.empty());
    if (also) also(r);
  }
}

// Whether `dir` is missing or holds nothing at all.
inline bool missing_or_empty(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return true;
  return std::filesystem::is_empty(dir, ec);
}

// Regular files under `dir` whose name ends with `ext`, sorted.
inline std::vector<std::string> files_with_ext(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    const std::string p = it->path().string();
    if (it->is_regular_file() && p.size() >= ext.size() && p.compare(p.size() - ext.size(), ext.size(), ext) == 0)
      out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Names of the entries `cache list --json` reports for `cache_dir`.
inline std::vector<std::string> listed_names(const std::string& cache_dir) {
  auto r = run_flashjit({"cache", "list", "--json", "--cache-dir", cache_dir});
  std::vector<std::string> names;
  if (r.code != 0) return names;
  const auto doc = r.json();
  for (const auto& e : doc["entries"]) names.push_back(e["name"].get<std::string>());
  std::sort(names.begin(), names.end());
  return names;
}

// An engine whose disk cache is `cache_dir`: what a process on a warmed machine reads.
inline std::unique_ptr<Engine> engine_on(const std::string& cache_dir) {
  EngineOptions eo;
  eo.cache_dir = cache_dir;
  return Engine::create(eo).value();
}

// The two small explicit variants the NVRTC tests warm (d32 compiles fastest).
// Two kernels (one family, so the counts below stay small and the compiles quick).
inline std::vector<std::string> small_warmup_args(const std::string& cache_dir) {
  return {"warmup", "--arch", "sm_80", "--dtype", "f16", "--head-dim", "32", "--mask", "none,causal", "--family",
          "fa2_sm80", "--threads", "2", "--json", "--cache-dir", cache_dir};
}

}  // namespace flashjit::tools::test
