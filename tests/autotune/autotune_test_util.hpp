// Helpers shared by the autotune tests: a private temp folder per test, environment overrides
// that undo themselves, a log sink, a fake GPU (a table of times) and forked children.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autotune/tuner.hpp"
#include "flashjit/variant.hpp"

namespace flashjit::autotune::test {

// A fresh folder under /tmp (mode 0700, from mkdtemp), removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fj-autotune-test-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets (or, with nullopt, unsets) an environment variable for the lifetime of the guard.
class EnvGuard {
 public:
  EnvGuard(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~EnvGuard() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Collects log lines from any thread.
class LogSink {
 public:
  std::function<void(const std::string&)> fn() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> g(m_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> g(m_);
    return lines_;
  }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& l : lines())
      if (l.find(text) != std::string::npos) ++n;
    return n;
  }
  bool contains(const std::string& text) const { return count(text) > 0; }

 private:
  mutable std::mutex m_;
  std::vector<std::string> lines_;
};

inline bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  return out;
}

// Waits for a forked child; returns its exit code, or 128 + signal if it was killed.
inline int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Runs `body` in a forked child whose exit code is body's result; returns the child's pid.
inline pid_t fork_child(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

// The tilings the fake GPU knows, in family order.
inline const Tiling kDefault{128, 64, 4, 2};
inline std::vector<Tiling> sample_candidates() {
  return {{64, 32, 4, 2}, {64, 64, 4, 2}, {128, 64, 4, 2}, {128, 128, 4, 2}, {128, 64, 8, 3}, {128, 128, 8, 3}};
}

// A fake GPU: fixed median times per tiling, some tilings failing, every call counted.
class FakeGpu {
 public:
  FakeGpu() {
    times_[Tiling{64, 32, 4, 2}.name()] = 2.0;
    times_[Tiling{64, 64, 4, 2}.name()] = 1.5;
    times_[Tiling{128, 64, 4, 2}.name()] = 1.2;  // the default
    times_[Tiling{128, 128, 4, 2}.name()] = 0.9;
    times_[Tiling{128, 64, 8, 3}.name()] = 0.7;  // the fastest
    times_[Tiling{128, 128, 8, 3}.name()] = 0.5;  // faster still, but fails to compile
    failing_[Tiling{128, 128, 8, 3}.name()] = "ptxas: too many resources requested";
  }
  void set_time(const Tiling& t, double ms) { times_[t.name()] = ms; }
  void set_failing(const Tiling& t, std::string why) { failing_[t.name()] = std::move(why); }

  Measure measure() {
    return [this](const Tiling& t) -> Result<double> {
      ++calls_;
      {
        std::lock_guard<std::mutex> g(m_);
        measured_.push_back(t);
      }
      if (on_measure) on_measure(t);
      if (auto f = failing_.find(t.name()); f != failing_.end()) return Error(Code::compile_failed, f->second);
      auto it = times_.find(t.name());
      if (it == times_.end()) return Error(Code::internal, "fake GPU does not know " + t.name());
      return it->second;
    };
  }

  int calls() const { return calls_; }
  std::vector<Tiling> measured() const {
    std::lock_guard<std::mutex> g(m_);
    return measured_;
  }

  // Runs inside each measure call (e.g. to sleep, or to kill the process).
  std::function<void(const Tiling&)> on_measure;

 private:
  std::map<std::string, double> times_;
  std::map<std::string, std::string> failing_;
  std::atomic<int> calls_{0};
  mutable std::mutex m_;
  std::vector<Tiling> measured_;
};

}  // namespace flashjit::autotune::test
