#include "attention_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "base/host_float.hpp"

namespace flashjit::tools {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::bhsd: return "bhsd";
    case Layout::padded: return "padded";
    case Layout::strided_d: return "strided_d";
    case Layout::packed_qkv: return "packed_qkv";
  }
  return "?";
}

std::string CaseSpec::describe() const {
  std::string s = std::string(dtype_name(dtype));
  if (dtype == DType::f32) s += fp32_math == Fp32Math::tf32 ? "/tf32" : "/exact";
  s += " B" + std::to_string(batch) + " Sq" + std::to_string(seqlen_q) + " Sk" + std::to_string(seqlen_k) + " Hq" +
       std::to_string(heads_q) + " Hkv" + std::to_string(heads_kv) + " D" + std::to_string(head_dim_qk);
  if (head_dim_v != head_dim_qk) s += "/" + std::to_string(head_dim_v);
  s += std::string(" ") + mask_name(mask) + " " + layout_name(layout) + (lse ? " lse" : "");
  return s;
}

double attention_flops(const CaseSpec& s) {
  double f = 2.0 * s.batch * s.heads_q * double(s.seqlen_q) * double(s.seqlen_k) * double(s.head_dim_qk + s.head_dim_v);
  if (s.mask == Mask::causal && s.seqlen_q == s.seqlen_k) f /= 2;
  return f;
}

