#include "attention_case.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "base/host_float.hpp"
#include "reference.hpp"

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
  if (varlen()) {
    std::int64_t tq = 0, tk = 0;
    for (std::size_t i = 0; i < varlen_q.size(); ++i) tq += varlen_q[i], tk += varlen_k[i];
    s += " varlen" + std::to_string(varlen_q.size()) + " q" + std::to_string(tq) + " k" + std::to_string(tk);
  } else {
    s += " B" + std::to_string(batch) + " Sq" + std::to_string(seqlen_q) + " Sk" + std::to_string(seqlen_k);
  }
  s += " Hq" + std::to_string(heads_q) + " Hkv" + std::to_string(heads_kv) + " D" + std::to_string(head_dim_qk);
  if (head_dim_v != head_dim_qk) s += "/" + std::to_string(head_dim_v);
  s += std::string(" ") + mask_name(mask) + " " + layout_name(layout) + (lse ? " lse" : "");
  if (window) s += " win" + std::to_string(window->left) + "," + std::to_string(window->right);
  if (softcap) s += " cap" + std::to_string(int(*softcap));
  if (alibi) s += alibi_per_batch ? " alibi/b" : " alibi";
  if (sinks) s += " sinks";
  if (softmax_scale) s += " scale" + std::to_string(*softmax_scale);
  if (!kv_lens.empty()) s += " kv_lens";
  if (paged()) s += " page" + std::to_string(page_size);
  if (unowned_fill) s += " unowned=" + std::to_string(*unowned_fill);
  return s;
}

double attention_flops(const CaseSpec& s) {
  const double per_pair = 2.0 * s.heads_q * double(s.head_dim_qk + s.head_dim_v);
  const double causal_share = s.mask == Mask::causal ? 0.5 : 1.0;
  if (!s.varlen())
    return per_pair * s.batch * double(s.seqlen_q) * double(s.seqlen_k) * (s.seqlen_q == s.seqlen_k ? causal_share : 1.0);
  double f = 0;
  for (std::size_t i = 0; i < s.varlen_q.size(); ++i)
    f += per_pair * double(s.varlen_q[i]) * double(s.varlen_k[i]) * (s.varlen_q[i] == s.varlen_k[i] ? causal_share : 1.0);
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
// Rows past a varlen batch's last sequence when unowned slots are filled: a tensor allocated for
// more tokens than this call packs (odd, so no tile size divides it).
constexpr std::int64_t kVarlenTailRows = 37;
constexpr std::size_t kAlignBytes = 256;

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// One sequence's place in the tensors.
struct SeqRows {
  std::int64_t batch, q_start, len_q, k_start, len_k;
};

}  // namespace

