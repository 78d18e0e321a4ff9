// Runs one bwd_sm80 or bwd_sm90 variant's three kernels on the CPU (emu_runtime.hpp) on a random
// problem and compares dq, dk, dv (and dsinks) with float64 gradients computed here from the
// definitions. Built by tests/templates/bwd_emulate.py with the variant's rendered constants
// (VARIANT_SOURCE: what engine/src/kernel_source.cpp renders, ending in #include
// "bwd_sm80/family.cu" or "bwd_sm90/family.cu"; EMU_BWD_SM90 defined for the latter).
// Arguments, key=value: b, hq, hkv, sq, sk (per sequence; varlen: lengths), left, right (window
// sides, -1 unbounded), softcap, scale, varlen_q/varlen_k (comma lists), kv_lens (comma list),
// seed. What the variant was compiled for (dtype, head dims, mask, features) comes from fj::cfg:
// q, k, dq, dk have head dim DQ (kHeadDimQK), v, o, dO, dv have DV (kHeadDimV).
#include VARIANT_SOURCE

#include <cmath>
#include <map>
#include <random>
#include <sstream>
#include <string>

alignas(128) unsigned char smem_raw[kEmuSmemBytes];

// The main kernel's CTA, as the engine launches it (bwd_sm80: preprocess's and convert's too;
// bwd_sm90: its MMA warpgroups and producer, fj_layout::bwd90_threads, with the dynamic shared
// memory of fj_layout::bwd90_layout).
#ifdef EMU_BWD_SM90
constexpr int kMainThreads = fj::bwd90::kThreads;
static_assert(fj::bwd90::kLayout.smem_bytes <= int(kEmuSmemBytes), "the emulation's shared memory holds the layout");
#else
constexpr int kMainThreads = fj::bwd::kThreads;
#endif

namespace {

using flashjit::quantize;

std::vector<long long> list_of(const std::string& s) {
  std::vector<long long> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(std::stoll(x));
  return out;
}

struct Seq {
  long long q0, lq, k0, cap, lk;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> arg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const auto eq = a.find('=');
    arg[a.substr(0, eq)] = a.substr(eq + 1);
  }
  auto get = [&](const char* k, long long d) { return arg.count(k) ? std::stoll(arg[k]) : d; };
  const flashjit::DType dt = fj::cfg::kDtype == 2 ? flashjit::DType::f32
                            : fj::cfg::kDtype == 1 ? flashjit::DType::bf16 : flashjit::DType::f16;
  const long long DQ = fj::cfg::kHeadDimQK, DV = fj::cfg::kHeadDimV, Hq = get("hq", 3), Hkv = fj::cfg::kGqa ? get("hkv", 1) : Hq;
  const bool causal = fj::cfg::kMask == 1;
  const long long left_arg = get("left", -1), right_arg = get("right", -1);
  const double softcap = arg.count("softcap") ? std::stod(arg["softcap"]) : 0.0;
  const double scale = arg.count("scale") ? std::stod(arg["scale"]) : 1.0 / std::sqrt(double(DQ));
  std::mt19937 rng(unsigned(get("seed", 7)));
  std::normal_distribution<float> normal(0.f, 1.f);

  // Sequences: varlen lists, else b sequences of sq x sk.
  std::vector<Seq> seqs;
  long long total_q = 0, total_k = 0, max_q = 0, max_k = 0;
  std::vector<long long> vq = list_of(arg["varlen_q"]), vk = list_of(arg["varlen_k"]), kvl = list_of(arg["kv_lens"]);
  const bool varlen = fj::cfg::kVarlen;
  const long long nseq = varlen ? (long long)vq.size() : get("b", 2);
  for (long long b = 0; b < nseq; ++b) {
    const long long lq = varlen ? vq[size_t(b)] : get("sq", 77), cap = varlen ? vk[size_t(b)] : get("sk", 130);
    long long lk = cap;
    if (fj::cfg::kKvLens) lk = std::min(std::max(kvl[size_t(b)], 0ll), cap);
    seqs.push_back({varlen ? total_q : 0, lq, varlen ? total_k : 0, cap, lk});
    total_q += lq, total_k += cap, max_q = std::max(max_q, lq), max_k = std::max(max_k, cap);
  }
  const long long TB = varlen ? 1 : nseq, TSq = varlen ? total_q : max_q, TSk = varlen ? total_k : max_k;
  const long long span = std::max(max_q, max_k);
  const int wl = fj::cfg::kWindow ? int(left_arg < 0 ? span : std::min(left_arg, span)) : 0;
  const int wr = fj::cfg::kWindow ? (causal ? 0 : int(right_arg < 0 ? span : std::min(right_arg, span))) : 0;

