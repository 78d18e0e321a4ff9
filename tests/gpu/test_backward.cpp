// The backward pass on the GPU (bwd_sm80): dq, dk and dv against a float64 CPU reference computed
// here from the same fp16/bf16/fp32 inputs, on small odd shapes (no tile divides them), causal or not,
// both 16-bit dtypes and fp32 (exact and tf32), head dims 64 and 128, sinks, odd ones, wide ones (160, 192, 256) and Dqk != Dv
// (MLA's 192/128, odd pairs each side of 128), gradients in [B,S,H,D] or [B,H,S,D]
// storage, GQA/MQA (4:1, 16:1), sliding windows narrower and wider than the sequence, softcap
// with large logits, ALiBi. Each case
// runs three times: on a caller workspace full of garbage, then twice on the engine's pool, and
// every run must pass (nothing left over from an earlier call). dk and dv must be bit-identical
// between runs; dq is summed with atomics in any order, so only its error bound is checked, except
// in deterministic mode, where dq must be bit-identical too.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "base/host_float.hpp"
#include "gpu_fixture.hpp"
#include "kernel_family.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;

namespace {

// The bound on each gradient's relative L2 error is this many times the error of merely
// rounding the exact gradient to the dtype: the output's own rounding, P and dS rounded to 16
// bits before the products that use them (each about one output rounding), and headroom.
constexpr double kRoundingsAllowed = 4;
// fp32 in tf32 mode: the same bound, with rounding to tf32 (what each product rounds its operands
// to) in place of the dtype's. Exact fp32 (3xTF32 products): the forward's exact-fp32 bound
// (tests/gpu/gpu_fixture.hpp); tests/templates/bwd_emulate.py measures 2e-7 to 2.3e-6 on the CPU.
constexpr double kExactFp32Bound = 1e-5;
constexpr double kSinksBound = 1e-2;  // dL/dsinks' relative error, as tests/templates/emu/bwd_emu_main.cpp's
constexpr unsigned char kGarbage = 0xFF;  // 0xFFFF is a NaN in f16 and bf16, 0xFFFFFFFF in fp32
constexpr std::uint32_t kSeed = 2024;

struct BwdCase {
  DType dtype = DType::f16;
  Fp32Math fp32_math = Fp32Math::exact;  // fp32 only
  std::int64_t B = 2, H = 3, Sq = 77, Sk = 130, D = 64;  // D: head dim of q and k (and v unless Dv)
  std::int64_t Dv = 0;   // head dim of v, o, dO; 0: D
  std::int64_t Hkv = 0;  // key/value heads; 0: H (no GQA)
  bool causal = false;
  bool bhsd_grads = false;  // dq, dk, dv in [B,H,S,D] storage
  std::optional<Window> window;
  std::optional<float> softcap;
  std::optional<float> softmax_scale;  // unset: 1/sqrt(D)
  bool alibi = false;                  // slopes kAlibiSlope0 / 2^h, one row for the batch
  bool deterministic = false;          // dq summed in a fixed order: bit-identical from call to call
  bool sinks = false;                  // a sink logit a q-head (normal values), and its gradient
  std::int64_t kv_heads() const { return Hkv ? Hkv : H; }
  std::int64_t dv() const { return Dv ? Dv : D; }
  std::string describe() const {
    std::string out = std::string(dtype_name(dtype)) + (dtype == DType::f32 ? std::string("-") + fp32_math_name(fp32_math) : "") + " B" + std::to_string(B) + " H" + std::to_string(H);
    if (Hkv) out += "/" + std::to_string(Hkv);
    out += " Sq" + std::to_string(Sq) + " Sk" + std::to_string(Sk) + " D" + std::to_string(D) +
           (Dv ? "/" + std::to_string(Dv) : "") + (causal ? " causal" : " none");
    if (window) out += " win" + std::to_string(window->left) + "," + std::to_string(window->right);
    if (softcap) out += " cap" + std::to_string(int(*softcap));
    if (softmax_scale) out += " scale" + std::to_string(*softmax_scale).substr(0, 4);
    if (alibi) out += " alibi";
    if (sinks) out += " sinks";
    return out + (bhsd_grads ? " grads-bhsd" : " grads-bshd");
  }
};

// ALiBi's slopes: head h gets kAlibiSlope0 / 2^h (the paper's geometric series, shifted so the
// first head's bias is strong enough to matter over the test's 130 keys).
constexpr double kAlibiSlope0 = 0.5;
float alibi_slope(std::int64_t h) { return float(kAlibiSlope0 / double(1ll << h)); }

// Host tensors, [B,S,H,D] row-major (D: q, k, dq, dk; Dv: v, o, dO, dv), holding the values the
// kernels see (already rounded).
struct HostProblem {
  BwdCase c;
  std::vector<float> q, k, v, dout, o, lse;  // o rounded to the dtype, lse fp32 [B,H,Sq]
  std::vector<float> sinks;                  // [H] with sinks
  std::vector<double> dq, dk, dv, dsinks;    // the exact gradients, [B,S,H,D] ([H]: dsinks)
};

std::int64_t at(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t S, std::int64_t H, std::int64_t D) {
  return ((b * S + s) * H + h) * D;
}

// The forward (o, lse) and the backward in float64, straight from the definitions. With
// z = the logit of (i, j): scale q.k, or cap tanh(scale q.k / cap) with softcap, minus ALiBi's
// slope |i + Sk - Sq - j|, over the keys row i sees (causal diagonal, window):
//   P = exp(z - lse), o = P v, dP = dO.v, D = rowsum(P dP) (= rowsum(dO o)), dS = P (dP - D),
//   dq = dS dz/ds k, dk = dS^T dz/ds q (summed over the q-heads sharing the KV head), dv = P^T dO,
// where dz/ds = scale, times 1 - tanh^2 with softcap.
HostProblem make_problem(const BwdCase& c) {
  HostProblem p;
  p.c = c;
  std::mt19937 rng(kSeed + std::uint32_t(c.D + c.Sq + 7 * c.causal + 3 * int(c.dtype) + 11 * c.Hkv + 13 * c.Dv));
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<float>& x, std::int64_t n) {
    x.resize(std::size_t(n));
    for (float& e : x) e = quantize(normal(rng), c.dtype);
  };
  const std::int64_t Hkv = c.kv_heads(), group = c.H / Hkv;
  const std::int64_t Dv = c.dv(), nq = c.B * c.Sq * c.H * c.D, nk = c.B * c.Sk * Hkv * c.D;
  const std::int64_t no = c.B * c.Sq * c.H * Dv, nv = c.B * c.Sk * Hkv * Dv;
  fill(p.q, nq), fill(p.k, nk), fill(p.v, nv), fill(p.dout, no);
  p.o.assign(std::size_t(no), 0.f);
  p.lse.assign(std::size_t(c.B * c.H * c.Sq), 0.f);
  p.dq.assign(std::size_t(nq), 0.0), p.dk.assign(std::size_t(nk), 0.0), p.dv.assign(std::size_t(nv), 0.0);
  p.dsinks.assign(std::size_t(c.H), 0.0);
  if (c.sinks)
    for (std::int64_t h = 0; h < c.H; ++h) p.sinks.push_back(normal(rng));
  const double scale = c.softmax_scale ? double(*c.softmax_scale) : 1.0 / std::sqrt(double(c.D));
  const std::int64_t offset = c.Sk - c.Sq;  // the bottom-right diagonal
  std::vector<double> prob(std::size_t(c.Sk)), dp(std::size_t(c.Sk)), dzds(std::size_t(c.Sk));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < c.Sq; ++i) {
        const std::int64_t hk = h / group;
        const float* qi = &p.q[std::size_t(at(b, i, h, c.Sq, c.H, c.D))];
        const float* doi = &p.dout[std::size_t(at(b, i, h, c.Sq, c.H, Dv))];
        std::int64_t first = 0, last = c.Sk - 1;
        if (c.causal) last = std::min(last, i + offset);
        if (c.window && c.window->left >= 0) first = std::max(first, i + offset - c.window->left);
        if (c.window && c.window->right >= 0 && !c.causal) last = std::min(last, i + offset + c.window->right);
        // With sinks, the head's sink joins the row's max and denominator (never its keys).
        const double sink = c.sinks ? double(p.sinks[std::size_t(h)]) : -std::numeric_limits<double>::infinity();
        double m = sink;
        for (std::int64_t j = first; j <= last; ++j) {
          const float* kj = &p.k[std::size_t(at(b, j, hk, c.Sk, Hkv, c.D))];
          double s = 0;
          for (std::int64_t d = 0; d < c.D; ++d) s += double(qi[d]) * kj[d];
          double z = s * scale, grad = scale;
          if (c.softcap) {
            const double t = std::tanh(z / *c.softcap);
            z = *c.softcap * t, grad = scale * (1 - t * t);
          }
          if (c.alibi) z -= double(alibi_slope(h)) * double(std::llabs(i + offset - j));
          prob[std::size_t(j)] = z;
          dzds[std::size_t(j)] = grad;
          m = std::max(m, z);
        }
        float& lse = p.lse[std::size_t((b * c.H + h) * c.Sq + i)];
        if (last < first && !c.sinks) {  // a row that sees no key: o = 0, lse = -inf, no gradient
          lse = -std::numeric_limits<float>::infinity();
          continue;
        }
        double sum = c.sinks ? std::exp(sink - m) : 0.0;
        for (std::int64_t j = first; j <= last; ++j) sum += std::exp(prob[std::size_t(j)] - m);
        const double row_lse = m + std::log(sum);
        lse = float(row_lse);
        double dsum = 0;
        std::vector<double> oi(std::size_t(Dv), 0.0);
        for (std::int64_t j = first; j <= last; ++j) {
          const float* vj = &p.v[std::size_t(at(b, j, hk, c.Sk, Hkv, Dv))];
          prob[std::size_t(j)] = std::exp(prob[std::size_t(j)] - row_lse);
          double d = 0;
          for (std::int64_t e = 0; e < Dv; ++e) d += double(doi[e]) * vj[e], oi[std::size_t(e)] += prob[std::size_t(j)] * vj[e];
          dp[std::size_t(j)] = d;
          dsum += prob[std::size_t(j)] * d;
        }
        for (std::int64_t e = 0; e < Dv; ++e)
          p.o[std::size_t(at(b, i, h, c.Sq, c.H, Dv) + e)] = quantize(float(oi[std::size_t(e)]), c.dtype);
        if (c.sinks) p.dsinks[std::size_t(h)] -= std::exp(sink - row_lse) * dsum;  // dL/dsink = -P(sink) D
        for (std::int64_t j = first; j <= last; ++j) {
          const double ds = prob[std::size_t(j)] * (dp[std::size_t(j)] - dsum) * dzds[std::size_t(j)];
          const std::int64_t kj = at(b, j, hk, c.Sk, Hkv, c.D), qi_at = at(b, i, h, c.Sq, c.H, c.D);
          for (std::int64_t e = 0; e < c.D; ++e) {
            p.dq[std::size_t(qi_at + e)] += ds * p.k[std::size_t(kj + e)];
            p.dk[std::size_t(kj + e)] += ds * qi[e];
          }
          const std::int64_t vj_at = at(b, j, hk, c.Sk, Hkv, Dv);
          for (std::int64_t e = 0; e < Dv; ++e) p.dv[std::size_t(vj_at + e)] += prob[std::size_t(j)] * doi[e];
        }
      }
  return p;
}