Result<AttentionCase> AttentionCase::create(const GpuContext& gpu, const CaseSpec& s, bool keep_host) {
  if (s.layout == Layout::packed_qkv && (s.heads_q != s.heads_kv || s.head_dim_qk != s.head_dim_v ||
                                         s.seqlen_q != s.seqlen_k || s.varlen()))
    return Error(Code::invalid_argument, "packed_qkv needs Hq == Hkv, Sq == Sk, Dqk == Dv and no varlen");
  if (s.varlen_q.size() != s.varlen_k.size())
    return Error(Code::invalid_argument, "varlen_q and varlen_k must list the same number of sequences");
  if (!s.kv_lens.empty() && std::int64_t(s.kv_lens.size()) != s.sequences())
    return Error(Code::invalid_argument, "kv_lens must list one length per sequence");
  if (s.paged() && (s.kv_lens.empty() || s.layout != Layout::bshd))
    return Error(Code::invalid_argument, "a paged case needs kv_lens and the bshd layout");
  // A paged cache's last page runs past the sequence's keys (random values there): the kernels
  // would read them for a kv_len past the cache, which the reference does not model.
  for (std::int64_t b = 0; s.paged() && b < s.sequences(); ++b)
    if (s.kv_lens[std::size_t(b)] > (s.varlen() ? s.varlen_k[std::size_t(b)] : s.seqlen_k))
      return Error(Code::invalid_argument, "a paged case's kv_lens must not exceed its sequences' keys");
  AttentionCase c;
  c.spec_ = s;
  c.gpu_ = &gpu;
  c.keep_host_ = keep_host;
  const DType dt = s.dtype;
  const std::size_t es = dtype_size(dt);
  if (s.varlen()) {
    c.tb_ = 1;
    c.cu_q_ = {0};
    c.cu_k_ = {0};
    for (std::size_t i = 0; i < s.varlen_q.size(); ++i) {
      c.cu_q_.push_back(c.cu_q_.back() + s.varlen_q[i]);
      c.cu_k_.push_back(c.cu_k_.back() + s.varlen_k[i]);
    }
    const std::int64_t tail = s.unowned_fill ? kVarlenTailRows : 0;
    c.tsq_ = c.cu_q_.back() + tail;
    c.tsk_ = c.cu_k_.back() + tail;
  } else {
    c.tb_ = s.batch, c.tsq_ = s.seqlen_q, c.tsk_ = s.seqlen_k;
  }
  const std::int64_t B = c.tb_;

  Placement pq, pk, pv, po;
  std::int64_t total = 0;
  if (s.layout == Layout::packed_qkv) {
    const std::int64_t hd = s.heads_q * s.head_dim_qk, row = 3 * hd;
    const Placement base{{c.tsq_ * row, row, s.head_dim_qk, 1}, 0, B * c.tsq_ * row};
    pq = base, pk = base, pv = base;
    pk.offset = hd;
    pv.offset = 2 * hd;
    total = round_up(base.extent, kAlignElems);
  } else {
    pq = place(s.layout, B, c.tsq_, s.heads_q, s.head_dim_qk);
    pk = place(s.layout, B, c.tsk_, s.heads_kv, s.head_dim_qk);
    pv = place(s.layout, B, c.tsk_, s.heads_kv, s.head_dim_v);
    if (s.paged()) {
      // Each sequence's keys in pages of one shared pool, in shuffled order, with spare pages no
      // sequence uses (random values there too: a kernel reading a wrong page gets caught).
      constexpr std::int64_t kSparePages = 3;
      std::int64_t most = 1;
      for (std::int64_t b = 0; b < s.sequences(); ++b) most = std::max(most, c.key_capacity(b));
      c.max_pages_ = (most + s.page_size - 1) / s.page_size;
      c.table_stride_ = c.max_pages_ + 1;  // a padded row, so the stride is exercised
      const std::int64_t pages = s.sequences() * c.max_pages_ + kSparePages;
      c.pool_pages_ = pages;
      std::vector<std::int32_t> perm(static_cast<std::size_t>(pages));
      for (std::int64_t i = 0; i < pages; ++i) perm[std::size_t(i)] = std::int32_t(i);
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(s.seed ^ 0x9a9e));
      c.table_.assign(std::size_t(s.sequences() * c.table_stride_), -1);
      for (std::int64_t b = 0; b < s.sequences(); ++b)
        for (std::int64_t i = 0; i < c.max_pages_; ++i) c.table_[std::size_t(b * c.table_stride_ + i)] = perm[std::size_t(b * c.max_pages_ + i)];
      pk = {{s.page_size * s.heads_kv * s.head_dim_qk, s.heads_kv * s.head_dim_qk, s.head_dim_qk, 1}, 0,
            pages * s.page_size * s.heads_kv * s.head_dim_qk};
      pv = {{s.page_size * s.heads_kv * s.head_dim_v, s.heads_kv * s.head_dim_v, s.head_dim_v, 1}, 0,
            pages * s.page_size * s.heads_kv * s.head_dim_v};
    }
    const std::int64_t k0 = round_up(pq.extent, kAlignElems), v0 = k0 + round_up(pk.extent, kAlignElems);
    pk.offset += k0;
    pv.offset += v0;
    total = v0 + round_up(pv.extent, kAlignElems);
  }
  po = place(s.layout == Layout::packed_qkv ? Layout::bshd : s.layout, B, c.tsq_, s.heads_q, s.head_dim_v);
  const Placement* all[4] = {&pq, &pk, &pv, &po};
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 4; ++i) c.place_[t][i] = all[t]->stride[i];
    c.place_[t][4] = all[t]->offset;
  }

  auto qkv = DeviceBuffer::allocate(gpu.driver(), std::size_t(std::max<std::int64_t>(total, 1)) * es);
  if (!qkv.ok()) return std::move(qkv).error();
  c.qkv_ = std::move(qkv).value();
  auto out = DeviceBuffer::allocate(gpu.driver(), std::size_t(std::max<std::int64_t>(po.extent + po.offset, 1)) * es);
  if (!out.ok()) return std::move(out).error();
  c.out_ = std::move(out).value();
  FJ_TRY(c.fill_inputs(s.seed));

  auto view = [&](const DeviceBuffer& buf, const Placement& p, std::int64_t S, std::int64_t H, std::int64_t D) {
    TensorView t;
    t.data = static_cast<const char*>(buf.ptr()) + p.offset * es;
    t.dtype = dt;
    const std::int64_t shape[4] = {B, S, H, D};
    for (int i = 0; i < 4; ++i) t.shape[i] = shape[i], t.stride[i] = p.stride[i];
    return t;
  };
  c.args_.q = view(c.qkv_, pq, c.tsq_, s.heads_q, s.head_dim_qk);
  c.args_.k = view(c.qkv_, pk, c.tsk_, s.heads_kv, s.head_dim_qk);
  c.args_.v = view(c.qkv_, pv, c.tsk_, s.heads_kv, s.head_dim_v);
  if (s.paged()) {  // the pools' own shape: [pages, page_size, Hkv, D]
    const std::int64_t pages = pk.extent / pk.stride[0];
    c.args_.k.shape[0] = c.args_.v.shape[0] = pages;
    c.args_.k.shape[1] = c.args_.v.shape[1] = s.page_size;
  }
  c.args_.o = view(c.out_, po, c.tsq_, s.heads_q, s.head_dim_v);
  c.out_offset_bytes_ = std::size_t(po.offset) * es;
  c.args_.mask = s.mask;
  c.args_.fp32_math = s.fp32_math;
  c.args_.softmax_scale = s.softmax_scale;
  c.args_.window = s.window;
  c.args_.softcap = s.softcap;
  if (s.lse) {
    auto l = DeviceBuffer::allocate(gpu.driver(), std::size_t(std::max<std::int64_t>(B * s.heads_q * c.tsq_, 1)) * sizeof(float));
    if (!l.ok()) return std::move(l).error();
    c.lse_buf_ = std::move(l).value();
    c.args_.lse = LseView::contiguous(static_cast<float*>(c.lse_buf_.ptr()), B, s.heads_q, c.tsq_);
  }

  // The small side inputs, each in a 256-byte aligned slot of one buffer:
  // cu_seqlens_q | cu_seqlens_k | alibi slopes | sinks.
  std::mt19937_64 rng(s.seed * 7919 + 17);
  std::uniform_real_distribution<float> slope(0.01f, 1.f);
  std::normal_distribution<float> sink(s.sink_mean, 1.f);
  const std::int64_t n = s.sequences();
  if (s.alibi) {
    c.alibi_.resize(std::size_t((s.alibi_per_batch ? n : 1) * s.heads_q));
    for (float& x : c.alibi_) x = slope(rng);
  }
  if (s.sinks) {
    c.sinks_.resize(std::size_t(s.heads_q));
    for (float& x : c.sinks_) x = sink(rng);
  }
  std::vector<unsigned char> side;
  auto append = [&](const void* data, std::size_t bytes) {
    const std::size_t at = (side.size() + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    side.resize(at + std::max<std::size_t>(bytes, 1));
    if (bytes) std::memcpy(side.data() + at, data, bytes);
    return at;
  };
  std::vector<std::int32_t> cq(c.cu_q_.begin(), c.cu_q_.end()), ck(c.cu_k_.begin(), c.cu_k_.end());
  const std::size_t at_cq = append(cq.data(), cq.size() * 4), at_ck = append(ck.data(), ck.size() * 4);
  std::vector<std::int32_t> lens(s.kv_lens.begin(), s.kv_lens.end());
  const std::size_t at_lens = append(lens.data(), lens.size() * 4);
  c.kv_lens_offset_ = at_lens;
  std::vector<std::int32_t> table = c.table_;
  if (s.unowned_fill) {
    // Entries past the pages a sequence's used keys need are whatever the framework left there:
    // out of range both ways here (the kernels clamp them; those keys are masked).
    for (std::int64_t b = 0; s.paged() && b < n; ++b)
      for (std::int64_t i = (c.used_keys(b) + s.page_size - 1) / s.page_size; i < c.max_pages_; ++i)
        table[std::size_t(b * c.table_stride_ + i)] = i % 2 ? std::numeric_limits<std::int32_t>::max() : -1000000;
  }
  const std::size_t at_table = append(table.data(), table.size() * 4);
  const std::size_t at_alibi = append(c.alibi_.data(), c.alibi_.size() * 4), at_sinks = append(c.sinks_.data(), c.sinks_.size() * 4);
  auto extras = DeviceBuffer::allocate(gpu.driver(), side.size());
  if (!extras.ok()) return std::move(extras).error();
  c.extras_ = std::move(extras).value();
  FJ_TRY(c.extras_.upload(side.data(), side.size()));
  const char* base = static_cast<const char*>(c.extras_.ptr());
  if (s.varlen()) {
    std::int64_t max_q = 0, max_k = 0;
    for (std::size_t i = 0; i < s.varlen_q.size(); ++i) max_q = std::max(max_q, s.varlen_q[i]), max_k = std::max(max_k, s.varlen_k[i]);
    c.args_.varlen = Varlen{reinterpret_cast<const std::int32_t*>(base + at_cq), reinterpret_cast<const std::int32_t*>(base + at_ck),
                            n, max_q, max_k};
  }
  if (s.varlen() && s.paged()) c.args_.varlen->cu_seqlens_k = nullptr;  // keys come through the table
  if (!s.kv_lens.empty()) c.args_.kv_lens = reinterpret_cast<const std::int32_t*>(base + at_lens);
  if (s.paged())
    c.args_.paged = PagedKv{reinterpret_cast<const std::int32_t*>(base + at_table), c.table_stride_, c.max_pages_};
  if (s.alibi) c.args_.alibi = Alibi{reinterpret_cast<const float*>(base + at_alibi), s.alibi_per_batch ? s.heads_q : 0};
  if (s.sinks) c.args_.sinks = reinterpret_cast<const float*>(base + at_sinks);
  if (!keep_host) c.q_.clear(), c.k_.clear(), c.v_.clear();
  return c;
}

