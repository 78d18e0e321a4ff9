// `flashjit tune`: the offline autotuner. Times every candidate tiling of each (variant, shape
// bucket) on this machine's GPU and stores the winners in the cache, where every later process
// on this device and arch finds them (EngineOptions::tune_mode offline or first-use).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/command_line.hpp"
#include "common/device.hpp"
#include "context.hpp"
#include "flashjit/flashjit.hpp"
#include "progress_bar.hpp"
#include "variant_flags_cli.hpp"
#include "variant_spec.hpp"
#include "workload.hpp"

namespace flashjit::tools {
namespace {

struct TuneOptions {
  VariantFlags flags;
  std::vector<std::string> sets;
  std::string workload;
  std::string pass;  // empty: each spec's own passes (a set's; forward for flags and files)
  std::vector<int> seqs{4096};
  int seq_k = 0;  // 0: each --seq
  std::int64_t batch_heads = kDefaultBatchXHeads;
  bool retune = false;
  bool json = false;
  int device = 0;
  std::string cache_dir;
};

int run(Context& ctx, const TuneOptions& o) {
  std::vector<TuneJob> jobs;
  if (!o.workload.empty()) {
    auto w = workload_from_file(o.workload);
    if (!w.ok()) return usage_error(ctx, "tune", w.error().message());
    jobs = std::move(w).value();
  }
  std::vector<VariantSpec> specs;
  for (const auto& name : o.sets) {
    auto s = variant_set(name);
    if (!s.ok()) return usage_error(ctx, "tune", s.error().message());
    specs.insert(specs.end(), s->begin(), s->end());
  }
  if (o.flags.any()) {
    auto s = variants_from_flags(o.flags);
    if (!s.ok()) return usage_error(ctx, "tune", s.error().message());
    specs.insert(specs.end(), s->begin(), s->end());
  }
  std::optional<std::vector<Pass>> passes;
  if (!o.pass.empty()) {
    auto p = parse_passes(o.pass, "--pass");
    if (!p.ok()) return usage_error(ctx, "tune", p.error().message());
    passes = std::move(p).value();
    std::vector<TuneJob> per_pass;  // a workload's shapes, once for each pass
    for (Pass pass : *passes)
      for (TuneJob job : jobs) job.pass = pass, per_pass.push_back(std::move(job));
    jobs = std::move(per_pass);
  }
  // The flags' ranges were checked as they were parsed (add_tune_command).
  for (const auto& spec : specs)
    for (Pass pass : passes ? *passes : spec.passes)
      for (int s : o.seqs) jobs.push_back({spec.semantics, s, o.seq_k > 0 ? o.seq_k : s, o.batch_heads, spec.origin, pass});
  if (jobs.empty()) return usage_error(ctx, "tune", "nothing to tune: give --set, --head-dim (with --dtype/--mask) or --workload");

  auto gpu = GpuContext::open(o.device);
  if (!gpu.ok()) return failure(ctx, "tune", "tuning needs a GPU", gpu.error());
  EngineOptions eo;
  if (!o.cache_dir.empty()) eo.cache_dir = o.cache_dir;
  auto engine = Engine::create(eo);
  if (!engine.ok()) return failure(ctx, "tune", "", engine.error());
  ctx.err << "tuning " << jobs.size() << " bucket(s) on " << gpu->info().name << " (" << gpu->info().arch << ")\n";

  ProgressStyle style;
  style.tty = ctx.err_is_tty;
  style.verb = "tuning";
  ProgressBar bar(ctx.err, jobs.size(), style);
  nlohmann::json results = nlohmann::json::array();
  int failures = 0;
  for (const TuneJob& job : jobs) {
    TuneRequest req;
    req.semantics = job.semantics;
    req.seqlen_q = job.seqlen_q, req.seqlen_k = job.seqlen_k, req.batch_x_heads = job.batch_x_heads;
    req.retune = o.retune;
    req.pass = job.pass;
    const std::string label = std::string(job.pass == Pass::backward ? "backward " : "") + job.semantics.name() +
                              " Sq" + std::to_string(job.seqlen_q) + " Sk" + std::to_string(job.seqlen_k) + " BH" +
                              std::to_string(job.batch_x_heads);
    const std::size_t ticket = bar.begin(label);
    auto r = engine.value()->tune(req);
    if (!r.ok()) {
      ++failures;
      bar.end(ticket, "FAILED " + label + ": " + r.error().to_string());
      results.push_back({{"shape", label}, {"error", r.error().to_string()}});
      continue;
    }
    const double tf = r->flops / (r->ms * 1e-3) / 1e12;
    const double dtf = r->default_ms ? r->flops / (*r->default_ms * 1e-3) / 1e12 : 0;
    char line[512];
    std::snprintf(line, sizeof line, "%-52s %-13s %7.1f TFLOP/s  default %-13s %7.1f TFLOP/s  x%.2f  %s", r->key.c_str(),
                  r->chosen.tiling.name().c_str(), tf, r->default_tiling.name().c_str(), dtf, dtf > 0 ? tf / dtf : 0.0,
                  r->reused ? "(stored)" : (format_duration(r->seconds)).c_str());
    bar.end(ticket, line);
    nlohmann::json cands = nlohmann::json::array();
    for (const auto& c : r->candidates) {
      nlohmann::json cj{{"tiling", c.tiling}, {"status", c.status}};
      if (c.ms) cj["ms"] = *c.ms;
      if (!c.reason.empty()) cj["reason"] = c.reason;
      cands.push_back(cj);
    }
    results.push_back({{"key", r->key}, {"pass", pass_name(job.pass)}, {"variant", r->chosen.name()},
                       {"tiling", r->chosen.tiling.name()}, {"ms", r->ms},
                       {"tflops", tf}, {"default_tiling", r->default_tiling.name()},
                       {"default_ms", r->default_ms ? nlohmann::json(*r->default_ms) : nlohmann::json()},
                       {"default_tflops", dtf}, {"seconds", r->seconds}, {"reused", r->reused},
                       {"store", r->store_path}, {"candidates", cands}});
  }
  bar.finish();
  if (o.json)
    ctx.out << nlohmann::json{{"device", gpu->info().name}, {"arch", gpu->info().arch}, {"results", results}}.dump(1) << "\n";
  return failures ? kExitFailed : kExitOk;
}

}  // namespace

void add_tune_command(CLI::App& app, Context& ctx) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* sub = app.add_subcommand("tune", "Time every candidate tiling on this GPU and store the fastest per shape bucket");
  sub->add_option("--set", o->sets, "Named variant set (see `flashjit warmup --help`)")->delimiter(',');
  add_variant_flags(sub, o->flags);
  const int max_seq = int(kMaxSeqLen);
  sub->add_option("--seq", o->seqs, "Query (and key) sequence lengths; comma list (default 4096)")
      ->delimiter(',')
      ->check(in_range(1, max_seq));
  sub->add_option("--seq-k", o->seq_k, "Key sequence length when it differs from --seq")->check(in_range(1, max_seq));
  sub->add_option("--batch-heads", o->batch_heads, "batch * query heads (default 64)")
      ->check(in_range(1, kMaxBatchXHeads));
  sub->add_option("--workload", o->workload,
                  "JSON list of shapes: objects with the variant fields (dtype, head_dim, mask, gqa, lse, ...) "
                  "and seqlen_q, seqlen_k, batch_x_heads");
  sub->add_option("--pass", o->pass,
                  "Which call to time: forward, backward (Engine::backward, flashjit_backward_v1) or both "
                  "(default: forward, except --set training's, which are both)");
  sub->add_flag("--retune", o->retune, "Time again even where a current result is stored");
  sub->add_option("--device", o->device, "CUDA device ordinal (default 0)")->check(at_least(0));
  sub->add_option("--cache-dir", o->cache_dir, "Cache root (default: $FLASHJIT_CACHE_DIR, else XDG, else ~/.cache/flashjit)");
  sub->add_flag("--json", o->json, "Print every bucket's result and candidate timings as JSON on stdout");
  sub->footer(
      "Shapes share a result within a bucket: powers of two of Sq, Sk and batch*heads.\n"
      "Example: flashjit tune --dtype f16,bf16 --head-dim 64,128 --mask none,causal --seq 4096,16384 --batch-heads 64");
  on_parsed(sub, ctx, [&ctx, o] { return run(ctx, *o); });
}

}  // namespace flashjit::tools