// A [B,S,H,D] host tensor in a device buffer of the dtype.
tools::DeviceBuffer upload(const std::vector<float>& x, DType dt) {
  if (dt == DType::f32) {
    auto buf = tools::DeviceBuffer::allocate(Fixture::get().gpu.driver(), x.size() * sizeof(float)).value();
    REQUIRE(buf.upload(x.data(), x.size() * sizeof(float)).ok());
    return buf;
  }
  std::vector<std::uint16_t> bits(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) bits[i] = dt == DType::f16 ? float_to_f16(x[i]) : float_to_bf16(x[i]);
  auto buf = tools::DeviceBuffer::allocate(Fixture::get().gpu.driver(), bits.size() * 2).value();
  REQUIRE(buf.upload(bits.data(), bits.size() * 2).ok());
  return buf;
}

struct Error {
  double rel_l2 = 0, rounding = 0;  // the result's error; the exact gradient's rounding to the dtype
  std::int64_t non_finite = 0;
};

// A gradient read back through its view, against the exact one ([B,S,H,D]); `bits` receives the
// buffer's bytes as 16-bit words (an fp32 value is two). `rounding` is that of the dtype, or of
// tf32 with `tf32`.
Error compare(const tools::DeviceBuffer& buf, const TensorView& view, const std::vector<double>& ref, DType dt, bool tf32,
              std::vector<std::uint16_t>& bits) {
  bits.assign(buf.bytes() / 2, 0);
  REQUIRE(buf.download(bits.data(), buf.bytes()).ok());
  Error e;
  double num = 0, den = 0, rnd = 0;
  const std::int64_t B = view.shape[0], S = view.shape[1], H = view.shape[2], D = view.shape[3];
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t d = 0; d < D; ++d) {
          const std::size_t i = std::size_t(b * view.stride[0] + s * view.stride[1] + h * view.stride[2] + d * view.stride[3]);
          double got;
          if (dt == DType::f32) {
            float f;
            std::memcpy(&f, &bits[2 * i], sizeof f);
            got = f;
          } else {
            got = dt == DType::f16 ? f16_to_float(bits[i]) : bf16_to_float(bits[i]);
          }
          const double want = ref[std::size_t(at(b, s, h, S, H, D) + d)];
          if (!std::isfinite(got)) ++e.non_finite;
          num += (got - want) * (got - want);
          den += want * want;
          const double r = (tf32 ? round_to_tf32(float(want)) : quantize(float(want), dt)) - want;
          rnd += r * r;
        }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.rounding = den > 0 ? std::sqrt(rnd / den) : 0;
  return e;
}

