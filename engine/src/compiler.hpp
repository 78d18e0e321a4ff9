// NVRTC compilation of one rendered kernel source to a cubin for a named arch. Needs no GPU.
#pragma once

#include <string>
#include <vector>

#include "flashjit/status.hpp"
#include "flashjit/variant.hpp"

namespace flashjit {

struct CompileRequest {
  // Shown in NVRTC diagnostics and recorded in the cubin: a variant's code_name(), never a
  // plan-only knob, so one cache key always gets the same bytes.
  std::string program_name;
  std::string source;        // rendered prelude + #include of the family's entry template
  Arch arch;
};

struct CompiledKernel {
  std::string cubin;
  std::string log;
  std::vector<std::string> options;
  double compile_ms = 0;
};

// The NVRTC options used for an arch; part of every cache key.
std::vector<std::string> compile_options(const Arch& arch);

// Embedded templates are passed as NVRTC headers, so nothing is read from disk. On failure the
// error carries the NVRTC log, the options and the program name.
Result<CompiledKernel> compile_cubin(const CompileRequest& request);

}  // namespace flashjit