  auto fill = [&](std::vector<float>& x, long long n) {
    x.resize(size_t(n));
    for (float& e : x) e = quantize(normal(rng), dt);
  };
  std::vector<float> q, k, v, dout, o, lse, slopes(static_cast<size_t>(Hq)), sinks(static_cast<size_t>(Hq));
  fill(q, TB * TSq * Hq * DQ), fill(k, TB * TSk * Hkv * DQ), fill(v, TB * TSk * Hkv * DV), fill(dout, TB * TSq * Hq * DV);
  for (long long h = 0; h < Hq; ++h) slopes[size_t(h)] = float(0.5 / double(1ll << h)), sinks[size_t(h)] = normal(rng);
  o.assign(dout.size(), 0.f);
  lse.assign(size_t(TB * Hq * TSq), 0.f);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dsinks(static_cast<size_t>(Hq));
  // Element offsets of a row of a [batch, seq, heads, D] tensor: q-side rows, key-side rows.
  auto qat = [&](long long b, long long s, long long h, long long D) { return ((b * TSq + s) * Hq + h) * D; };
  auto kat = [&](long long b, long long s, long long h, long long D) { return ((b * TSk + s) * Hkv + h) * D; };
  auto lat = [&](long long b, long long h, long long s) { return (b * Hq + h) * TSq + s; };

  // ---- the float64 reference (tests/gpu/test_backward.cpp's, per sequence, with sinks)
  const long long group = Hq / Hkv;
  for (long long b = 0; b < nseq; ++b) {
    const Seq& sq = seqs[size_t(b)];
    const long long tb = varlen ? 0 : b, off = sq.lk - sq.lq;
    for (long long h = 0; h < Hq; ++h)
      for (long long i = 0; i < sq.lq; ++i) {
        const long long hk = h / group, qi_at = qat(tb, sq.q0 + i, h, DQ), oi_at = qat(tb, sq.q0 + i, h, DV);
        long long first = 0, last = sq.lk - 1;
        if (causal) last = std::min(last, i + off);
        if (fj::cfg::kWindow) first = std::max(first, i + off - wl), last = std::min(last, i + off + wr);
        std::vector<double> z(static_cast<size_t>(std::max(sq.lk, 1ll))), g(z.size()), p(z.size()), dp(z.size());
        double m = fj::cfg::kSinks ? double(sinks[size_t(h)]) : -INFINITY;
        for (long long j = first; j <= last; ++j) {
          double s = 0;
          for (long long d = 0; d < DQ; ++d) s += double(q[size_t(qi_at + d)]) * k[size_t(kat(tb, sq.k0 + j, hk, DQ) + d)];
          double zz = s * scale, gg = scale;
          if (fj::cfg::kSoftcap) {
            const double t = std::tanh(zz / softcap);
            zz = softcap * t, gg = scale * (1 - t * t);
          }
          if (fj::cfg::kAlibi) zz -= double(slopes[size_t(h)]) * double(std::llabs(i + off - j));
          z[size_t(j)] = zz, g[size_t(j)] = gg, m = std::max(m, zz);
        }
        float& l = lse[size_t(lat(tb, h, sq.q0 + i))];
        if (m == -INFINITY) {
          l = -INFINITY;
          continue;
        }
        double sum = fj::cfg::kSinks ? std::exp(double(sinks[size_t(h)]) - m) : 0.0;
        for (long long j = first; j <= last; ++j) sum += std::exp(z[size_t(j)] - m);
        const double row_lse = m + std::log(sum);
        l = float(row_lse);
        double dsum = 0;
        std::vector<double> oi(static_cast<size_t>(DV), 0.0);
        for (long long j = first; j <= last; ++j) {
          p[size_t(j)] = std::exp(z[size_t(j)] - row_lse);
          double d = 0;
          for (long long e = 0; e < DV; ++e) {
            const double vj = v[size_t(kat(tb, sq.k0 + j, hk, DV) + e)];
            d += double(dout[size_t(oi_at + e)]) * vj, oi[size_t(e)] += p[size_t(j)] * vj;
          }
          dp[size_t(j)] = d, dsum += p[size_t(j)] * d;
        }
        for (long long e = 0; e < DV; ++e) o[size_t(oi_at + e)] = quantize(float(oi[size_t(e)]), dt);
        if (fj::cfg::kSinks) dsinks[size_t(h)] -= std::exp(double(sinks[size_t(h)]) - row_lse) * dsum;
        for (long long j = first; j <= last; ++j) {
          const double ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * g[size_t(j)];
          const long long kj = kat(tb, sq.k0 + j, hk, DQ), vj = kat(tb, sq.k0 + j, hk, DV);
          for (long long e = 0; e < DQ; ++e) {
            dq[size_t(qi_at + e)] += ds * k[size_t(kj + e)];
            dk[size_t(kj + e)] += ds * q[size_t(qi_at + e)];
          }
          for (long long e = 0; e < DV; ++e) dv[size_t(vj + e)] += p[size_t(j)] * dout[size_t(oi_at + e)];
        }
      }
  }