Status AttentionCase::fill_inputs(std::uint64_t seed) {
  const CaseSpec& s = spec_;
  const DType dt = s.dtype;
  const std::size_t es = dtype_size(dt);
  // Random normal inputs, quantized; written through the layout into one host staging buffer.
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<unsigned char> staging(qkv_.bytes(), 0);
  auto fill = [&](std::vector<float>& dst, int t, std::int64_t S, std::int64_t H, std::int64_t D) {
    const std::int64_t* p = place_[t];
    dst.resize(std::size_t(tb_ * S * H * D));
    std::size_t i = 0;
    for (std::int64_t b = 0; b < tb_; ++b)
      for (std::int64_t r = 0; r < S; ++r)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d, ++i) {
            const float x = quantize(normal(rng), dt);
            dst[i] = x;
            store(staging.data(), p[4] + b * p[0] + r * p[1] + h * p[2] + d * p[3], x, dt);
          }
  };
  fill(q_, 0, tsq_, s.heads_q, s.head_dim_qk);
  if (!s.paged()) {
    fill(k_, 1, tsk_, s.heads_kv, s.head_dim_qk);
    fill(v_, 2, tsk_, s.heads_kv, s.head_dim_v);
  } else {
    // Random values across the whole pools first, then each sequence's keys into its pages.
    for (int t = 1; t <= 2; ++t) {
      const std::int64_t* p = place_[t];
      const std::int64_t pages = pool_pages_, D = t == 1 ? s.head_dim_qk : s.head_dim_v;
      for (std::int64_t i = 0; i < pages * p[0]; ++i) store(staging.data(), p[4] + i, quantize(normal(rng), dt), dt);
      std::vector<float>& dst = t == 1 ? k_ : v_;
      dst.assign(std::size_t(tb_ * tsk_ * s.heads_kv * D), 0.f);
      for (std::int64_t b = 0; b < s.sequences(); ++b) {
        const std::int64_t kb = s.varlen() ? 0 : b, k0 = s.varlen() ? cu_k_[std::size_t(b)] : 0;
        for (std::int64_t j = 0; j < key_capacity(b); ++j) {
          const std::int64_t page = table_[std::size_t(b * table_stride_ + j / s.page_size)];
          for (std::int64_t h = 0; h < s.heads_kv; ++h)
            for (std::int64_t d = 0; d < D; ++d) {
              const float x = quantize(normal(rng), dt);
              dst[std::size_t(((kb * tsk_ + k0 + j) * s.heads_kv + h) * D + d)] = x;
              store(staging.data(), p[4] + page * p[0] + (j % s.page_size) * p[1] + h * p[2] + d * p[3], x, dt);
            }
        }
      }
    }
  }
  (void)es;
  if (s.unowned_fill) fill_unowned(staging);
  return qkv_.upload(staging.data(), staging.size());
}

