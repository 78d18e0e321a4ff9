#include "flashjit/status.hpp"

namespace flashjit {

const char* code_name(Code code) {
  switch (code) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid_argument";
    case Code::unsupported: return "unsupported";
    case Code::compile_failed: return "compile_failed";
    case Code::driver_error: return "driver_error";
    case Code::library_missing: return "library_missing";
    case Code::io_error: return "io_error";
    case Code::corrupt: return "corrupt";
    case Code::permission_denied: return "permission_denied";
    case Code::not_found: return "not_found";
    case Code::internal: return "internal";
  }
  return "unknown";
}

std::optional<std::string> Error::detail(const std::string& key) const {
  for (const auto& [k, v] : details_)
    if (k == key) return v;
  return std::nullopt;
}

std::string Error::to_string() const {
  std::string out = std::string(code_name(code_)) + ": " + message_;
  for (const auto& [k, v] : details_) out += "\n  " + k + ": " + v;
  return out;
}

}  // namespace flashjit
