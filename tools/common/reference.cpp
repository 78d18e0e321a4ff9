#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace flashjit::tools {

void reference_head(const ReferenceHead& h, double* out, double* lse) {
  const std::int64_t offset = h.len_k - h.len_q;
  std::vector<double> s(std::size_t(std::max<std::int64_t>(h.len_k, 1)));
  std::vector<char> visible(s.size());
  for (std::int64_t i = 0; i < h.len_q; ++i) {
    const float* qi = h.q + i * h.q_row;
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < h.len_k; ++j) {
      const std::int64_t diag = i + offset;
      bool vis = true;
      if (h.causal && j > diag) vis = false;
      if (h.window_left && j < diag - *h.window_left) vis = false;
      if (h.window_right && j > diag + *h.window_right) vis = false;
      visible[std::size_t(j)] = vis;
      if (!vis) continue;
      const float* kj = h.k + j * h.k_row;
      double acc = 0;
      for (std::int64_t d = 0; d < h.dqk; ++d) acc += double(qi[d]) * double(kj[d]);
      double x = acc * h.scale;
      if (h.softcap) x = *h.softcap * std::tanh(x / *h.softcap);
      if (h.alibi_slope) x -= *h.alibi_slope * double(std::llabs(diag - j));
      s[std::size_t(j)] = x;
      mx = std::max(mx, x);
    }
    if (h.sink) mx = std::max(mx, *h.sink);
    double* oi = out + i * h.dv;
    std::fill(oi, oi + h.dv, 0.0);
    if (mx == -std::numeric_limits<double>::infinity()) {
      lse[i] = mx;  // nothing visible and no sink: an empty sum
      continue;
    }
    double sum = h.sink ? std::exp(*h.sink - mx) : 0.0;
    for (std::int64_t j = 0; j < h.len_k; ++j)
      if (visible[std::size_t(j)]) sum += (s[std::size_t(j)] = std::exp(s[std::size_t(j)] - mx));
    for (std::int64_t j = 0; j < h.len_k; ++j) {
      if (!visible[std::size_t(j)]) continue;
      const float* vj = h.v + j * h.v_row;
      const double w = s[std::size_t(j)] / sum;
      for (std::int64_t d = 0; d < h.dv; ++d) oi[d] += w * double(vj[d]);
    }
    lse[i] = sum > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
  }
}

}  // namespace flashjit::tools