void AttentionCase::fill_unowned(std::vector<unsigned char>& staging) const {
  const CaseSpec& s = spec_;
  // Which rows of each tensor some sequence owns: rows [tb_ * rows_per_batch) of q / of k and v
  // (batch-major; with paged, pool slots page-major).
  const std::int64_t k_rows = s.paged() ? pool_pages_ * s.page_size : tb_ * tsk_;
  std::vector<char> q_owned(std::size_t(tb_ * tsq_), 0), k_owned(std::size_t(k_rows), 0);
  for (std::int64_t b = 0; b < s.sequences(); ++b) {
    const std::int64_t qb = s.varlen() ? cu_q_[std::size_t(b)] : b * tsq_;
    const std::int64_t len_q = s.varlen() ? s.varlen_q[std::size_t(b)] : s.seqlen_q;
    std::fill_n(q_owned.begin() + qb, len_q, 1);
    for (std::int64_t j = 0; j < used_keys(b); ++j) {
      const std::int64_t row = s.paged() ? table_[std::size_t(b * table_stride_ + j / s.page_size)] * s.page_size + j % s.page_size
                                         : (s.varlen() ? cu_k_[std::size_t(b)] : b * tsk_) + j;
      k_owned[std::size_t(row)] = 1;
    }
  }
  // Row `row` of tensor t (0 q, 1 k, 2 v) holds x in every head and column.
  auto fill_row = [&](int t, std::int64_t row, std::int64_t rows_per_batch, std::int64_t H, std::int64_t D) {
    const std::int64_t* p = place_[t];
    const std::int64_t b = row / rows_per_batch, r = row % rows_per_batch;
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        store(staging.data(), p[4] + b * p[0] + r * p[1] + h * p[2] + d * p[3], *s.unowned_fill, s.dtype);
  };
  for (std::int64_t row = 0; row < std::int64_t(q_owned.size()); ++row)
    if (!q_owned[std::size_t(row)]) fill_row(0, row, tsq_, s.heads_q, s.head_dim_qk);
  const std::int64_t k_rows_per_batch = s.paged() ? s.page_size : tsk_;
  for (std::int64_t row = 0; row < k_rows; ++row) {
    if (k_owned[std::size_t(row)]) continue;
    fill_row(1, row, k_rows_per_batch, s.heads_kv, s.head_dim_qk);
    fill_row(2, row, k_rows_per_batch, s.heads_kv, s.head_dim_v);
  }
}