// The arguments of case c over its buffers (q, k, v, o, lse, dout, dq, dk, dv, alibi slopes, sinks,
// dsinks in order).
void set_views(const BwdCase& c, const void* const (&at)[12], BackwardArgs& a) {
  const std::int64_t Hkv = c.kv_heads();
  AttentionArgs& f = a.forward;
  f.q = TensorView::bshd(at[0], c.dtype, c.B, c.Sq, c.H, c.D);
  f.k = TensorView::bshd(at[1], c.dtype, c.B, c.Sk, Hkv, c.D);
  f.v = TensorView::bshd(at[2], c.dtype, c.B, c.Sk, Hkv, c.dv());
  f.o = TensorView::bshd(at[3], c.dtype, c.B, c.Sq, c.H, c.dv());
  f.lse = LseView::contiguous(static_cast<float*>(const_cast<void*>(at[4])), c.B, c.H, c.Sq);
  f.mask = c.causal ? Mask::causal : Mask::none;
  f.fp32_math = c.fp32_math;
  if (c.sinks) f.sinks = static_cast<const float*>(at[10]), a.dsinks = static_cast<float*>(const_cast<void*>(at[11]));
  f.window = c.window;
  f.softcap = c.softcap;
  f.softmax_scale = c.softmax_scale;
  if (c.alibi) f.alibi = Alibi{static_cast<const float*>(at[9]), 0};
  a.dout = TensorView::bshd(at[5], c.dtype, c.B, c.Sq, c.H, c.dv());
  a.deterministic = c.deterministic;
  auto grad = c.bhsd_grads ? &TensorView::bhsd : &TensorView::bshd;
  a.dq = grad(at[6], c.dtype, c.B, c.Sq, c.H, c.D);
  a.dk = grad(at[7], c.dtype, c.B, c.Sk, Hkv, c.D);
  a.dv = grad(at[8], c.dtype, c.B, c.Sk, Hkv, c.dv());
}

