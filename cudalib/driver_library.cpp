#include "cudalib/driver_library.hpp"

#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <type_traits>

#include "base/printable.hpp"

namespace flashjit {

#define FJ_DRIVER_CHECK(name, version)                                                 \
  static_assert(std::is_same_v<decltype(&::name), PFN_##name##_v##version>,           \
                #name ": the requested ABI version must match the prototype we call");
FLASHJIT_DRIVER_FUNCTIONS(FJ_DRIVER_CHECK)
#undef FJ_DRIVER_CHECK

Result<DriverLibrary> DriverLibrary::load(const char* override_path) {
  const bool named = override_path && *override_path;
  const char* path = named ? override_path : "libcuda.so.1";
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle && named) {
    const std::string why = printable(dlerror());
    return Error(Code::library_missing,
                 std::string(kLibcudaPathEnv) + " = '" + printable(path) + "' could not be loaded: " + why)
        .with("variable", kLibcudaPathEnv)
        .with("path", printable(path));
  }
  if (!handle)
    return Error(Code::library_missing, "the CUDA driver (libcuda.so.1) could not be loaded: no NVIDIA driver on this machine")
        .with("dlerror", printable(dlerror()));

  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(handle, "cuGetProcAddress_v2"));
  using GetVersion = CUresult (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cuDriverGetVersion"));
  if (!get_proc || !get_version)
    return Error(Code::library_missing, printable(path) + " is older than CUDA 12 (no cuGetProcAddress_v2)");

  DriverLibrary lib;
  if (get_version(&lib.driver_version) != CUDA_SUCCESS)
    return Error(Code::driver_error, "cuDriverGetVersion failed");
  std::string missing;
#define FJ_DRIVER_LOAD(name, version)                                                                  \
  {                                                                                             \
    void* fn = nullptr;                                                                         \
    CUdriverProcAddressQueryResult status{};                                                    \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||  \
        status != CU_GET_PROC_ADDRESS_SUCCESS || !fn)                                           \
      missing += " " #name;                                                                     \
    else                                                                                        \
      lib.name = reinterpret_cast<decltype(lib.name)>(fn);                                      \
  }
  FLASHJIT_DRIVER_FUNCTIONS(FJ_DRIVER_LOAD)
#undef FJ_DRIVER_LOAD
  if (!missing.empty())
    return Error(Code::library_missing, "the CUDA driver lacks entry points:" + missing)
        .with("driver_version", std::to_string(lib.driver_version));
  const CUresult init = lib.cuInit(0);
  if (init != CUDA_SUCCESS) return lib.error(init, "cuInit(0) (is a GPU visible?)");
  return lib;
}

Result<const DriverLibrary*> DriverLibrary::get() {
  static std::once_flag once;
  static std::optional<Result<DriverLibrary>> loaded;
  std::call_once(once, [] { loaded.emplace(load(std::getenv(kLibcudaPathEnv))); });
  if (!loaded->ok()) return loaded->error();
  return &loaded->value();
}

Error DriverLibrary::error(CUresult r, const std::string& what) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return Error(Code::driver_error, what + " failed: " + (name ? name : std::to_string(int(r))) +
                                       (text ? std::string(" (") + text + ")" : ""));
}

}  // namespace flashjit
