#include "engine_options.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "device_context.hpp"

namespace flashjit {

EngineOptions with_env(EngineOptions o) {
  if (!o.log) {
    const char* env = std::getenv("FLASHJIT_LOG");
    if (env && *env && std::string(env) != "0")
      o.log = [](const std::string& m) { std::fprintf(stderr, "[flashjit] %s\n", m.c_str()); };
  }
  if (const char* d = std::getenv("FLASHJIT_DISK_CACHE"); d && std::string(d) == "0") o.disk_cache = false;
  if (!o.check_metadata) {
    const char* c = std::getenv("FLASHJIT_CHECK");
    o.check_metadata = c && std::string(c) == "1";
  }
  if (!o.sm_margin) {
    const char* m = std::getenv("FLASHJIT_SM_MARGIN");
    int value = 0;
    if (m && *m) {
      char* end = nullptr;
      const long parsed = std::strtol(m, &end, 10);
      // A bad value is ignored with a note in the log rather than failing every call.
      if (*end == 0 && parsed >= 0 && parsed <= kMaxSmMargin)
        value = int(parsed);
      else if (o.log)
        o.log(std::string("FLASHJIT_SM_MARGIN='") + m + "' is not a whole number 0 to " + std::to_string(kMaxSmMargin) +
              ": ignored");
    }
    o.sm_margin = value;
  }
  return o;
}

}  // namespace flashjit
