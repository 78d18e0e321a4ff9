#include "compiler.hpp"

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "base/printable.hpp"

#include "cudalib/nvrtc_library.hpp"
#include "template_store.hpp"

namespace flashjit {

std::vector<std::string> compile_options(const Arch& arch) {
  std::vector<std::string> o{"--gpu-architecture=" + arch.name(), "--std=c++17", "-DNDEBUG",
                             // Kernels are self-contained; NVRTC must not look for headers on this machine.
                             "--no-source-include",
                             // No runtime-API types, textures or device-side launches in NVRTC's builtin
                             // header: no kernel uses them; 0.5-0.7% less work a compile, same SASS
                             // (bench/NOTES.md entry 34).
                             "-minimal"};
  // Developer experiments (e.g. -DFJ_LAZY_RESCALE=1); options are part of every cache key.
  if (const char* extra = std::getenv("FLASHJIT_NVRTC_OPTIONS")) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) o.push_back(w);
  }
  return o;
}

Result<CompiledKernel> compile_cubin(const CompileRequest& request) {
  auto lib_r = NvrtcLibrary::get();
  if (!lib_r.ok()) return std::move(lib_r).error();
  const NvrtcLibrary& nv = *lib_r.value();

  const auto& store = TemplateStore::instance();
  std::vector<const char*> header_texts, header_names;
  for (const auto& t : store.all()) {
    header_texts.push_back(t.text);
    header_names.push_back(t.path);
  }
  CompiledKernel out;
  out.options = compile_options(request.arch);
  std::vector<const char*> opts;
  for (const auto& o : out.options) opts.push_back(o.c_str());

  const auto fail = [&](const std::string& what, nvrtcResult r) {
    return Error(Code::compile_failed, what + ": " + nv.nvrtcGetErrorString(r))
        .with("program", request.program_name)
        .with("arch", request.arch.name())
        .with("nvrtc_version", nv.version);
  };

  const auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog = nullptr;
  nvrtcResult r = nv.nvrtcCreateProgram(&prog, request.source.c_str(), (request.program_name + ".cu").c_str(),
                                        int(header_texts.size()), header_texts.data(), header_names.data());
  if (r != NVRTC_SUCCESS) return fail("nvrtcCreateProgram", r);
  struct Guard {
    const NvrtcLibrary& nv;
    nvrtcProgram* p;
    ~Guard() { nv.nvrtcDestroyProgram(p); }
  } guard{nv, &prog};

  const nvrtcResult compiled = nv.nvrtcCompileProgram(prog, int(opts.size()), opts.data());
  std::size_t log_size = 0;
  if (nv.nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    nv.nvrtcGetProgramLog(prog, out.log.data());
    out.log.resize(log_size - 1);
  }
  if (compiled != NVRTC_SUCCESS) {
    std::string opt_line;
    for (const auto& o : out.options) opt_line += printable(o) + " ";  // FLASHJIT_NVRTC_OPTIONS is outside text
    return fail("NVRTC failed to compile the kernel", compiled).with("options", opt_line).with("nvrtc_log", out.log);
  }
  std::size_t size = 0;
  if ((r = nv.nvrtcGetCUBINSize(prog, &size)) != NVRTC_SUCCESS) return fail("nvrtcGetCUBINSize", r);
  out.cubin.resize(size);
  if ((r = nv.nvrtcGetCUBIN(prog, out.cubin.data())) != NVRTC_SUCCESS) return fail("nvrtcGetCUBIN", r);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace flashjit