namespace {

// Element offsets of a [B, S, H, D] view in a given layout, inside its own region.
struct Placement {
  std::int64_t stride[4];
  std::int64_t offset;  // elements from the buffer start
  std::int64_t extent;  // elements the region spans
};

Placement place(Layout l, std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t D) {
  Placement p{};
  switch (l) {
    case Layout::bshd:
    case Layout::packed_qkv:
      p = {{S * H * D, H * D, D, 1}, 0, B * S * H * D};
      break;
    case Layout::bhsd:
      p = {{H * S * D, D, S * D, 1}, 0, B * S * H * D};
      break;
    case Layout::padded: {
      const std::int64_t row = H * (D + 6) + 10;  // padded head and row strides
      p = {{S * row + 2, row, D + 6, 1}, 2, B * (S * row + 2) + 2};
      break;
    }
    case Layout::strided_d:
      p = {{S * H * D * 2, H * D * 2, D * 2, 2}, 0, B * S * H * D * 2};
      break;
  }
  return p;
}

void store(void* base, std::int64_t idx, float x, DType dt) {
  if (dt == DType::f32) {
    static_cast<float*>(base)[idx] = x;
  } else {
    static_cast<std::uint16_t*>(base)[idx] = dt == DType::f16 ? float_to_f16(x) : float_to_bf16(x);
  }
}

float load(const void* base, std::int64_t idx, DType dt) {
  if (dt == DType::f32) return static_cast<const float*>(base)[idx];
  const std::uint16_t h = static_cast<const std::uint16_t*>(base)[idx];
  return dt == DType::f16 ? f16_to_float(h) : bf16_to_float(h);
}

constexpr std::int64_t kAlignElems = 128;  // keeps each region 256-byte aligned

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

Result<AttentionCase> AttentionCase::create(const GpuContext& gpu, const CaseSpec& s, bool keep_host) {
  if (s.layout == Layout::packed_qkv && (s.heads_q != s.heads_kv || s.head_dim_qk != s.head_dim_v || s.seqlen_q != s.seqlen_k))
    return Error(Code::invalid_argument, "packed_qkv needs Hq == Hkv, Sq == Sk and Dqk == Dv");
  AttentionCase c;
  c.spec_ = s;
  c.gpu_ = &gpu;
  c.keep_host_ = keep_host;
  const DType dt = s.dtype;
  const std::size_t es = dtype_size(dt);
  const std::int64_t B = s.batch;

  Placement pq, pk, pv, po;
  std::int64_t total = 0;
  if (s.layout == Layout::packed_qkv) {
    const std::int64_t hd = s.heads_q * s.head_dim_qk, row = 3 * hd;
    const Placement base{{s.seqlen_q * row, row, s.head_dim_qk, 1}, 0, B * s.seqlen_q * row};
    pq = base, pk = base, pv = base;
    pk.offset = hd;
    pv.offset = 2 * hd;
    total = round_up(base.extent, kAlignElems);
  } else {
    pq = place(s.layout, B, s.seqlen_q, s.heads_q, s.head_dim_qk);
    pk = place(s.layout, B, s.seqlen_k, s.heads_kv, s.head_dim_qk);
    pv = place(s.layout, B, s.seqlen_k, s.heads_kv, s.head_dim_v);
    const std::int64_t q0 = 0, k0 = round_up(pq.extent, kAlignElems), v0 = k0 + round_up(pk.extent, kAlignElems);
    pk.offset += k0;
    pv.offset += v0;
    total = v0 + round_up(pv.extent, kAlignElems);
    (void)q0;
  }
  po = place(s.layout == Layout::packed_qkv ? Layout::bshd : s.layout, B, s.seqlen_q, s.heads_q, s.head_dim_v);

  auto qkv = DeviceBuffer::allocate(gpu.driver(), std::size_t(total) * es);
  if (!qkv.ok()) return std::move(qkv).error();
  c.qkv_ = std::move(qkv).value();
  auto out = DeviceBuffer::allocate(gpu.driver(), std::size_t(po.extent + po.offset) * es);
  if (!out.ok()) return std::move(out).error();
  c.out_ = std::move(out).value();

  // Random normal inputs, quantized; written through the layout into one host staging buffer.
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<unsigned char> staging(std::size_t(total) * es, 0);
  auto fill = [&](std::vector<float>& dst, const Placement& p, std::int64_t S, std::int64_t H, std::int64_t D) {
    dst.resize(std::size_t(B * S * H * D));
    std::size_t i = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < S; ++t)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d, ++i) {
            const float x = quantize(normal(rng), dt);
            dst[i] = x;
            store(staging.data(), p.offset + b * p.stride[0] + t * p.stride[1] + h * p.stride[2] + d * p.stride[3], x, dt);
          }
  };
  fill(c.q_, pq, s.seqlen_q, s.heads_q, s.head_dim_qk);
  fill(c.k_, pk, s.seqlen_k, s.heads_kv, s.head_dim_qk);
  fill(c.v_, pv, s.seqlen_k, s.heads_kv, s.head_dim_v);
  FJ_TRY(c.qkv_.upload(staging.data(), staging.size()));
  if (!keep_host) c.q_.clear(), c.k_.clear(), c.v_.clear();

  auto view = [&](const DeviceBuffer& buf, const Placement& p, std::int64_t S, std::int64_t H, std::int64_t D) {
    TensorView t;
    t.data = static_cast<const char*>(buf.ptr()) + p.offset * es;
    t.dtype = dt;
    const std::int64_t shape[4] = {B, S, H, D};
    for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.stride[i] = p.stride[i];
    return t;
  };
  c.args_.q = view(c.qkv_, pq, s.seqlen_q, s.heads_q, s.head_dim_qk);
  c.args_.k = view(c.qkv_, pk, s.seqlen_k, s.heads_kv, s.head_dim_qk);
  c.args_.v = view(c.qkv_, pv, s.seqlen_k, s.heads_kv, s.head_dim_v);
  c.args_.o = view(c.out_, po, s.seqlen_q, s.heads_q, s.head_dim_v);
  c.out_offset_bytes_ = std::size_t(po.offset) * es;
  c.args_.mask = s.mask;
  c.args_.fp32_math = s.fp32_math;
  if (s.lse) {
    auto l = DeviceBuffer::allocate(gpu.driver(), std::size_t(B * s.heads_q * s.seqlen_q) * sizeof(float));
    if (!l.ok()) return std::move(l).error();
    c.lse_buf_ = std::move(l).value();
    c.args_.lse = LseView::contiguous(static_cast<float*>(c.lse_buf_.ptr()), B, s.heads_q, s.seqlen_q);
  }
  return c;
}

Status AttentionCase::poison() const {
  FJ_TRY(out_.fill_bytes(0xFF));
  if (spec_.lse) FJ_TRY(lse_buf_.fill_bytes(0xFF));
  return {};
}