struct DeviceProblem {
  tools::DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv, alibi, sinks, dsinks;
  BackwardArgs args;
};

void make_device(const HostProblem& p, DeviceProblem& d) {
  const BwdCase& c = p.c;
  const DriverLibrary& drv = Fixture::get().gpu.driver();
  d.q = upload(p.q, c.dtype), d.k = upload(p.k, c.dtype), d.v = upload(p.v, c.dtype);
  d.o = upload(p.o, c.dtype), d.dout = upload(p.dout, c.dtype);
  d.lse = tools::DeviceBuffer::allocate(drv, p.lse.size() * sizeof(float)).value();
  REQUIRE(d.lse.upload(p.lse.data(), p.lse.size() * sizeof(float)).ok());
  std::vector<float> slopes(std::size_t(c.H));
  for (std::int64_t h = 0; h < c.H; ++h) slopes[std::size_t(h)] = alibi_slope(h);
  d.alibi = tools::DeviceBuffer::allocate(drv, slopes.size() * sizeof(float)).value();
  REQUIRE(d.alibi.upload(slopes.data(), slopes.size() * sizeof(float)).ok());
  const std::size_t elem = dtype_size(c.dtype);
  d.dq = tools::DeviceBuffer::allocate(drv, p.q.size() * elem).value();
  d.dk = tools::DeviceBuffer::allocate(drv, p.k.size() * elem).value();
  d.dv = tools::DeviceBuffer::allocate(drv, p.v.size() * elem).value();
  const std::size_t heads_bytes = std::size_t(c.H) * sizeof(float);
  d.sinks = tools::DeviceBuffer::allocate(drv, heads_bytes).value();
  d.dsinks = tools::DeviceBuffer::allocate(drv, heads_bytes).value();
  if (c.sinks) REQUIRE(d.sinks.upload(p.sinks.data(), heads_bytes).ok());
  set_views(c, {d.q.ptr(), d.k.ptr(), d.v.ptr(), d.o.ptr(), d.lse.ptr(), d.dout.ptr(), d.dq.ptr(), d.dk.ptr(), d.dv.ptr(), d.alibi.ptr(),
                d.sinks.ptr(), d.dsinks.ptr()},
            d.args);
}

// Poisons the gradients, runs the backward (on `tiling` where given, else the default), checks
// each against the bound; returns dk's and dv's bits (and dq's in deterministic mode).
// `engine`: the fixture's where null.
std::vector<std::uint16_t> run_once(const HostProblem& p, DeviceProblem& d, const char* run, const Tiling* tiling = nullptr,
                                    Engine* engine = nullptr) {
  Fixture& f = Fixture::get();
  if (!engine) engine = f.engine.get();
  INFO(run);
  for (auto* b : {&d.dq, &d.dk, &d.dv, &d.dsinks}) REQUIRE(b->fill_bytes(kGarbage).ok());
  auto st = tiling ? engine->backward_with_tiling(d.args, *tiling, nullptr) : engine->backward(d.args, nullptr);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  std::vector<std::uint16_t> kept, bits;
  const std::pair<const char*, std::pair<const tools::DeviceBuffer*, std::pair<const TensorView*, const std::vector<double>*>>> grads[] = {
      {"dq", {&d.dq, {&d.args.dq, &p.dq}}}, {"dk", {&d.dk, {&d.args.dk, &p.dk}}}, {"dv", {&d.dv, {&d.args.dv, &p.dv}}}};
  std::string line;
  for (const auto& named : grads) {  // not a structured binding: clang's C++17 cannot capture one in INFO's lambda
    const char* name = named.first;
    const auto& g = named.second;
    const bool fp32 = p.c.dtype == DType::f32, tf32 = fp32 && p.c.fp32_math == Fp32Math::tf32;
    const Error e = compare(*g.first, *g.second.first, *g.second.second, p.c.dtype, tf32, bits);
    const double bound = fp32 && !tf32 ? kExactFp32Bound : kRoundingsAllowed * e.rounding;
    INFO(name << ": rel_l2 " << e.rel_l2 << ", bound " << bound << ", non-finite " << e.non_finite);
    CHECK(e.non_finite == 0);
    CHECK(e.rel_l2 <= bound);
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.2e (%.1fx rounding)", name, e.rel_l2, e.rounding > 0 ? e.rel_l2 / e.rounding : 0.0);
    line += buf;
    if (p.c.deterministic || std::string(name) != "dq") kept.insert(kept.end(), bits.begin(), bits.end());
  }
  if (p.c.sinks) {
    std::vector<float> got(std::size_t(p.c.H));
    REQUIRE(d.dsinks.download(got.data(), got.size() * sizeof(float)).ok());
    double num = 0, den = 0;
    for (std::size_t h = 0; h < got.size(); ++h)
      num += (got[h] - p.dsinks[h]) * (got[h] - p.dsinks[h]), den += p.dsinks[h] * p.dsinks[h];
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    INFO("dsinks: rel_l2 " << rel);
    CHECK(rel < kSinksBound);
    char buf[48];
    std::snprintf(buf, sizeof buf, " dsinks %.2e", rel);
    line += buf;
  }
  std::printf("  %-52s %-8s%s\n", p.c.describe().c_str(), run, line.c_str());
  return kept;
}

