#include "warmup_runner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "byte_size.hpp"

namespace flashjit::tools {
namespace {

WarmupResult compile_one(const Engine& engine, const WarmupJob& job, const RunnerOptions& options) {
  WarmupResult r;
  r.job = job;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = engine.compile(job.variant, job.arch.name());
  if (report.ok() && !report->disk_cache_problem.empty()) {
    r.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.disk_cache_problem = report->disk_cache_problem;
    r.error = "compiled, but not kept in the disk cache: " + report->disk_cache_problem;
    r.compile_ms = report->compile_ms;
    r.cubin_bytes = report->cubin_bytes;
    return r;
  }
  if (report.ok() && options.confirm) {
    if (auto st = options.confirm(job); !st.ok()) report = st.error();
  }
  r.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!report.ok()) {
    r.error = report.error().to_string();
    return r;
  }
  r.ok = true;
  r.compiler_log = report->nvrtc_log;
  r.from_disk = report->from_disk;
  r.compile_ms = report->compile_ms;
  r.cubin_bytes = report->cubin_bytes;
  return r;
}

std::string result_line(const WarmupResult& r) {
  char buf[96];
  if (!r.ok) std::snprintf(buf, sizeof buf, "FAILED after %.0f ms", r.wall_ms);
  else if (r.from_disk) std::snprintf(buf, sizeof buf, "cached    %s", format_bytes(r.cubin_bytes).c_str());
  else std::snprintf(buf, sizeof buf, "compiled  %s in %.0f ms", format_bytes(r.cubin_bytes).c_str(), r.compile_ms);
  return job_label(r.job) + "  " + buf;
}

}  // namespace

std::string job_label(const WarmupJob& job) { return job.arch.name() + " " + job.variant.name(); }

std::vector<WarmupResult> run_warmup(const Engine& engine, const std::vector<WarmupJob>& jobs,
                                     const RunnerOptions& options, ProgressBar& bar) {
  std::vector<WarmupResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      const std::size_t ticket = bar.begin(job_label(jobs[i]));
      results[i] = compile_one(engine, jobs[i], options);
      bar.end(ticket, result_line(results[i]));
      if (!results[i].ok) {
        std::string text = "  error: " + results[i].error;
        for (std::size_t p = 0; (p = text.find('\n', p)) != std::string::npos && p + 1 < text.size(); p += 3)
          text.insert(p + 1, "  ");  // indent the details under the item
        bar.print(text);
      }
    }
  };
  const int n = std::max(1, std::min<int>(options.threads, int(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return results;
}

}  // namespace flashjit::tools
