// `flashjit warmup`: compiles kernel variants for named archs into the disk cache, without a
// GPU, so that processes on those GPUs load kernels instead of compiling them: the forward's,
// and with --pass the backward's, whose entries Engine::backward() reads the same way.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "base/printable.hpp"
#include "byte_size.hpp"
#include "cache_location.hpp"
#include "common/command_line.hpp"
#include "context.hpp"
#include "flashjit/catalog.hpp"
#include "variant_flags_cli.hpp"
#include "warmup_runner.hpp"

namespace flashjit::tools {
namespace {

constexpr const char* kCommand = "warmup";

struct WarmupOptions {
  std::vector<std::string> archs;
  std::vector<std::string> sets;
  std::string pass;  // empty: each spec's own passes (a set's; forward for flags and files)
  VariantFlags flags;
  std::string variants_file;
  bool all_tilings = false;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::string cache_dir;
  bool json = false;
  bool dry_run = false;
  bool verbose = false;
};

// Lines from the engine and its disk cache, shown above the progress bar with --verbose.
struct LogSink {
  std::mutex mu;
  ProgressBar* bar = nullptr;
  std::vector<std::string> early;  // before the bar exists
  void operator()(const std::string& line) {
    std::lock_guard lock(mu);
    if (bar) bar->print("  [flashjit] " + line);
    else early.push_back(line);
  }
};

std::string plural(std::size_t n, const std::string& noun) {
  if (n == 1) return "1 " + noun;
  return std::to_string(n) + " " + (noun.back() == 'y' ? noun.substr(0, noun.size() - 1) + "ies" : noun + "s");
}

Result<std::vector<Arch>> parse_archs(const std::vector<std::string>& texts) {
  if (texts.empty()) return Error(Code::invalid_argument, "--arch is required, e.g. --arch sm_80,sm_90a");
  std::vector<Arch> archs;
  for (const auto& t : texts) {
    auto a = Arch::parse(t);
    if (!a.ok()) return Error(Code::invalid_argument, "--arch: " + a.error().message());
    if (auto f = families_serving(a.value(), Semantics{}); !f.ok())
      return Error(Code::invalid_argument, "--arch: " + printable(t) + " is not supported: " + f.error().message());
    bool dup = false;
    for (const auto& b : archs) dup |= b == a.value();
    if (!dup) archs.push_back(a.value());
  }
  return archs;
}

Result<std::vector<VariantSpec>> collect_specs(const WarmupOptions& o) {
  std::vector<VariantSpec> specs;
  auto append = [&](Result<std::vector<VariantSpec>> more) -> Status {
    if (!more.ok()) return std::move(more).error();
    for (auto& s : more.value()) specs.push_back(std::move(s));
    return {};
  };
  for (const auto& name : o.sets) FJ_TRY(append(variant_set(name)));
  if (o.flags.any()) FJ_TRY(append(variants_from_flags(o.flags)));
  if (!o.variants_file.empty()) FJ_TRY(append(variants_from_file(o.variants_file)));
  if (specs.empty())
    return Error(Code::invalid_argument,
                 "nothing to compile: name variants with --set NAME, with flags (--dtype f16 --head-dim 128 ...), "
                 "or with --variants FILE.json");
  if (!o.pass.empty()) {
    auto passes = parse_passes(o.pass, "--pass");
    if (!passes.ok()) return std::move(passes).error();
    for (auto& s : specs) s.passes = passes.value();
  }
  return specs;
}

// Confirms the kernel's entry file is there: the size cap may evict what an earlier job stored.
// (A failed store the engine reports itself.) A quick look, not a check of the entry's contents.
Status confirm_in_cache(const cache::DiskCache& disk, const WarmupJob& job, const char* when) {
  auto key = disk_cache_key(job.variant, job.arch);
  if (!key.ok()) return std::move(key).error();
  const std::string path = disk.entry_path({key->arch, key->name, key->content_hash});
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return {};
  return Error(Code::io_error, std::string(when) + ", but its cache entry is gone")
      .with("entry", path)
      .with("hint", "the store failed or the size cap (" + format_bytes(disk.max_bytes()) +
                        ", FLASHJIT_CACHE_MAX_BYTES) evicted it; rerun with --verbose for the cache's log");
}

nlohmann::json job_json(const WarmupJob& j) {
  return {{"name", j.variant.name()}, {"arch", j.arch.name()}, {"pass", pass_name(j.pass)}, {"family", j.variant.family},
          {"semantics", j.variant.semantics.name()}, {"tiling", j.variant.tiling.name()}};
}

// "12 kernels", "4 backward kernels", or "12 kernels (8 forward, 4 backward)": the backward's
// are named where there are any.
std::string kernel_count(const std::vector<WarmupJob>& jobs) {
  const auto n = std::size_t(std::count_if(jobs.begin(), jobs.end(), [](const WarmupJob& j) { return j.pass == Pass::backward; }));
  if (n == 0) return plural(jobs.size(), "kernel");
  if (n == jobs.size()) return plural(n, "backward kernel");
  return plural(jobs.size(), "kernel") + " (" + std::to_string(jobs.size() - n) + " forward, " + std::to_string(n) + " backward)";
}

int dry_run(Context& ctx, const WarmupOptions& o, const std::vector<WarmupJob>& jobs) {
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& j : jobs) list.push_back(job_json(j));
    ctx.out << nlohmann::json{{"dry_run", true}, {"variants", list}}.dump(2) << "\n";
  } else {
    for (const auto& j : jobs) ctx.out << job_label(j) << "\n";
    ctx.out << kernel_count(jobs) << " would be compiled (dry run: nothing was compiled or written)\n";
  }
  return kExitOk;
}

