// Errors are values: every fallible library call returns Result<T> (or Status), carrying a code,
// a message that names the argument and the rule, and named details (NVRTC log, options, the
// variant). Nothing in the library throws or exits; tools turn errors into exit codes at the top.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace flashjit {

enum class Code {
  ok = 0,
  invalid_argument,   // caller broke a documented rule (shape, stride, alignment, range)
  unsupported,        // valid request this build or device cannot serve
  compile_failed,     // NVRTC rejected a rendered kernel
  driver_error,       // a CUDA driver call failed
  library_missing,    // libcuda / libnvrtc could not be loaded
  io_error,           // file system trouble (cache, tuning results)
  corrupt,            // a stored entry failed verification
  permission_denied,  // refused for safety (cache folder writable by others)
  not_found,
  internal,
};

const char* code_name(Code code);

class Error {
 public:
  Error(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::vector<std::pair<std::string, std::string>>& details() const { return details_; }

  // Adds context such as ("nvrtc_log", log) or ("variant", name); chainable on temporaries.
  Error& with(std::string key, std::string value) & {
    details_.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  Error&& with(std::string key, std::string value) && {
    details_.emplace_back(std::move(key), std::move(value));
    return std::move(*this);
  }
  std::optional<std::string> detail(const std::string& key) const;

  // "code: message" followed by one "  key: value" line per detail.
  std::string to_string() const;

 private:
  Code code_;
  std::string message_;
  std::vector<std::pair<std::string, std::string>> details_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : e_(std::move(error)) {}

  bool ok() const { return !e_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return *e_; }
  Error&& error() && { return std::move(*e_); }

 private:
  std::optional<Error> e_;
};

using Status = Result<void>;

}  // namespace flashjit

// Propagates a failed Result/Status out of the enclosing function (which returns a Result).
#define FJ_TRY(expr)                                 \
  do {                                               \
    auto&& fj_try_r_ = (expr);                       \
    if (!fj_try_r_.ok()) return std::move(fj_try_r_).error(); \
  } while (0)
