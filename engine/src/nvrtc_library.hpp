// NVRTC, opened at run time (dlopen) so the library loads where no toolkit is installed; only
// compiling needs it.
#pragma once

#include <nvrtc.h>

#include <string>

#include "flashjit/status.hpp"

namespace flashjit {

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

  // Opens once per process (thread safe); FLASHJIT_NVRTC_PATH overrides the search.
  static Result<const NvrtcLibrary*> get();
};

}  // namespace flashjit