// The summary (JSON on stdout with --json) and the exit code.
int summarize(Context& ctx, const WarmupOptions& o, const cache::DiskCache& disk, const std::vector<Arch>& archs,
              int threads, const std::vector<WarmupResult>& results, double seconds) {
  std::size_t compiled = 0, cached = 0, failed = 0;
  for (const auto& r : results) (r.ok ? (r.from_disk ? cached : compiled) : failed)++;
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json j = job_json(r.job);
      j["from_disk"] = r.from_disk;
      j["compile_ms"] = r.compile_ms;
      j["cubin_bytes"] = r.cubin_bytes;
      if (!r.compiler_log.empty()) j["compiler_log"] = r.compiler_log;
      j["error"] = r.ok ? nlohmann::json(nullptr) : nlohmann::json(r.error);
      list.push_back(std::move(j));
    }
    nlohmann::json archs_json = nlohmann::json::array();
    for (const auto& a : archs) archs_json.push_back(a.name());
    ctx.out << nlohmann::json{{"cache_root", disk.root()}, {"archs", archs_json}, {"threads", threads},
                              {"compiled", compiled}, {"already_cached", cached}, {"failed", failed},
                              {"seconds", seconds}, {"variants", list}}
                   .dump(2)
            << "\n";
  }
  std::ostream& human = o.json ? ctx.err : ctx.out;
  char line[256];
  std::snprintf(line, sizeof line, "warmup: %s in %.1f s: %zu compiled, %zu already cached, %zu failed\n",
                plural(results.size(), "kernel").c_str(), seconds, compiled, cached, failed);
  human << line;
  for (const auto& r : results)
    if (!r.ok) human << "  failed: " << job_label(r.job) << " (error above)\n";
  // Kernels that compiled but are not in the cache: say so plainly, once per reason.
  std::vector<std::pair<std::string, std::size_t>> not_kept;
  for (const auto& r : results) {
    if (r.disk_cache_problem.empty()) continue;
    auto it = std::find_if(not_kept.begin(), not_kept.end(), [&](const auto& p) { return p.first == r.disk_cache_problem; });
    if (it == not_kept.end()) not_kept.emplace_back(r.disk_cache_problem, 1);
    else ++it->second;
  }
  for (const auto& [problem, n] : not_kept)
    human << "warmup: the disk cache was not used for " << plural(n, "kernel") << ": " << problem << "\n";
  if (auto sum = disk.scan(); sum.ok())
    human << "cache: " << disk.root() << " now holds " << plural(sum->entries, "entry") << ", " << format_bytes(sum->bytes)
          << " (cap " << format_bytes(disk.max_bytes()) << ")\n";
  return failed ? kExitFailed : kExitOk;
}

