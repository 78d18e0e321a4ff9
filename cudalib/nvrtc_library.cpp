#include "cudalib/nvrtc_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <type_traits>

#include "base/printable.hpp"

namespace flashjit {

Result<NvrtcLibrary> NvrtcLibrary::load(const char* override_path) {
  NvrtcLibrary lib;
  void* handle = nullptr;
  if (override_path && *override_path) {
    // A path the user named is the only candidate: falling back to another NVRTC would hide the
    // mistake and compile (and key the cache) with a toolkit they did not ask for.
    handle = dlopen(override_path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const std::string why = printable(dlerror());
      return Error(Code::library_missing, std::string(kNvrtcPathEnv) + " = '" + printable(override_path) +
                                              "' could not be loaded: " + why)
          .with("variable", kNvrtcPathEnv)
          .with("path", printable(override_path));
    }
    lib.path = override_path;
  } else {
    // The SONAME first (what a system install provides), then the toolkit's default location.
    const char* const candidates[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"};
    std::string tried;
    for (const char* c : candidates) {
      handle = dlopen(c, RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        lib.path = c;
        break;
      }
      tried += std::string("\n    ") + c + ": " + printable(dlerror());
    }
    if (!handle)
      return Error(Code::library_missing,
                   std::string("NVRTC could not be loaded; install the CUDA toolkit's NVRTC or set ") + kNvrtcPathEnv)
          .with("tried", tried);
  }
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
  if (!ok) return Error(Code::library_missing, "NVRTC at " + printable(lib.path) + " lacks symbols:" + missing);
  int major = 0, minor = 0;
  if (lib.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return Error(Code::library_missing, "nvrtcVersion failed for " + printable(lib.path));
  lib.version = std::to_string(major) + "." + std::to_string(minor);
  return lib;
}

Result<const NvrtcLibrary*> NvrtcLibrary::get() {
  static std::once_flag once;
  static std::optional<Result<NvrtcLibrary>> loaded;
  std::call_once(once, [] { loaded.emplace(load(std::getenv(kNvrtcPathEnv))); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

}  // namespace flashjit
