// The backward pass on the GPU (bwd_sm80): dq, dk and dv against a float64 CPU reference computed
// here from the same fp16/bf16 inputs, on small odd shapes (no tile divides them), causal or not,
// both 16-bit dtypes, head dims 64 and 128, gradients in [B,S,H,D] or [B,H,S,D] storage. Each case
// runs three times: on a caller workspace full of garbage, then twice on the engine's pool, and
// every run must pass (nothing left over from an earlier call). dk and dv must be bit-identical
// between runs; dq is summed with atomics in any order, so only its error bound is checked.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "base/host_float.hpp"
#include "gpu_fixture.hpp"

using namespace flashjit;
using flashjit::gpu_test::Fixture;

namespace {

// The bound on each gradient's relative L2 error is this many times the error of merely
// rounding the exact gradient to the dtype: the output's own rounding, P and dS rounded to 16
// bits before the products that use them (each about one output rounding), and headroom.
constexpr double kRoundingsAllowed = 4;
constexpr unsigned char kGarbage = 0xFF;  // 0xFFFF is a NaN in f16 and bf16, 0xFFFFFFFF in fp32
constexpr std::uint32_t kSeed = 2024;

struct BwdCase {
  DType dtype = DType::f16;
  std::int64_t B = 2, H = 3, Sq = 77, Sk = 130, D = 64;
  bool causal = false;
  bool bhsd_grads = false;  // dq, dk, dv in [B,H,S,D] storage
  std::string describe() const {
    return std::string(dtype_name(dtype)) + " B" + std::to_string(B) + " H" + std::to_string(H) + " Sq" +
           std::to_string(Sq) + " Sk" + std::to_string(Sk) + " D" + std::to_string(D) + (causal ? " causal" : " none") +
           (bhsd_grads ? " grads-bhsd" : " grads-bshd");
  }
};

// Host tensors, [B,S,H,D] row-major, holding the values the kernels see (already rounded).
struct HostProblem {
  BwdCase c;
  std::vector<float> q, k, v, dout, o, lse;  // o rounded to the dtype, lse fp32 [B,H,Sq]
  std::vector<double> dq, dk, dv;            // the exact gradients, [B,S,H,D]
};

std::int64_t at(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t S, std::int64_t H, std::int64_t D) {
  return ((b * S + s) * H + h) * D;
}

// The forward (o, lse) and the backward in float64, straight from the definitions:
//   P = exp(scale q.k - lse) over visible keys, o = P v, dP = dO.v, D = rowsum(P dP) (= rowsum(dO o)),
//   dS = P (dP - D), dq = scale dS k, dk = scale dS^T q, dv = P^T dO.
HostProblem make_problem(const BwdCase& c) {
  HostProblem p;
  p.c = c;
  std::mt19937 rng(kSeed + std::uint32_t(c.D + c.Sq + 7 * c.causal + 3 * int(c.dtype)));
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<float>& x, std::int64_t n) {
    x.resize(std::size_t(n));
    for (float& e : x) e = quantize(normal(rng), c.dtype);
  };
  const std::int64_t nq = c.B * c.Sq * c.H * c.D, nk = c.B * c.Sk * c.H * c.D;
  fill(p.q, nq), fill(p.k, nk), fill(p.v, nk), fill(p.dout, nq);
  p.o.assign(std::size_t(nq), 0.f);
  p.lse.assign(std::size_t(c.B * c.H * c.Sq), 0.f);
  p.dq.assign(std::size_t(nq), 0.0), p.dk.assign(std::size_t(nk), 0.0), p.dv.assign(std::size_t(nk), 0.0);
  const double scale = 1.0 / std::sqrt(double(c.D));
  std::vector<double> prob(std::size_t(c.Sk)), dp(std::size_t(c.Sk));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h)
      for (std::int64_t i = 0; i < c.Sq; ++i) {
        const float* qi = &p.q[std::size_t(at(b, i, h, c.Sq, c.H, c.D))];
        const float* doi = &p.dout[std::size_t(at(b, i, h, c.Sq, c.H, c.D))];
        const std::int64_t last = c.causal ? std::min(c.Sk - 1, i + c.Sk - c.Sq) : c.Sk - 1;  // bottom-right diagonal
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= last; ++j) {
          const float* kj = &p.k[std::size_t(at(b, j, h, c.Sk, c.H, c.D))];
          double s = 0;
          for (std::int64_t d = 0; d < c.D; ++d) s += double(qi[d]) * kj[d];
          prob[std::size_t(j)] = s * scale;
          m = std::max(m, prob[std::size_t(j)]);
        }
        float& lse = p.lse[std::size_t((b * c.H + h) * c.Sq + i)];
        if (last < 0) {  // a row that sees no key: o = 0, lse = -inf, no gradient
          lse = -std::numeric_limits<float>::infinity();
          continue;
        }
        double sum = 0;
        for (std::int64_t j = 0; j <= last; ++j) sum += std::exp(prob[std::size_t(j)] - m);
        const double row_lse = m + std::log(sum);
        lse = float(row_lse);
        double dsum = 0;
        std::vector<double> oi(std::size_t(c.D), 0.0);
        for (std::int64_t j = 0; j <= last; ++j) {
          const float* vj = &p.v[std::size_t(at(b, j, h, c.Sk, c.H, c.D))];
          prob[std::size_t(j)] = std::exp(prob[std::size_t(j)] - row_lse);
          double d = 0;
          for (std::int64_t e = 0; e < c.D; ++e) d += double(doi[e]) * vj[e], oi[std::size_t(e)] += prob[std::size_t(j)] * vj[e];
          dp[std::size_t(j)] = d;
          dsum += prob[std::size_t(j)] * d;
        }
        for (std::int64_t e = 0; e < c.D; ++e)
          p.o[std::size_t(at(b, i, h, c.Sq, c.H, c.D) + e)] = quantize(float(oi[std::size_t(e)]), c.dtype);
        for (std::int64_t j = 0; j <= last; ++j) {
          const double ds = prob[std::size_t(j)] * (dp[std::size_t(j)] - dsum);
          const std::int64_t kj = at(b, j, h, c.Sk, c.H, c.D), qi_at = at(b, i, h, c.Sq, c.H, c.D);
          for (std::int64_t e = 0; e < c.D; ++e) {
            p.dq[std::size_t(qi_at + e)] += scale * ds * p.k[std::size_t(kj + e)];
            p.dk[std::size_t(kj + e)] += scale * ds * qi[e];
            p.dv[std::size_t(kj + e)] += prob[std::size_t(j)] * doi[e];
          }
        }
      }
  return p;
}

