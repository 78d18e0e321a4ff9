#include "autotune/log.hpp"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>

namespace flashjit::autotune {

Logger default_logger() {
  const char* v = std::getenv("FLASHJIT_LOG");
  if (!v || !*v || std::string(v) == "0") return {};
  return serialized_logger([](const std::string& line) { std::cerr << "[flashjit tune] " << line << '\n'; });
}

Logger serialized_logger(Logger logger) {
  if (!logger) return {};
  auto mutex = std::make_shared<std::mutex>();
  return [mutex, logger = std::move(logger)](const std::string& line) {
    std::lock_guard<std::mutex> guard(*mutex);
    logger(line);
  };
}

}  // namespace flashjit::autotune