int run(Context& ctx, const WarmupOptions& o) {
  // Everything is checked before the cache folder is created or anything compiled.
  if (o.threads < 1) return usage_error(ctx, kCommand, "--threads must be at least 1, got " + std::to_string(o.threads));
  auto archs = parse_archs(o.archs);
  if (!archs.ok()) return usage_error(ctx, kCommand, archs.error().message());
  auto specs = collect_specs(o);
  if (!specs.ok()) return usage_error(ctx, kCommand, specs.error().message());
  if (const char* env = std::getenv("FLASHJIT_DISK_CACHE"); env && std::string(env) == "0")
    return usage_error(ctx, kCommand, "FLASHJIT_DISK_CACHE=0 turns the disk cache off, so warmup would keep nothing; unset it");
  auto root = resolve_root(o.cache_dir);
  if (!root.ok()) return failure(ctx, kCommand, "cache folder", root.error());

  auto sink = std::make_shared<LogSink>();
  EngineOptions eo;
  eo.cache_dir = root.value();
  eo.disk_cache = true;
  // A lock wait is shown even without --verbose: otherwise a stopped holder is minutes of silence.
  eo.log = [sink, verbose = o.verbose](const std::string& line) {
    if (verbose || is_lock_wait_notice(line)) (*sink)(line);
  };
  auto engine = Engine::create(eo);
  if (!engine.ok()) return failure(ctx, kCommand, "", engine.error());
  auto jobs = plan_warmup(specs.value(), archs.value(), o.all_tilings);
  if (!jobs.ok()) return usage_error(ctx, kCommand, jobs.error().message());
  if (o.dry_run) return dry_run(ctx, o, jobs.value());

  if (auto key = disk_cache_key(jobs->front().variant, jobs->front().arch); !key.ok())
    return failure(ctx, kCommand, "cannot compile", key.error());  // NVRTC missing: say it once
  auto disk = open_cache(root.value(), ctx.err, kCommand);
  if (!disk.ok()) return failure(ctx, kCommand, "cache folder refused", disk.error());

  std::string arch_list;
  for (const auto& a : archs.value()) arch_list += (arch_list.empty() ? "" : ", ") + a.name();
  const int threads = std::max(1, std::min<int>(o.threads, int(jobs->size())));
  ctx.err << "flashjit warmup: " << kernel_count(jobs.value()) << " for " << arch_list << " into " << disk->root() << " on "
          << threads << (threads == 1 ? " thread\n" : " threads\n");

  const auto t0 = std::chrono::steady_clock::now();
  ProgressStyle style;
  style.tty = ctx.err_is_tty;
  style.verb = "compiling";
  ProgressBar bar(ctx.err, jobs->size(), style);
  {
    std::lock_guard lock(sink->mu);
    sink->bar = &bar;
    for (const auto& line : sink->early) bar.print("  [flashjit] " + line);
  }
  RunnerOptions ro;
  ro.threads = threads;
  ro.confirm = [&](const WarmupJob& j) { return confirm_in_cache(disk.value(), j, "compiled"); };
  auto results = run_warmup(*engine.value(), jobs.value(), ro, bar);
  {
    std::lock_guard lock(sink->mu);
    sink->bar = nullptr;
  }
  bar.finish();
  // Later stores may have evicted earlier kernels when the size cap is smaller than the set.
  for (auto& r : results)
    if (r.ok)
      if (auto st = confirm_in_cache(disk.value(), r.job, "warmed"); !st.ok()) {
        r.ok = false;
        r.error = st.error().to_string();
        ctx.err << "FAILED " << job_label(r.job) << ":\n  " << r.error << "\n";
      }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  return summarize(ctx, o, disk.value(), archs.value(), threads, results, seconds);
}

std::string sets_help() {
  std::string h = "Named variant set (repeatable):";
  for (const auto& s : variant_sets()) h += std::string("\n  ") + s.name + ": " + s.description;
  return h;
}

// "dtype, fp32_math, head_dim_qk, ...": the semantics list's own names, so the help never lags it.
std::string semantics_field_names() {
  std::string names;
  Semantics{}.visit([&](const SemanticsField& f, const auto&) { names += (names.empty() ? "" : ", ") + std::string(f.name); });
  return names;
}

}  // namespace

void add_warmup_command(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<WarmupOptions>();
  CLI::App* sub = app.add_subcommand(
      "warmup", "Compile kernel variants for named GPU archs into the disk cache (no GPU needed)");
  sub->add_option("--arch", o->archs, "Target archs, repeatable or comma separated (sm_80, sm_86, sm_89, sm_90a, ...)")
      ->delimiter(',')
      ->type_name("ARCH");
  sub->add_option("--set", o->sets, sets_help())->delimiter(',')->type_name("NAME");
  sub->add_option("--pass", o->pass,
                  "Which passes' kernels: forward, backward (what Engine::backward and flashjit_backward_v1 run) or "
                  "both; for every variant named (default: forward, except --set training's, which are both)")
      ->check(one_of({"forward", "backward", "both"}))
      ->type_name("PASS");
  auto* g = sub->add_option_group("explicit variant", "One variant (or a cross product) given by flags");
  add_variant_flags(g, o->flags);
  sub->add_option("--variants", o->variants_file,
                  "JSON list of variant objects: the semantics fields (" + semantics_field_names() +
                      "; head_dim and lse are short forms) and family, tiling")
      ->type_name("FILE.json");
  sub->add_flag("--all-tilings", o->all_tilings,
                "Also compile every candidate tiling the autotuner may pick, so a tuned choice is always warm");
  sub->add_option("--threads", o->threads,
                  "Parallel compiles (default: the hardware's " + std::to_string(o->threads) + " threads)")
      ->type_name("N")
      ->check(at_least(1));
  add_cache_dir_option(sub, o->cache_dir);
  sub->add_flag("--json", o->json, "Print a machine-readable summary on stdout (one object per kernel)");
  sub->add_flag("--dry-run", o->dry_run, "List the kernels that would be compiled; compile and write nothing");
  sub->add_flag("--verbose", o->verbose, "Show the engine's and the disk cache's log lines");
  sub->footer("Example: flashjit warmup --arch sm_80,sm_90a --set prefill --all-tilings\n"
              "Training: flashjit warmup --arch sm_80,sm_90a --set training (forward with the LSE, and backward), or\n"
              "          flashjit warmup --arch sm_90a --pass both --dtype bf16 --head-dim 128 --mask causal --lse\n"
              "Exit code 1 if any kernel failed (each failure is printed with its NVRTC log), 2 for a bad "
              "command line (then nothing is compiled or written).");
  on_parsed(sub, ctx, [&ctx, o] { return run(ctx, *o); });
}

}  // namespace flashjit::tools