// A [B,S,H,D] host tensor in a device buffer of the dtype.
tools::DeviceBuffer upload(const std::vector<float>& x, DType dt) {
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

// A gradient read back through its view, against the exact one ([B,S,H,D]).
Error compare(const tools::DeviceBuffer& buf, const TensorView& view, const std::vector<double>& ref, DType dt,
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
          const std::uint16_t x = bits[std::size_t(b * view.stride[0] + s * view.stride[1] + h * view.stride[2] + d * view.stride[3])];
          const double got = dt == DType::f16 ? f16_to_float(x) : bf16_to_float(x);
          const double want = ref[std::size_t(at(b, s, h, S, H, D) + d)];
          if (!std::isfinite(got)) ++e.non_finite;
          num += (got - want) * (got - want);
          den += want * want;
          const double r = quantize(float(want), dt) - want;
          rnd += r * r;
        }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.rounding = den > 0 ? std::sqrt(rnd / den) : 0;
  return e;
}

struct DeviceProblem {
  tools::DeviceBuffer q, k, v, o, dout, lse, dq, dk, dv;
  BackwardArgs args;
};

void make_device(const HostProblem& p, DeviceProblem& d) {
  const BwdCase& c = p.c;
  const DriverLibrary& drv = Fixture::get().gpu.driver();
  d.q = upload(p.q, c.dtype), d.k = upload(p.k, c.dtype), d.v = upload(p.v, c.dtype);
  d.o = upload(p.o, c.dtype), d.dout = upload(p.dout, c.dtype);
  d.lse = tools::DeviceBuffer::allocate(drv, p.lse.size() * sizeof(float)).value();
  REQUIRE(d.lse.upload(p.lse.data(), p.lse.size() * sizeof(float)).ok());
  d.dq = tools::DeviceBuffer::allocate(drv, p.q.size() * 2).value();
  d.dk = tools::DeviceBuffer::allocate(drv, p.k.size() * 2).value();
  d.dv = tools::DeviceBuffer::allocate(drv, p.v.size() * 2).value();
  AttentionArgs& f = d.args.forward;
  f.q = TensorView::bshd(d.q.ptr(), c.dtype, c.B, c.Sq, c.H, c.D);
  f.k = TensorView::bshd(d.k.ptr(), c.dtype, c.B, c.Sk, c.H, c.D);
  f.v = TensorView::bshd(d.v.ptr(), c.dtype, c.B, c.Sk, c.H, c.D);
  f.o = TensorView::bshd(d.o.ptr(), c.dtype, c.B, c.Sq, c.H, c.D);
  f.lse = LseView::contiguous(static_cast<float*>(d.lse.ptr()), c.B, c.H, c.Sq);
  f.mask = c.causal ? Mask::causal : Mask::none;
  d.args.dout = TensorView::bshd(d.dout.ptr(), c.dtype, c.B, c.Sq, c.H, c.D);
  auto grad = c.bhsd_grads ? &TensorView::bhsd : &TensorView::bshd;
  d.args.dq = grad(d.dq.ptr(), c.dtype, c.B, c.Sq, c.H, c.D);
  d.args.dk = grad(d.dk.ptr(), c.dtype, c.B, c.Sk, c.H, c.D);
  d.args.dv = grad(d.dv.ptr(), c.dtype, c.B, c.Sk, c.H, c.D);
}

