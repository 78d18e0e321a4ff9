#include "nvrtc_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace flashjit {

static Result<NvrtcLibrary> open_nvrtc() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("FLASHJIT_NVRTC_PATH"); p && *p) candidates.push_back(p);
  // The SONAME first (what a system install provides), then the toolkit's default location.
  candidates.insert(candidates.end(), {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                       "/usr/local/cuda/lib64/libnvrtc.so.13",
                                       "/usr/local/cuda/lib64/libnvrtc.so"});
  std::string tried;
  void* handle = nullptr;
  NvrtcLibrary lib;
  for (const auto& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      lib.path = c;
      break;
    }
    tried += "\n    " + c + ": " + dlerror();
  }
  if (!handle)
    return Error(Code::library_missing, "NVRTC could not be loaded; install the CUDA toolkit's NVRTC or set FLASHJIT_NVRTC_PATH")
        .with("tried", tried);
  bool ok = true;
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn) ok = false, missing += std::string(" ") + name;
  };
  sym(lib.nvrtcVersion, "nvrtcVersion");
  sym(lib.nvrtcGetErrorString, "nvrtcGetErrorString");
  sym(lib.nvrtcCreateProgram, "nvrtcCreateProgram");
  sym(lib.nvrtcDestroyProgram, "nvrtcDestroyProgram");
  sym(lib.nvrtcCompileProgram, "nvrtcCompileProgram");
  sym(lib.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
  sym(lib.nvrtcGetProgramLog, "nvrtcGetProgramLog");
  sym(lib.nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
  sym(lib.nvrtcGetCUBIN, "nvrtcGetCUBIN");
  if (!ok) return Error(Code::library_missing, "NVRTC at " + lib.path + " lacks symbols:" + missing);
  int major = 0, minor = 0;
  if (lib.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return Error(Code::library_missing, "nvrtcVersion failed for " + lib.path);
  lib.version = std::to_string(major) + "." + std::to_string(minor);
  return lib;
}

Result<const NvrtcLibrary*> NvrtcLibrary::get() {
  static std::once_flag once;
  static std::optional<Result<NvrtcLibrary>> loaded;
  std::call_once(once, [] { loaded.emplace(open_nvrtc()); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

}  // namespace flashjit
