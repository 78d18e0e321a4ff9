// Helpers shared by every test module: a private temp folder per test, environment overrides that
// undo themselves, a log sink, raw file access and forked children.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashjit::test_support {

// A fresh folder /tmp/<prefix>-XXXXXX (mode 0700, from mkdtemp), removed with everything in it at
// the end.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    const char* p = ::mkdtemp(tmpl.data());
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

// Runs `body` in a forked child that SIGALRM ends after `seconds`; returns wait_child's code. A
// call that would block forever then fails its test (128 + SIGALRM) instead of hanging the suite.
inline int run_bounded(unsigned seconds, const std::function<int()>& body) {
  return wait_child(fork_child([&] {
    ::alarm(seconds);
    return body();
  }));
}

// A forked child that the test kills with SIGKILL once it has reached a chosen point. The parent
// makes it (check pipe_ok()), forks it with start(body), waits with reached() until the child has
// called tell_parent() (or tell_parent_and_pause()), then ends it with kill(). The pipe is closed
// by close_pipe() or at the end of the scope.
class ChildToKill {
 public:
  ChildToKill() { pipe_ok_ = ::pipe(fds_) == 0; }
  ~ChildToKill() { close_pipe(); }
  ChildToKill(const ChildToKill&) = delete;
  ChildToKill& operator=(const ChildToKill&) = delete;

  bool pipe_ok() const { return pipe_ok_; }
  // Forks a child whose exit code is body's result.
  void start(const std::function<int()>& body) { pid_ = fork_child(body); }
  pid_t pid() const { return pid_; }

  // In the child: tells the parent it has reached the point.
  void tell_parent() const { (void)!::write(fds_[1], "x", 1); }
  // In the child: tells the parent, then waits to be killed (exit code 2 should it ever wake).
  [[noreturn]] void tell_parent_and_pause() const {
    tell_parent();
    ::pause();
    ::_exit(2);
  }

  // In the parent: blocks until the child has told it; false if the pipe broke first.
  bool reached() const {
    char c;
    return ::read(fds_[0], &c, 1) == 1;
  }
  // In the parent: sends SIGKILL and returns wait_child's code (128 + SIGKILL once killed).
  int kill() const {
    ::kill(pid_, SIGKILL);
    return wait_child(pid_);
  }

  void close_pipe() {
    if (!pipe_ok_) return;
    ::close(fds_[0]);
    ::close(fds_[1]);
    pipe_ok_ = false;
  }

 private:
  int fds_[2] = {-1, -1};
  bool pipe_ok_ = false;
  pid_t pid_ = -1;
};

}  // namespace flashjit::test_support
