// Compiles kernel variants the way the engine does (check_variant, render_source, NVRTC with the
// engine's options), with no GPU: the CPU suites' "every variant compiles" tests share it.
#pragma once

#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiler.hpp"
#include "kernel_family.hpp"
#include "kernel_source.hpp"

namespace flashjit::test {

using CompileJob = std::pair<KernelVariant, Arch>;
// What a test asks of a compiled kernel (its cubin, NVRTC's log) beyond compiling: "" when it
// passes, else why not.
using CubinCheck = std::function<std::string(const KernelVariant&, const CompiledKernel& compiled)>;

// Compiles `jobs` on two threads (CI has two cores); one line per failure, with its NVRTC log.
inline std::vector<std::string> compile_jobs(const std::vector<CompileJob>& jobs, const CubinCheck& check) {
  std::mutex mu;
  std::vector<std::string> failures;
  std::size_t next = 0;
  auto worker = [&] {
    for (;;) {
      std::size_t i;
      {
        std::lock_guard lock(mu);
        if (next == jobs.size()) return;
        i = next++;
      }
      const auto& [v, arch] = jobs[i];
      std::string failure;
      if (auto st = check_variant(v, arch); !st.ok()) {
        failure = st.error().to_string();
      } else if (auto r = compile_cubin({v.code_name(), render_source(*find_family(v.family), v), arch}); !r.ok()) {
        failure = r.error().to_string();
      } else {
        failure = check(v, r.value());
      }
      if (!failure.empty()) {
        std::lock_guard lock(mu);
        failures.push_back(v.name() + " for " + arch.name() + ": " + failure);
      }
    }
  };
  auto second = std::async(std::launch::async, worker);
  worker();
  second.get();
  return failures;
}

}  // namespace flashjit::test
