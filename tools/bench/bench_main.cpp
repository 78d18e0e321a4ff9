// flashjit-bench: times forward variants (or, with --pass backward, backward variants) with CUDA
// events on the prefill grid of anchors.md (B*S tokens and Hq*D fixed, so every shape moves the
// same bytes) and prints TFLOP/s (the backward counted as 2.5 forwards, as FlashAttention does).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/attention_case.hpp"
#include "common/command_line.hpp"
#include "flashjit/catalog.hpp"

using namespace flashjit;

namespace {

// FLOPs of the key tiles a forward call visits under a window: per CTA of `rows` query rows, the
// tiles of `keys` keys its key range touches (templates/common/sequence.cuh key_range). Where a
// family's rows pack query heads (decode_sm80), the count is one of rows of one head: an estimate.
double visited_flops(const tools::CaseSpec& s, const TileShape& tile) {
  const std::int64_t bm = tile.rows, bn = tile.keys, off = s.seqlen_k - s.seqlen_q;
  const std::int64_t left = s.window->left, right = s.mask == Mask::causal ? 0 : s.window->right;
  double tiles = 0;
  for (std::int64_t m0 = 0; m0 < s.seqlen_q; m0 += bm) {
    std::int64_t hi = s.seqlen_k, lo = 0;
    if (s.mask == Mask::causal || right >= 0) hi = std::min(hi, m0 + bm + off + std::max<std::int64_t>(right, 0));
    if (left >= 0) lo = std::max<std::int64_t>(0, m0 + off - left);
    if (hi > lo) tiles += double((hi + bn - 1) / bn - lo / bn);
  }
  return 2.0 * s.batch * s.heads_q * tiles * double(bm * bn) * double(s.head_dim_qk + s.head_dim_v);
}

// The grid keeps heads * head dim at --hidden.
int query_heads(int hidden, int head_dim) { return std::max(1, hidden / head_dim); }

// What a case runs: the variant dispatch picks on `arch`, or with `family` that family's default
// for the call's shape (an error when it refuses the call).
Result<KernelVariant> variant_for(const Engine& engine, const AttentionArgs& args, const Arch& arch,
                                  const std::string& family) {
  if (!family.empty()) return family_variant(family, args, arch);
  auto plan = engine.plan(args, arch.name());
  if (!plan.ok()) return std::move(plan).error();
  return plan->variant;
}

// What a backward case runs: the variant backward() picks on `arch`, or with `family` (a backward
// family, named-only ones included) that family's default tiling for the same semantics.
Result<KernelVariant> backward_variant(const Engine& engine, const BackwardArgs& args, const Arch& arch,
                                       const std::string& family) {
  auto plan = engine.plan_backward(args, arch.name());
  if (!plan.ok()) return std::move(plan).error();
  if (family.empty()) return plan->variant;
  auto tilings = default_tilings(family, arch, plan->variant.semantics);
  if (!tilings.ok()) return std::move(tilings).error();
  return KernelVariant{family, plan->variant.semantics, tilings.value().front()};
}

// What --tilings names for `variant`: its own tiling (default), every candidate of its family
// (all), or a comma-separated list of that family's tilings.
Result<std::vector<Tiling>> tilings_to_time(const std::string& tilings, const KernelVariant& variant, const Arch& arch) {
  if (tilings == "default") return std::vector<Tiling>{variant.tiling};
  if (tilings == "all") return candidate_tilings(variant.family, arch, variant.semantics);
  std::vector<Tiling> list;
  for (std::stringstream ss(tilings); ss.good();) {
    std::string t;
    std::getline(ss, t, ',');
    auto parsed = parse_tiling(variant.family, t);
    if (!parsed.ok()) return std::move(parsed).error();
    list.push_back(parsed.value());
  }
  return list;
}

// "flashjit-bench: --option: rule" on stderr; the exit code of a bad command line.
int usage_error(const std::string& message) {
  std::fputs(tools::usage_message("flashjit-bench", message).c_str(), stderr);
  return tools::kExitUsage;
}

int run(int argc, char** argv) {
  CLI::App app{"flashjit-bench: time forward attention variants (CUDA events, warm-up, median)", "flashjit-bench"};
  std::vector<int> dims{64, 128}, seqs{4096, 16384};
  std::string dtype = "f16", tilings = "default", json_path, causal = "both", family_name, pass = "forward";
  int tokens = 16384, hidden = 2048, group = 1, warmup = 5, reps = 20;
  // Every count below divides or bounds a loop: each must be at least 1 (--warmup at least 0).
  app.add_option("--dims", dims, "head dims, comma separated")->delimiter(',')->check(tools::at_least(1))->capture_default_str();
  app.add_option("--seqs", seqs, "sequence lengths, comma separated")
      ->delimiter(',')
      ->check(tools::at_least(1))
      ->capture_default_str();
  app.add_option("--tokens", tokens, "batch * seq, fixed across the grid")->check(tools::at_least(1))->capture_default_str();
  app.add_option("--hidden", hidden, "heads * head dim, fixed across the grid")->check(tools::at_least(1))->capture_default_str();
  app.add_option("--group", group, "query heads per key/value head (GQA, MQA); must divide the query heads")
      ->check(tools::at_least(1))
      ->capture_default_str();
  app.add_option("--dtype", dtype, "f16, bf16, f32 or tf32")->check(tools::one_of({"f16", "bf16", "f32", "tf32"}))->capture_default_str();
  app.add_option("--causal", causal, "no, yes or both")->check(tools::one_of({"no", "yes", "both"}))->capture_default_str();
  app.add_option("--tilings", tilings, "default, all (every candidate), or a list like m128n64w4s2,m64n64w4s2")
      ->capture_default_str();
  app.add_option("--family", family_name,
                 "time this kernel family instead of the one dispatch picks (fa2_sm80, fa3_sm90; bwd_sm80, bwd_sm90 "
                 "with --pass backward)")
      ->check([](const std::string& name) {
        auto p = family_pass(name);
        return p.ok() ? std::string() : p.error().message();
      });
  app.add_option("--pass", pass, "forward, or backward (dq, dk, dv from the forward's o and lse)")
      ->check(tools::one_of({"forward", "backward"}))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed calls first")->check(tools::at_least(0))->capture_default_str();
  app.add_option("--reps", reps, "timed calls; the median is reported")->check(tools::at_least(1))->capture_default_str();
  app.add_option("--json", json_path, "also write results as JSON to this file");
  std::vector<std::int64_t> window;
  app.add_option("--window", window, "sliding window LEFT,RIGHT (-1: unbounded); TFLOP/s then count the key tiles visited")
      ->delimiter(',')
      ->expected(2);
  app.callback([&] {
    if (pass == "backward" && !window.empty()) throw CLI::ValidationError("--window", "is not timed for --pass backward");
    if (const char* family_is = family_name.empty() ? nullptr : pass_name(family_pass(family_name).value());
        family_is && family_is != pass)
      throw CLI::ValidationError("--family", family_name + " is a " + family_is + " family; --pass is " + pass);
    for (int d : dims)
      if (query_heads(hidden, d) % group != 0)
        throw CLI::ValidationError("--group", std::to_string(group) + " does not divide the " +
                                                  std::to_string(query_heads(hidden, d)) + " query heads of D=" + std::to_string(d));
  });
  if (auto code = tools::parse_command_line(app, argc, argv, std::cout, std::cerr)) return *code;

  auto gpu = tools::GpuContext::open(0);
  if (!gpu.ok()) {
    std::fprintf(stderr, "flashjit-bench needs a GPU: %s\n", gpu.error().to_string().c_str());
    return tools::kExitFailed;
  }
  auto engine = Engine::create().value();
  const auto& info = gpu->info();
  std::printf("device: %s (%s, %d SMs, L2 %lld MiB)\n", info.name.c_str(), info.arch.c_str(), info.sm_count,
              (long long)(info.l2_bytes >> 20));
  const Arch arch = Arch::parse(info.arch).value();

  tools::CaseSpec base;
  if (!window.empty()) base.window = Window{window[0], window[1]};
  const bool backward = pass == "backward";
  base.lse = backward;  // the backward reads the forward's LSE
  // --dtype is one of these four (checked as parsed).
  if (dtype == "f16") base.dtype = DType::f16;
  else if (dtype == "bf16") base.dtype = DType::bf16;
  else if (dtype == "f32") base.dtype = DType::f32;
  else if (dtype == "tf32") base.dtype = DType::f32, base.fp32_math = Fp32Math::tf32;
  std::vector<bool> masks;
  if (causal != "yes") masks.push_back(false);
  if (causal != "no") masks.push_back(true);

  nlohmann::json results = nlohmann::json::array();
  std::printf("%-5s %-6s %-6s %-4s %-14s %9s %9s\n", "D", "S", "causal", "B", "tiling", "ms", "TFLOP/s");
  for (int d : dims) {
    for (int s : seqs) {
      tools::CaseSpec spec = base;
      spec.batch = std::max(1, tokens / s);
      spec.seqlen_q = spec.seqlen_k = s;
      spec.heads_q = query_heads(hidden, d);  // --group divides it (checked as parsed)
      spec.heads_kv = spec.heads_q / group;
      spec.head_dim_qk = spec.head_dim_v = d;
      auto c = tools::AttentionCase::create(*gpu, spec, /*keep_host=*/false);
      if (!c.ok()) {
        std::fprintf(stderr, "%s\n", c.error().to_string().c_str());
        return tools::kExitFailed;
      }
      // Backward: gradients in [B, S, H, D] buffers of their own; dO is q (random, the same shape).
      std::vector<tools::DeviceBuffer> grads;
      if (backward)
        for (std::int64_t heads : {spec.heads_q, spec.heads_kv, spec.heads_kv}) {
          auto buf = tools::DeviceBuffer::allocate(gpu->driver(), std::size_t(spec.batch * s * heads * d) * dtype_size(base.dtype));
          if (!buf.ok()) return std::fprintf(stderr, "%s\n", buf.error().to_string().c_str()), tools::kExitFailed;
          grads.push_back(std::move(buf).value());
        }
      for (bool m : masks) {
        AttentionArgs args = c->args();
        args.mask = m ? Mask::causal : Mask::none;
        spec.mask = args.mask;
        BackwardArgs bargs;
        if (backward) {
          if (auto st = engine->forward(args); !st.ok())
            return std::fprintf(stderr, "%s\n", st.error().to_string().c_str()), tools::kExitFailed;
          bargs.forward = args;
          bargs.dout = args.q;
          bargs.dq = TensorView::bshd(grads[0].ptr(), base.dtype, spec.batch, s, spec.heads_q, d);
          bargs.dk = TensorView::bshd(grads[1].ptr(), base.dtype, spec.batch, s, spec.heads_kv, d);
          bargs.dv = TensorView::bshd(grads[2].ptr(), base.dtype, spec.batch, s, spec.heads_kv, d);
        }
        auto planned = backward ? backward_variant(*engine, bargs, arch, family_name) : variant_for(*engine, args, arch, family_name);
        if (!planned.ok() && !family_name.empty()) return usage_error("--family: " + planned.error().message());
        if (!planned.ok()) return std::fprintf(stderr, "%s\n", planned.error().to_string().c_str()), tools::kExitFailed;
        const KernelVariant& variant = planned.value();
        auto list = tilings_to_time(tilings, variant, arch);
        if (!list.ok()) return usage_error("--tilings: " + list.error().message());
        for (const Tiling& t : list.value()) {
          auto ms = tools::time_ms(
              gpu->driver(),
              [&](int) { return backward ? engine->backward_with_tiling(bargs, t) : engine->forward_with_tiling(args, t); },
              warmup, reps);
          constexpr double kBackwardFlops = 2.5;  // five products of the forward's two's size
          const double flops = spec.window ? visited_flops(spec, tile_shape(t).value())
                                           : tools::attention_flops(spec) * (backward ? kBackwardFlops : 1.0);
          const double tflops = ms.ok() ? flops / (ms.value() * 1e-3) / 1e12 : 0;
          std::printf("%-5d %-6d %-6s %-4lld %-14s %9.3f %9.1f%s\n", d, s, m ? "yes" : "no", (long long)spec.batch,
                      t.name().c_str(), ms.ok() ? ms.value() : 0.0, tflops, t == variant.tiling ? "  (default)" : "");
          if (!ms.ok()) std::printf("      failed: %s\n", ms.error().to_string().c_str());
          std::fflush(stdout);
          results.push_back({{"pass", pass}, {"D", d}, {"S", s}, {"B", spec.batch}, {"H", spec.heads_q}, {"H_kv", spec.heads_kv}, {"causal", m},
                             {"dtype", dtype}, {"tiling", t.name()}, {"default", t == variant.tiling},
                             {"ms", ms.ok() ? ms.value() : -1}, {"tflops", tflops}});
        }
      }
    }
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << nlohmann::json{{"device", info.name}, {"arch", info.arch}, {"results", results}}.dump(1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashjit-bench: %s\n", e.what());
    return 1;
  }
}