std::int64_t AttentionCase::key_capacity(std::int64_t b) const {
  return spec_.varlen() ? spec_.varlen_k[std::size_t(b)] : spec_.seqlen_k;
}

std::int64_t AttentionCase::used_keys(std::int64_t b) const {
  const std::int64_t cap = key_capacity(b);
  if (spec_.kv_lens.empty()) return cap;
  return std::min(std::max<std::int64_t>(spec_.kv_lens[std::size_t(b)], 0), cap);  // as the kernels clamp
}

Status AttentionCase::set_kv_lens(const std::vector<std::int64_t>& lens) {
  if (spec_.kv_lens.empty() || lens.size() != spec_.kv_lens.size())
    return Error(Code::invalid_argument, "set_kv_lens needs a case made with kv_lens, one per sequence");
  std::vector<std::int32_t> v(lens.begin(), lens.end());
  FJ_TRY(extras_.upload(v.data(), v.size() * sizeof(std::int32_t), kv_lens_offset_));
  spec_.kv_lens = lens;
  return {};
}

Status AttentionCase::refill(std::uint64_t seed) {
  if (!keep_host_) return Error(Code::invalid_argument, "case was created without host data");
  return fill_inputs(seed);
}

Status AttentionCase::poison() const {
  FJ_TRY(out_.fill_bytes(0xFF));
  if (spec_.lse) FJ_TRY(lse_buf_.fill_bytes(0xFF));
  return {};
}