  // ---- inputs as the kernels read them (the variant's element bits), outputs poisoned (NaN)
  using Elem = fj::var::Elem;
  auto bits = [&](const std::vector<float>& x) {
    std::vector<Elem> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      if constexpr (!fj::var::k16Bit) out[i] = x[i];
      else out[i] = dt == flashjit::DType::bf16 ? flashjit::float_to_bf16(x[i]) : flashjit::float_to_f16(x[i]);
    }
    return out;
  };
  auto value = [&](Elem x) -> double {
    if constexpr (!fj::var::k16Bit) return x;
    else return dt == flashjit::DType::bf16 ? flashjit::bf16_to_float(x) : flashjit::f16_to_float(x);
  };
  std::vector<Elem> bq = bits(q), bk = bits(k), bv = bits(v), bo = bits(o), bdo = bits(dout);
  const Elem nan = bits({NAN})[0];
  std::vector<Elem> gq(q.size(), nan), gk(k.size(), nan), gv(v.size(), nan);
  std::vector<int> cu_q, cu_k, kv_lens;
  for (const Seq& s : seqs) cu_q.push_back(int(s.q0)), cu_k.push_back(int(s.k0)), kv_lens.push_back(int(s.lk));
  cu_q.push_back(int(total_q)), cu_k.push_back(int(total_k));
  std::vector<float> dsinks_got(static_cast<size_t>(Hq), NAN);

  using namespace fj::bwd;
  const long long m_blocks = (max_q + kBlockM - 1) / kBlockM, n_blocks = (max_k + kBlockN - 1) / kBlockN;
  const long long rows = nseq * Hq * m_blocks * kBlockM;
  std::vector<float> ws(static_cast<size_t>(rows * kDQK + 2 * rows + nseq * m_blocks * Hq), NAN);  // garbage: preprocess writes what is read

  FjBackwardParams p{};
  FjAttentionParams& f = p.fwd;
  f.q = bq.data(), f.k = bk.data(), f.v = bv.data(), f.o = bo.data(), f.lse = lse.data();
  const long long sq_[4] = {TSq * Hq * DQ, Hq * DQ, DQ, 1}, sk_[4] = {TSk * Hkv * DQ, Hkv * DQ, DQ, 1};
  const long long so_[4] = {TSq * Hq * DV, Hq * DV, DV, 1}, sv_[4] = {TSk * Hkv * DV, Hkv * DV, DV, 1};
  for (int i = 0; i < 4; ++i) {
    f.q_stride[i] = p.dq_stride[i] = sq_[i];
    f.o_stride[i] = p.dout_stride[i] = so_[i];
    f.k_stride[i] = p.dk_stride[i] = sk_[i];
    f.v_stride[i] = p.dv_stride[i] = sv_[i];
  }
  f.lse_stride[0] = Hq * TSq, f.lse_stride[1] = TSq, f.lse_stride[2] = 1;
  if (varlen) f.cu_seqlens_q = cu_q.data(), f.cu_seqlens_k = cu_k.data();
  f.alibi_slopes = slopes.data(), f.alibi_batch_stride = 0;
  f.sinks = fj::cfg::kSinks ? sinks.data() : nullptr;
  f.kv_lens = fj::cfg::kKvLens ? kv_lens.data() : nullptr;
  f.batch = int(nseq), f.seqlen_q = int(max_q), f.seqlen_k = int(max_k), f.total_q = int(TSq), f.total_k = int(TSk);
  f.heads_q = int(Hq), f.heads_kv = int(Hkv), f.group = int(group), f.window_left = wl, f.window_right = wr;
  constexpr double kLog2eD = 1.4426950408889634;
  f.scale_log2 = float(scale * kLog2eD);
  if (fj::cfg::kSoftcap) f.softcap_scale = float(scale / softcap), f.softcap_log2 = float(softcap * kLog2eD);
  f.alibi_unit = float(fj::cfg::kSoftcap ? kLog2eD : 1.0 / scale);
  p.dout = bdo.data(), p.dq = gq.data(), p.dk = gk.data(), p.dv = gv.data();
  p.dq_accum = ws.data(), p.dpsum = ws.data() + rows * kDQK, p.lse_log2 = p.dpsum + rows, p.dsinks_part = p.lse_log2 + rows;
  p.dsinks = fj::cfg::kSinks ? dsinks_got.data() : nullptr;
  std::vector<int> turns(static_cast<size_t>(nseq * Hq * m_blocks), -7);  // garbage: preprocess zeroes each
  p.dq_turn = fj::cfg::kDeterministic ? turns.data() : nullptr;
  p.seqlen_q_rounded = int(m_blocks * kBlockM), p.scale = float(scale);

  const dim3 block{unsigned(kThreads), 1, 1};
  if (m_blocks > 0) emu::launch(flashjit_bwd_preprocess, dim3{unsigned(m_blocks), unsigned(Hq), unsigned(nseq)}, block, p);
  if (n_blocks > 0)
    emu::launch(flashjit_bwd_main, dim3{unsigned(n_blocks), unsigned(Hkv), unsigned(nseq)}, dim3{unsigned(kMainThreads), 1, 1}, p);
  if (m_blocks > 0) emu::launch(flashjit_bwd_convert, dim3{unsigned(m_blocks), unsigned(Hq), unsigned(nseq)}, block, p);

  // ---- compare (rows no sequence covers are not compared: the kernels do not write them)
  int failures = 0;
  // The bound: 16-bit and tf32, kRoundingsAllowed times the error of rounding the exact gradient
  // to the dtype (tf32: to tf32, what each product rounds its operands to), as
  // tests/gpu/test_backward.cpp's; exact fp32, its fixed kExactFp32Bound.
  constexpr double kRoundingsAllowed = 4;
  constexpr double kExactFp32Bound = 1e-5;
  constexpr double kZeroSlack = 1e-7;  // an all-zero gradient (no key seen) has no rounding to scale
  const bool exact_fp32 = dt == flashjit::DType::f32 && !fj::var::kTf32;
  auto rounded = [&](double x) {
    return dt == flashjit::DType::f32 ? double(flashjit::round_to_tf32(float(x))) : double(quantize(float(x), dt));
  };
  auto compare = [&](const char* name, const std::vector<Elem>& got, const std::vector<double>& want, long long TS,
                     long long H, long long D, bool keys) {
    double num = 0, den = 0, rnd = 0;
    long long bad = 0;
    for (long long b = 0; b < nseq; ++b) {
      const Seq& s = seqs[size_t(b)];
      const long long tb = varlen ? 0 : b, n = keys ? s.cap : s.lq, r0 = keys ? s.k0 : s.q0;
      for (long long r = 0; r < n; ++r)
        for (long long h = 0; h < H; ++h)
          for (long long d = 0; d < D; ++d) {
            const size_t at = size_t(((tb * TS + r0 + r) * H + h) * D + d);
            const double g = value(got[at]);
            if (!std::isfinite(g)) ++bad;
            num += (g - want[at]) * (g - want[at]), den += want[at] * want[at];
            const double e = rounded(want[at]) - want[at];
            rnd += e * e;
          }
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num), round = den > 0 ? std::sqrt(rnd / den) : 0;
    const bool ok = bad == 0 && rel <= (exact_fp32 ? kExactFp32Bound : kRoundingsAllowed * round + kZeroSlack);
    std::printf(" %s %.2e (%.1fx rounding)%s", name, rel, round > 0 ? rel / round : 0.0, ok ? "" : (bad ? " NON-FINITE" : " FAIL"));
    failures += !ok;
  };
  compare("dq", gq, dq, TSq, Hq, DQ, false);
  compare("dk", gk, dk, TSk, Hkv, DQ, true);
  compare("dv", gv, dv, TSk, Hkv, DV, true);
  if (fj::cfg::kSinks) {
    double num = 0, den = 0;
    for (long long h = 0; h < Hq; ++h)
      num += (dsinks_got[size_t(h)] - dsinks[size_t(h)]) * (dsinks_got[size_t(h)] - dsinks[size_t(h)]),
          den += dsinks[size_t(h)] * dsinks[size_t(h)];
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    const bool ok = rel < 1e-2;
    std::printf(" dsinks %.2e%s", rel, ok ? "" : " FAIL");
    failures += !ok;
  }
  std::printf("\n");
  return failures ? 1 : 0;
}
