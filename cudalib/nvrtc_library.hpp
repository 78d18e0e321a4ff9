// NVRTC, opened at run time (dlopen) so the library loads where no toolkit is installed; only
// compiling needs it.
#pragma once

#include <nvrtc.h>

#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

// Names the NVRTC library to load instead of searching for one.
inline constexpr const char* kNvrtcPathEnv = "FLASHJIT_NVRTC_PATH";

struct NvrtcLibrary {
  decltype(&::nvrtcVersion) nvrtcVersion = nullptr;
  decltype(&::nvrtcGetErrorString) nvrtcGetErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) nvrtcCreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) nvrtcCompileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog = nullptr;
  decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN = nullptr;

  std::string version;  // "13.0"
  std::string path;     // the file that was opened

  // Opens once per process (thread safe): load($FLASHJIT_NVRTC_PATH).
  static Result<const NvrtcLibrary*> get();
  // Opens `override_path` and nothing else, or (null or empty) searches the usual names. A path
  // that cannot be loaded is an error naming the variable and the path.
  static Result<NvrtcLibrary> load(const char* override_path);
};

}  // namespace flashjit