Result<CheckResult> AttentionCase::check() const {
  if (!keep_host_) return Error(Code::invalid_argument, "case was created without host data");
  const CaseSpec& s = spec_;
  const DType dt = s.dtype;
  std::vector<unsigned char> raw(out_.bytes());
  FJ_TRY(out_.download(raw.data(), raw.size()));
  std::vector<float> lse_dev;
  if (s.lse) {
    lse_dev.resize(std::size_t(tb_ * s.heads_q * tsq_));
    FJ_TRY(lse_buf_.download(lse_dev.data(), lse_dev.size() * sizeof(float)));
  }
  const TensorView& o = args_.o;
  const unsigned char* obase = raw.data() + out_offset_bytes_;
  std::vector<SeqRows> seqs;
  for (std::int64_t b = 0; b < s.sequences(); ++b)
    seqs.push_back(s.varlen() ? SeqRows{0, cu_q_[b], s.varlen_q[b], cu_k_[b], used_keys(b)}
                              : SeqRows{b, 0, s.seqlen_q, 0, used_keys(b)});
  const double scale = s.softmax_scale ? double(*s.softmax_scale) : 1.0 / std::sqrt(double(s.head_dim_qk));

  const std::int64_t pairs = s.sequences() * s.heads_q;
  const unsigned nthreads = std::max(1u, std::min(std::thread::hardware_concurrency(), unsigned(std::max<std::int64_t>(pairs, 1))));
  std::vector<CheckResult> partial(nthreads);
  std::vector<double> num(nthreads, 0), den(nthreads, 0);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nthreads; ++t) {
    pool.emplace_back([&, t] {
      CheckResult& r = partial[t];
      for (std::int64_t pair = t; pair < pairs; pair += nthreads) {
        const SeqRows& sq = seqs[std::size_t(pair / s.heads_q)];
        const std::int64_t h = pair % s.heads_q, hk = h / (s.heads_q / s.heads_kv);
        ReferenceHead ref;
        ref.q = q_.data() + ((sq.batch * tsq_ + sq.q_start) * s.heads_q + h) * s.head_dim_qk;
        ref.k = k_.data() + ((sq.batch * tsk_ + sq.k_start) * s.heads_kv + hk) * s.head_dim_qk;
        ref.v = v_.data() + ((sq.batch * tsk_ + sq.k_start) * s.heads_kv + hk) * s.head_dim_v;
        ref.q_row = s.heads_q * s.head_dim_qk;
        ref.k_row = s.heads_kv * s.head_dim_qk;
        ref.v_row = s.heads_kv * s.head_dim_v;
        ref.len_q = sq.len_q, ref.len_k = sq.len_k, ref.dqk = s.head_dim_qk, ref.dv = s.head_dim_v;
        ref.scale = scale;
        ref.causal = s.mask == Mask::causal;
        if (s.window) {
          if (s.window->left >= 0) ref.window_left = s.window->left;
          if (s.window->right >= 0) ref.window_right = s.window->right;
        }
        if (s.softcap) ref.softcap = *s.softcap;
        if (s.alibi) ref.alibi_slope = alibi_[std::size_t((s.alibi_per_batch ? pair / s.heads_q : 0) * s.heads_q + h)];
        if (s.sinks) ref.sink = sinks_[std::size_t(h)];
        std::vector<double> want(std::size_t(sq.len_q * s.head_dim_v)), want_lse(std::size_t(sq.len_q));
        reference_head(ref, want.data(), want_lse.data());
        for (std::int64_t i = 0; i < sq.len_q; ++i) {
          const std::int64_t row = sq.q_start + i;
          for (std::int64_t d = 0; d < s.head_dim_v; ++d) {
            const std::int64_t idx = sq.batch * o.stride[0] + row * o.stride[1] + h * o.stride[2] + d * o.stride[3];
            const double got = load(obase, idx, dt), w = want[std::size_t(i * s.head_dim_v + d)];
            if (!std::isfinite(got)) {
              ++r.unwritten;
              continue;
            }
            num[t] += (got - w) * (got - w);
            den[t] += w * w;
            r.max_abs = std::max(r.max_abs, std::abs(got - w));
          }
          if (s.lse) {
            const float got = lse_dev[std::size_t((sq.batch * s.heads_q + h) * tsq_ + row)];
            const double w = want_lse[std::size_t(i)];
            if (std::isinf(w)) {
              if (!(std::isinf(got) && got < 0)) ++r.lse_bad;
            } else if (!std::isfinite(got)) {
              ++r.lse_bad;
            } else {
              r.lse_max_abs = std::max(r.lse_max_abs, std::abs(double(got) - w));
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
