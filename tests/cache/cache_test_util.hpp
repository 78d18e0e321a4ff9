// Helpers shared by the cache tests: a private temp folder per test, environment overrides that
// undo themselves, keys, raw file access and a log sink.
#pragma once

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
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cache/entry_key.hpp"
#include "content_hash.hpp"

namespace flashjit::cache::test {

// A fresh folder under /tmp (mode 0700, from mkdtemp), removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/fj-cache-test-XXXXXX";
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

inline EntryKey make_key(const std::string& name, const std::string& arch = "sm_90a") {
  return EntryKey{arch, name, hash_hex("content of " + arch + "/" + name)};
}

inline std::string payload_for(const EntryKey& key, std::size_t size = 256) {
  std::string p;
  std::string seed = key.arch + "/" + key.name + "/" + key.content_hash;
  while (p.size() < size) p += seed;
  p.resize(size);
  return p;
}

inline bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

inline unsigned mode_of(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
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

inline std::size_t count_with_prefix(const std::string& dir, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& f : files_in(dir))
    if (f.compare(0, prefix.size(), prefix) == 0) ++n;
  return n;
}

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
  bool contains(const std::string& text) const {
    for (const auto& l : lines())
      if (l.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  mutable std::mutex m_;
  std::vector<std::string> lines_;
};

// Waits for a forked child; returns its exit code, or 128 + signal if it was killed.
inline int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace flashjit::cache::test