// Poisons the gradients, runs the backward, checks each against the bound; returns dk's and dv's bits.
std::vector<std::uint16_t> run_once(const HostProblem& p, DeviceProblem& d, const char* run) {
  Fixture& f = Fixture::get();
  INFO(run);
  for (auto* b : {&d.dq, &d.dk, &d.dv}) REQUIRE(b->fill_bytes(kGarbage).ok());
  auto st = f.engine->backward(d.args, nullptr);
  REQUIRE_MESSAGE(st.ok(), (st.ok() ? "" : st.error().to_string()));
  REQUIRE(f.gpu.driver().cuCtxSynchronize() == CUDA_SUCCESS);
  std::vector<std::uint16_t> kept, bits;
  const std::pair<const char*, std::pair<const tools::DeviceBuffer*, std::pair<const TensorView*, const std::vector<double>*>>> grads[] = {
      {"dq", {&d.dq, {&d.args.dq, &p.dq}}}, {"dk", {&d.dk, {&d.args.dk, &p.dk}}}, {"dv", {&d.dv, {&d.args.dv, &p.dv}}}};
  std::string line;
  for (const auto& named : grads) {  // not a structured binding: clang's C++17 cannot capture one in INFO's lambda
    const char* name = named.first;
    const auto& g = named.second;
    const Error e = compare(*g.first, *g.second.first, *g.second.second, p.c.dtype, bits);
    const double bound = kRoundingsAllowed * e.rounding;
    INFO(name << ": rel_l2 " << e.rel_l2 << ", bound " << bound << ", non-finite " << e.non_finite);
    CHECK(e.non_finite == 0);
    CHECK(e.rel_l2 <= bound);
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.2e (%.1fx rounding)", name, e.rel_l2, e.rounding > 0 ? e.rel_l2 / e.rounding : 0.0);
    line += buf;
    if (std::string(name) != "dq") kept.insert(kept.end(), bits.begin(), bits.end());
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
  CHECK_MESSAGE(first == second, "dk and dv must be bit-identical from call to call");
}

// The views of `c` at fake addresses, for planning only.
void fake_views(const BwdCase& c, BackwardArgs& a) {
  auto at_slot = [](std::uintptr_t slot) { return reinterpret_cast<const void*>(slot << 32); };
  a.forward.q = TensorView::bshd(at_slot(1), c.dtype, c.B, c.Sq, c.H, c.D);
  a.forward.k = TensorView::bshd(at_slot(2), c.dtype, c.B, c.Sk, c.H, c.D);
  a.forward.v = TensorView::bshd(at_slot(3), c.dtype, c.B, c.Sk, c.H, c.D);
  a.forward.o = TensorView::bshd(at_slot(4), c.dtype, c.B, c.Sq, c.H, c.D);
  a.forward.lse = LseView::contiguous(reinterpret_cast<float*>(std::uintptr_t(5) << 32), c.B, c.H, c.Sq);
  a.forward.mask = c.causal ? Mask::causal : Mask::none;
  a.dout = TensorView::bshd(at_slot(6), c.dtype, c.B, c.Sq, c.H, c.D);
  a.dq = TensorView::bshd(at_slot(7), c.dtype, c.B, c.Sq, c.H, c.D);
  a.dk = TensorView::bshd(at_slot(8), c.dtype, c.B, c.Sk, c.H, c.D);
  a.dv = TensorView::bshd(at_slot(9), c.dtype, c.B, c.Sk, c.H, c.D);
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
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < variants.size();) (void)f.engine->compile(variants[i], arch);
    });
  for (auto& th : pool) th.join();
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

TEST_CASE("backward: small case (compute-sanitizer runs this one)") {
  BwdCase c;
  c.B = 1, c.H = 2, c.Sq = 40, c.Sk = 70, c.D = 64, c.causal = true;
  check_case(c);
}