void reference_head(const CaseSpec& s, const float* q, const float* k, const float* v, std::int64_t b, std::int64_t h,
                    double* out, double* lse) {
  const std::int64_t Sq = s.seqlen_q, Sk = s.seqlen_k, Dq = s.head_dim_qk, Dv = s.head_dim_v;
  const std::int64_t hk = h / (s.heads_q / s.heads_kv);
  const double scale = 1.0 / std::sqrt(double(Dq));
  std::vector<double> p(std::size_t(std::max<std::int64_t>(Sk, 1)));
  for (std::int64_t i = 0; i < Sq; ++i) {
    const float* qi = q + ((b * Sq + i) * s.heads_q + h) * Dq;
    const std::int64_t limit = s.mask == Mask::causal ? std::min(Sk, i + Sk - Sq + 1) : Sk;
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < limit; ++j) {
      const float* kj = k + ((b * Sk + j) * s.heads_kv + hk) * Dq;
      double acc = 0;
      for (std::int64_t d = 0; d < Dq; ++d) acc += double(qi[d]) * double(kj[d]);
      p[j] = acc * scale;
      mx = std::max(mx, p[j]);
    }
    double sum = 0;
    for (std::int64_t j = 0; j < limit; ++j) sum += (p[j] = std::exp(p[j] - mx));
    double* oi = out + i * Dv;
    for (std::int64_t d = 0; d < Dv; ++d) oi[d] = 0;
    for (std::int64_t j = 0; j < limit; ++j) {
      const float* vj = v + ((b * Sk + j) * s.heads_kv + hk) * Dv;
      const double w = p[j] / sum;
      for (std::int64_t d = 0; d < Dv; ++d) oi[d] += w * double(vj[d]);
    }
    lse[i] = limit > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
  }
}

Result<CheckResult> AttentionCase::check() const {
  if (!keep_host_) return Error(Code::invalid_argument, "case was created without host data");
  const CaseSpec& s = spec_;
  const DType dt = s.dtype;
  const std::size_t es = dtype_size(dt);
  std::vector<unsigned char> raw(out_.bytes());
  FJ_TRY(out_.download(raw.data(), raw.size()));
  std::vector<float> lse_dev;
  if (s.lse) {
    lse_dev.resize(std::size_t(s.batch * s.heads_q * s.seqlen_q));
    FJ_TRY(lse_buf_.download(lse_dev.data(), lse_dev.size() * sizeof(float)));
  }
  const TensorView& o = args_.o;
  const unsigned char* obase = raw.data() + out_offset_bytes_;
  (void)es;

  const std::int64_t pairs = s.batch * s.heads_q;
  const unsigned nthreads = std::max(1u, std::min(std::thread::hardware_concurrency(), unsigned(pairs)));
  std::vector<CheckResult> partial(nthreads);
  std::vector<double> num(nthreads, 0), den(nthreads, 0);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nthreads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<double> ref(std::size_t(s.seqlen_q * s.head_dim_v)), lse(std::size_t(s.seqlen_q));
      CheckResult& r = partial[t];
      for (std::int64_t pair = t; pair < pairs; pair += nthreads) {
        const std::int64_t b = pair / s.heads_q, h = pair % s.heads_q;
        reference_head(s, q_.data(), k_.data(), v_.data(), b, h, ref.data(), lse.data());
        for (std::int64_t i = 0; i < s.seqlen_q; ++i) {
          for (std::int64_t d = 0; d < s.head_dim_v; ++d) {
            const std::int64_t idx = b * o.stride[0] + i * o.stride[1] + h * o.stride[2] + d * o.stride[3];
            const double got = load(obase, idx, dt), want = ref[std::size_t(i * s.head_dim_v + d)];
            if (!std::isfinite(got)) {
              ++r.unwritten;
              continue;
            }
            num[t] += (got - want) * (got - want);
            den[t] += want * want;
            r.max_abs = std::max(r.max_abs, std::abs(got - want));
          }
          if (s.lse) {
            const float got = lse_dev[std::size_t((b * s.heads_q + h) * s.seqlen_q + i)];
            const double want = lse[std::size_t(i)];
            if (std::isinf(want)) {
              if (!(std::isinf(got) && got < 0)) ++r.lse_bad;
            } else if (!std::isfinite(got)) {
              ++r.lse_bad;
            } else {
              r.lse_max_abs = std::max(r.lse_max_abs, std::abs(double(got) - want));
            }
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  CheckResult total;
  double n = 0, d = 0;
  for (unsigned t = 0; t < nthreads; ++t) {
    total.unwritten += partial[t].unwritten;
    total.max_abs = std::max(total.max_abs, partial[t].max_abs);
    total.lse_bad += partial[t].lse_bad;
    total.lse_max_abs = std::max(total.lse_max_abs, partial[t].lse_max_abs);
    n += num[t];
    d += den[t];
  }
  total.rel_l2 = d > 0 ? std::sqrt(n / d) : std::sqrt(n);
  return total;
}

}  // namespace flashjit::tools