// The case on a garbage-filled caller workspace, then twice on the engine's pool.
void check_case(const BwdCase& c) {
  Fixture& f = Fixture::get();
  INFO(c.describe());
  const HostProblem p = make_problem(c);
  DeviceProblem d;
  make_device(p, d);
  auto bytes = f.engine->backward_workspace_size(d.args, nullptr);
  REQUIRE_MESSAGE(bytes.ok(), (bytes.ok() ? "" : bytes.error().to_string()));
  auto ws = tools::DeviceBuffer::allocate(f.gpu.driver(), std::max<std::uint64_t>(1, bytes.value())).value();
  REQUIRE(ws.fill_bytes(kGarbage).ok());
  d.args.workspace = {ws.ptr(), bytes.value()};
  (void)run_once(p, d, "caller");
  d.args.workspace = {};
  const auto first = run_once(p, d, "pool");
  const auto second = run_once(p, d, "again");
  CHECK_MESSAGE(first == second, (c.deterministic ? "dq, dk and dv" : "dk and dv") << " must be bit-identical from call to call");
}

// Case c on every candidate tiling of its variant on this GPU (the autotuner's choices), each
// compiled on every core first, then run once on the engine's pool.
void check_every_tiling(const BwdCase& c) {
  Fixture& f = Fixture::get();
  INFO(c.describe());
  const std::string arch = f.gpu.info().arch;
  const HostProblem p = make_problem(c);
  DeviceProblem d;
  make_device(p, d);
  auto plan = f.engine->plan_backward(d.args, arch);
  REQUIRE_MESSAGE(plan.ok(), (plan.ok() ? "" : plan.error().to_string()));
  const KernelVariant variant = plan->variant;
  const auto tilings = find_family(variant.family)->candidate_tilings(Arch::parse(arch).value(), variant.semantics);
  CHECK(!tilings.empty());
  std::vector<KernelVariant> variants;
  for (const Tiling& t : tilings) variants.push_back({variant.family, variant.semantics, t});
  gpu_test::compile_variants(variants);
  for (const Tiling& t : tilings) (void)run_once(p, d, t.name().c_str(), &t);
}

// The views of `c` at fake addresses, for planning only.
void fake_views(const BwdCase& c, BackwardArgs& a) {
  auto at_slot = [](std::uintptr_t slot) { return reinterpret_cast<const void*>(slot << 32); };
  set_views(c, {at_slot(1), at_slot(2), at_slot(3), at_slot(4), at_slot(5), at_slot(6), at_slot(7), at_slot(8), at_slot(9), at_slot(10),
                at_slot(11), at_slot(12)},
            a);
}

// Compiles the cases' variants on every core first (each case then only loads its module).
void precompile(const std::vector<BwdCase>& cases) {
  Fixture& f = Fixture::get();
  const std::string arch = f.gpu.info().arch;
  std::vector<KernelVariant> variants;
  std::set<std::string> seen;
  for (const BwdCase& c : cases) {
    // Planning reads shapes, dtypes and strides only: any well-separated aligned addresses do.
    BackwardArgs a;
    fake_views(c, a);
    if (auto plan = f.engine->plan_backward(a, arch); plan.ok() && seen.insert(plan->variant.name()).second)
      variants.push_back(plan->variant);
  }
  gpu_test::compile_variants(variants);
}

}  // namespace

TEST_CASE("backward: dq, dk, dv match float64 on odd shapes (f16/bf16, D 64/128, causal or not), twice, on garbage workspace") {
  std::vector<BwdCase> cases;
  for (DType dt : {DType::f16, DType::bf16})
    for (std::int64_t d : {64, 128})
      for (bool causal : {false, true}) {
        BwdCase c;
        c.dtype = dt, c.D = d, c.causal = causal;
        c.bhsd_grads = (d == 128) != causal;
        cases.push_back(c);
      }
  // More queries than keys: with the causal mask the first 53 rows see no key (LSE -inf).
  for (DType dt : {DType::f16, DType::bf16}) {
    BwdCase c;
    c.dtype = dt, c.Sq = 130, c.Sk = 77, c.causal = true, c.D = dt == DType::f16 ? 64 : 128;
    cases.push_back(c);
  }
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

TEST_CASE("backward: GQA/MQA, windows, softcap, ALiBi and odd head dims match float64, twice, on garbage workspace") {
  std::vector<BwdCase> cases;
  auto add = [&](DType dt, std::int64_t d, bool causal, auto&& set) {
    BwdCase c;
    c.dtype = dt, c.D = d, c.causal = causal;
    set(c);
    cases.push_back(c);
  };
  // GQA 4:1 and 16:1 (MQA): dk and dv summed over the group in one CTA.
  add(DType::f16, 64, false, [](BwdCase& c) { c.H = 8, c.Hkv = 2; });
  add(DType::bf16, 128, true, [](BwdCase& c) { c.H = 8, c.Hkv = 2, c.bhsd_grads = true; });
  add(DType::bf16, 64, true, [](BwdCase& c) { c.B = 1, c.H = 16, c.Hkv = 1; });
  add(DType::f16, 128, false, [](BwdCase& c) { c.B = 1, c.H = 16, c.Hkv = 1; });
  // Windows narrower than the sequence (both sides, left only with causal, Sq > Sk) and wider.
  add(DType::f16, 64, false, [](BwdCase& c) { c.window = Window{16, 8}; });
  add(DType::bf16, 128, true, [](BwdCase& c) { c.window = Window{20, 0}; });
  add(DType::f16, 64, true, [](BwdCase& c) { c.Sq = 130, c.Sk = 77, c.window = Window{10, 0}; });
  add(DType::bf16, 64, false, [](BwdCase& c) { c.window = Window{500, 500}; });
  add(DType::f16, 128, false, [](BwdCase& c) { c.window = Window{Window::kUnbounded, 3}; });
  // Softcap with large logits: scale 1 puts q.k at about +-sqrt(D), well into tanh's flat part.
  add(DType::f16, 64, false, [](BwdCase& c) { c.softcap = 5.f, c.softmax_scale = 1.f; });
  add(DType::bf16, 128, true, [](BwdCase& c) { c.softcap = 30.f, c.softmax_scale = 1.f; });
  // ALiBi, alone and with a window.
  add(DType::f16, 64, true, [](BwdCase& c) { c.alibi = true; });
  add(DType::bf16, 128, false, [](BwdCase& c) { c.alibi = true, c.window = Window{40, 40}; });
  // Everything at once.
  add(DType::bf16, 96, true, [](BwdCase& c) {
    c.H = 8, c.Hkv = 2, c.window = Window{30, 0}, c.softcap = 20.f, c.alibi = true;
  });
  // Head dims padded to 16 (1, 33 and 40 also take narrower copies), with and without a mask.
  for (std::int64_t d : {1, 33, 40, 72, 96, 112})
    add(d % 2 ? DType::f16 : DType::bf16, d, d > 64, [](BwdCase&) {});
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

TEST_CASE("backward: wide head dims (160, 192, 256) and Dqk != Dv match float64, twice, on garbage workspace") {
  std::vector<BwdCase> cases;
  auto add = [&](DType dt, std::int64_t d, std::int64_t dv, bool causal, auto&& set) {
    BwdCase c;
    c.dtype = dt, c.D = d, c.Dv = dv == d ? 0 : dv, c.causal = causal;
    set(c);
    cases.push_back(c);
  };
  auto none = [](BwdCase&) {};
  // FlashAttention-2's wide head dims, both dtypes and masks.
  add(DType::f16, 160, 160, false, none);
  add(DType::bf16, 160, 160, true, none);
  add(DType::bf16, 192, 192, false, none);
  add(DType::f16, 192, 192, true, none);
  add(DType::f16, 256, 256, false, none);
  add(DType::bf16, 256, 256, true, [](BwdCase& c) { c.bhsd_grads = true; });
  // MLA-like Dqk = 192, Dv = 128; odd pairs each side of 128 (72/40 pads to 80/48, 200/136 to
  // 224/160); a narrow Dqk beside a wide Dv.
  add(DType::bf16, 192, 128, true, none);
  add(DType::f16, 192, 128, false, [](BwdCase& c) { c.H = 8, c.Hkv = 2; });
  add(DType::f16, 72, 40, true, none);
  add(DType::bf16, 200, 136, false, none);
  add(DType::f16, 40, 256, true, none);
  // The features at 256: GQA with a window, softcap and ALiBi, Sq > Sk.
  add(DType::bf16, 256, 256, true, [](BwdCase& c) { c.H = 8, c.Hkv = 2, c.window = Window{30, 0}; });
  add(DType::f16, 256, 256, false, [](BwdCase& c) { c.softcap = 20.f, c.softmax_scale = 1.f, c.alibi = true; });
  add(DType::bf16, 192, 128, true, [](BwdCase& c) { c.Sq = 130, c.Sk = 77, c.window = Window{16, 0}; });
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

// bwd_sm90 (docs/design/hopper_backward.md, under construction) on the shapes it serves, every
// tiling, run by naming it (the engine does not pick the family yet), on odd lengths (partial Q
// and K/V blocks) and whole blocks, twice each for bit-identical dK and dV.
TEST_CASE("backward: bwd_sm90 (wgmma; no mask or causal, GQA, D 64/128), every tiling, matches float64, twice, on garbage gradients") {
  Fixture& f = Fixture::get();
  const std::string arch = f.gpu.info().arch;
  if (arch.rfind("sm_90", 0) != 0) {
    MESSAGE("SKIPPED: bwd_sm90 needs an sm_90 GPU, this one is " << arch);
    return;
  }
  const KernelFamily* family = find_family("bwd_sm90");
  REQUIRE(family);
  struct Shape {
    std::int64_t sq, sk;
    bool causal;
    std::int64_t h, hkv;  // hkv 0: MHA
  };
  // Causal with more keys than queries (the diagonal starts inside a K/V block, whole blocks of
  // keys before it) and more queries than keys (rows that see no key), GQA 6:2 and MQA 4:1.
  const Shape shapes[] = {{77, 130, false, 3, 0}, {256, 192, false, 3, 0}, {1, 64, false, 3, 0}, {200, 3, false, 3, 0},
                          {77, 130, true, 3, 0},  {256, 192, true, 3, 0},  {130, 77, true, 3, 0}, {300, 300, true, 3, 0},
                          {77, 130, true, 6, 2},  {256, 192, false, 4, 1}, {1, 64, true, 6, 2}};
  for (DType dt : {DType::f16, DType::bf16})
    for (std::int64_t d : {64, 128})
      for (const Shape& sh : shapes) {
        BwdCase c;
        c.dtype = dt, c.D = d, c.Sq = sh.sq, c.Sk = sh.sk, c.causal = sh.causal, c.H = sh.h, c.Hkv = sh.hkv;
        c.bhsd_grads = d == 128;
        INFO(c.describe());
        const HostProblem p = make_problem(c);
        DeviceProblem dev;
        make_device(p, dev);
        auto plan = f.engine->plan_backward(dev.args, "sm_90a");
        REQUIRE(plan.ok());
        const Arch sm90a = Arch::parse("sm_90a").value();
        REQUIRE(family->refusal(sm90a, plan->variant.semantics, nullptr) == nullptr);
        for (const Tiling& t : family->candidate_tilings(sm90a, plan->variant.semantics)) {
          const auto first = run_once(p, dev, t.name().c_str(), &t);
          const auto second = run_once(p, dev, "again", &t);
          CHECK_MESSAGE(first == second, "dk and dv must be bit-identical from call to call");
        }
      }
}

TEST_CASE("backward: every candidate tiling of the wide head dims and MLA's pair matches float64") {
  for (auto [d, dv, dt, causal] : {std::tuple{256, 256, DType::bf16, true}, std::tuple{160, 160, DType::f16, false},
                                   std::tuple{192, 128, DType::f16, true}}) {
    BwdCase c;
    c.dtype = dt, c.D = d, c.Dv = dv == d ? 0 : dv, c.causal = causal;
    check_every_tiling(c);
  }
}

TEST_CASE("backward: deterministic mode gives dq bit for bit, with masks, GQA, wide and odd dims") {
  std::vector<BwdCase> cases;
  auto add = [&](DType dt, std::int64_t d, bool causal, auto&& set) {
    BwdCase c;
    c.dtype = dt, c.D = d, c.causal = causal, c.deterministic = true;
    set(c);
    cases.push_back(c);
  };
  auto none = [](BwdCase&) {};
  // Several K/V blocks add into each Q block (Sk 130 over 64- and 128-key blocks); causal and
  // windowed walks skip blocks, so the hand-on must pass a block that walks nothing.
  add(DType::f16, 64, false, none);
  add(DType::bf16, 128, true, [](BwdCase& c) { c.Sk = 300, c.Sq = 260, c.bhsd_grads = true; });
  add(DType::bf16, 64, true, [](BwdCase& c) { c.Sq = 130, c.Sk = 77; });
  add(DType::f16, 128, false, [](BwdCase& c) { c.H = 8, c.Hkv = 2, c.window = Window{20, 10}, c.Sk = 400; });
  add(DType::bf16, 96, true, [](BwdCase& c) { c.H = 16, c.Hkv = 1, c.softcap = 20.f, c.alibi = true; });
  add(DType::f16, 256, true, [](BwdCase& c) { c.Sk = 260, c.Sq = 200; });
  add(DType::bf16, 192, false, [](BwdCase& c) { c.Dv = 128, c.H = 4, c.Hkv = 2; });
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

TEST_CASE("backward: fp32 (exact within 1e-5, tf32 within 4 tf32 roundings) matches float64, twice, on garbage workspace") {
  std::vector<BwdCase> cases;
  auto add = [&](Fp32Math math, std::int64_t d, bool causal, auto&& set) {
    BwdCase c;
    c.dtype = DType::f32, c.fp32_math = math, c.D = d, c.causal = causal;
    set(c);
    cases.push_back(c);
  };
  auto none = [](BwdCase&) {};
  for (Fp32Math math : {Fp32Math::exact, Fp32Math::tf32}) {
    // The defaults at 64, 128 and 256 (fp32 tiles: 64 x 64, 64 x 64 or 32 x 64, 32 x 64 or 32 x 32).
    add(math, 64, false, none);
    add(math, 128, true, [](BwdCase& c) { c.bhsd_grads = true; });
    add(math, 256, false, none);
    // GQA 4:1 and MQA; causal with Sq > Sk (rows that see no key); sinks.
    add(math, 128, false, [](BwdCase& c) { c.H = 8, c.Hkv = 2; });
    add(math, 64, true, [](BwdCase& c) { c.B = 1, c.H = 16, c.Hkv = 1; });
    add(math, 256, true, [](BwdCase& c) { c.Sq = 130, c.Sk = 77, c.H = 4, c.Hkv = 2; });
    add(math, 64, true, [](BwdCase& c) { c.sinks = true; });
  }
  // Exact only: odd head dims, MLA's pair, a window with ALiBi, softcap with large logits (tf32's
  // 10-bit operands make the logits' own error large there: an error of tf32, not of the kernel),
  // deterministic mode with sinks.
  add(Fp32Math::exact, 40, true, none);
  add(Fp32Math::exact, 192, false, [](BwdCase& c) { c.Dv = 128; });
  add(Fp32Math::exact, 96, true, [](BwdCase& c) { c.window = Window{30, 0}, c.alibi = true, c.H = 8, c.Hkv = 2; });
  add(Fp32Math::exact, 64, false, [](BwdCase& c) { c.softcap = 5.f, c.softmax_scale = 1.f; });
  add(Fp32Math::exact, 128, true, [](BwdCase& c) { c.deterministic = true, c.sinks = true, c.Sk = 300, c.Sq = 260; });
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

TEST_CASE("backward: sinks with f16 and bf16: dq, dk, dv and dsinks match float64") {
  std::vector<BwdCase> cases;
  for (DType dt : {DType::f16, DType::bf16}) {
    BwdCase c;
    c.dtype = dt, c.D = dt == DType::f16 ? 64 : 128, c.causal = dt == DType::bf16, c.sinks = true;
    cases.push_back(c);
  }
  precompile(cases);
  for (const BwdCase& c : cases) check_case(c);
}

TEST_CASE("backward: every candidate tiling of fp32 at head dims 64 and 256 matches float64") {
  for (auto [d, math] : {std::pair{64, Fp32Math::exact}, std::pair{256, Fp32Math::tf32}}) {
    BwdCase c;
    c.dtype = DType::f32, c.fp32_math = math, c.D = d, c.causal = true;
    check_every_tiling(c);
  }
}

TEST_CASE("backward: first-use tuning times the backward's candidates once; the tuned kernel matches float64") {
  const std::string dir = std::filesystem::temp_directory_path() / ("flashjit-bwd-tune-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  EngineOptions o;
  o.tune_mode = TuneMode::first_use;
  o.cache_dir = dir;
  std::vector<std::string> lines;  // the tuner's, one per candidate: "tune: <tiling> <time> ms", pruned or failed
  o.log = [&lines](const std::string& line) { lines.push_back(line); };
  auto engine = Engine::create(o).value();
  BwdCase c;
  c.dtype = DType::bf16, c.D = 128, c.causal = true, c.H = 4, c.Hkv = 2, c.Sq = 300, c.Sk = 300;
  INFO(c.describe());
  const HostProblem p = make_problem(c);
  DeviceProblem d;
  make_device(p, d);
  (void)run_once(p, d, "tuned", nullptr, engine.get());
  CHECK(engine->stats().tunes == 1);
  int timed = 0;
  for (const std::string& line : lines) {
    const bool tuner_line = line.find("tune: ") != std::string::npos;
    if (tuner_line && line.size() > 3 && line.compare(line.size() - 3, 3, " ms") == 0 &&
        line.find("pruned") == std::string::npos && line.find("failed") == std::string::npos)
      ++timed;
    CHECK_MESSAGE(line.find("using the default") == std::string::npos, line);
  }
  CHECK_MESSAGE(timed >= 2, "backward candidates timed: " << timed);
  (void)run_once(p, d, "again", nullptr, engine.get());
  CHECK(engine->stats().tunes == 1);  // the bucket's choice is remembered
  std::filesystem::remove_all(dir);
}

TEST_CASE("backward: small case (compute-sanitizer runs this one)") {
  BwdCase c;
  c.B = 1, c.H = 2, c.Sq = 40, c.Sk = 70, c.D = 64, c.causal = true;
  check_case(c);
}

TEST_CASE("backward: small case with GQA, window, softcap and ALiBi (compute-sanitizer runs this one)") {
  BwdCase c;
  c.B = 1, c.H = 4, c.Hkv = 1, c.Sq = 40, c.Sk = 70, c.D = 40, c.causal = true;
  c.window = Window{24, 0}, c.softcap = 10.f, c.alibi = true;
  check_case(c);
}

TEST_CASE("backward: small deterministic case (compute-sanitizer runs this one)") {
  BwdCase c;
  c.B = 1, c.H = 2, c.Sq = 100, c.Sk = 200, c.D = 64, c.causal = true, c.deterministic = true;
  check_case(c);
}
