#include "host_problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

namespace dsa_support {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int64_t HostProblem::cols() const {
  if (layout == Layout::bshd) return s_k;
  if (layout == Layout::thd_global) return t_k();
  return max_k;
}

void HostProblem::finalize_thd_defaults() {
  if (!thd()) return;
  int64_t lq = 0, lk = 0;
  for (size_t i = 1; i < cu_q.size(); ++i) {
    lq = std::max<int64_t>(lq, cu_q[i] - cu_q[i - 1]);
    lk = std::max<int64_t>(lk, cu_k[i] - cu_k[i - 1]);
  }
  if (max_q < 0) max_q = lq;
  if (max_k < 0) max_k = lk;
}

std::string HostProblem::describe() const {
  std::string s = fmt::format("{} H={} ratio={} scale={} w={}{}{}{}", dsa_indexer::detail::layout_name(layout), heads, ratio,
                              sm_scale, w_f32 ? "f32" : "bf16", lse ? " lse" : "", offsets.empty() ? "" : " offsets",
                              ks.empty() ? "" : " windows");
  if (thd()) {
    s += " segs=[";
    for (size_t i = 1; i < cu_q.size(); ++i) s += fmt::format("{}({},{})", i > 1 ? " " : "", cu_q[i] - cu_q[i - 1], cu_k[i] - cu_k[i - 1]);
    s += "]";
  } else {
    s += fmt::format(" B={} S_q={} S_k={}", batch, s_q, s_k);
  }
  if (!offsets.empty()) s += fmt::format(" off0={}", offsets[0]);
  return s;
}

void fill_random(HostProblem& p, uint64_t seed) {
  p.finalize_thd_defaults();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto nonzero_bf16 = [&] {
    for (;;) {
      uint16_t h = float_to_bf16(nd(rng));
      if ((h & 0x7fff) != 0) return h;
    }
  };
  const int64_t D = 128;
  p.q.resize(static_cast<size_t>(p.t_q() * p.heads * D));
  p.k.resize(static_cast<size_t>(p.t_k() * D));
  for (auto& x : p.q) x = nonzero_bf16();
  for (auto& x : p.k) x = nonzero_bf16();
  const size_t nw = static_cast<size_t>(p.t_q() * p.heads);
  p.w_bf16.resize(nw);
  p.w_f32v.resize(nw);
  for (size_t i = 0; i < nw; ++i) {
    p.w_bf16[i] = nonzero_bf16();
    p.w_f32v[i] = bf16_to_float(p.w_bf16[i]);
  }
}

void row_window(const HostProblem& p, int64_t r, int64_t* lo, int64_t* hi) {
  int64_t b, i, s_k_b, k0 = 0;
  if (!p.thd()) {
    b = r / p.s_q;
    i = r % p.s_q;
    s_k_b = p.s_k;
  } else {
    b = 0;
    while (b + 1 < static_cast<int64_t>(p.cu_q.size()) - 1 && p.cu_q[b + 1] <= r) ++b;
    i = r - p.cu_q[b];
    k0 = p.cu_k[b];
    s_k_b = p.cu_k[b + 1] - p.cu_k[b];
  }
  int64_t l = 0, h;
  if (!p.ks.empty()) {
    int64_t s = p.ks[r], e = p.ke[r];
    if (p.layout == Layout::thd_global) {
      s -= k0;
      e -= k0;
    }
    l = std::clamp<int64_t>(s, 0, s_k_b);
    h = std::clamp<int64_t>(e, 0, s_k_b);
  } else {
    const int64_t off = p.offsets.empty() ? 0 : p.offsets[b];
    h = dsa_indexer::detail::Problem::causal_limit(off, i, p.ratio, s_k_b);
  }
  if (h <= l) l = h = 0;
  const int64_t base = p.layout == Layout::thd_global ? k0 : 0;
  *lo = base + l;
  *hi = base + h;
}

namespace {
void score_row(const HostProblem& p, int64_t r, double* out) {
  const int64_t cols = p.cols(), D = 128, H = p.heads;
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) out[c] = ninf;
  int64_t lo, hi;
  row_window(p, r, &lo, &hi);
  const int64_t b = p.thd() ? 0 : r / p.s_q;
  int64_t seg = 0;
  if (p.thd())
    while (seg + 1 < static_cast<int64_t>(p.cu_q.size()) - 1 && p.cu_q[seg + 1] <= r) ++seg;
  std::vector<double> qd(static_cast<size_t>(H * D)), wd(static_cast<size_t>(H));
  for (int64_t e = 0; e < H * D; ++e) qd[e] = bf16_to_float(p.q[r * H * D + e]);
  for (int64_t h = 0; h < H; ++h) wd[h] = p.w_f32 ? p.w_f32v[r * H + h] : bf16_to_float(p.w_bf16[r * H + h]);
  for (int64_t c = lo; c < hi; ++c) {
    int64_t krow;
    if (!p.thd()) krow = b * p.s_k + c;
    else if (p.layout == Layout::thd_global) krow = c;
    else krow = p.cu_k[seg] + c;
    const uint16_t* kr = &p.k[krow * D];
    double kd[128];
    for (int d = 0; d < D; ++d) kd[d] = bf16_to_float(kr[d]);
    double acc = 0.0;
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += qd[h * D + d] * kd[d];
      acc += std::max(dot, 0.0) * wd[h];
    }
    out[c] = acc * static_cast<double>(p.sm_scale);
  }
}
}  // namespace

// Rows are independent: spread them over the machine's cores.
template <class F>
void parallel_rows(int64_t n, F f) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t nt = std::min<int64_t>(hw, std::max<int64_t>(1, n / 4));
  std::vector<std::thread> th;
  for (int64_t t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      for (int64_t r = t; r < n; r += nt) f(r);
    });
  for (auto& x : th) x.join();
}

std::vector<double> oracle_scores(const HostProblem& p) {
  const int64_t rows = p.rows(), cols = p.cols();
  std::vector<double> out(static_cast<size_t>(rows * cols));
  parallel_rows(rows, [&](int64_t r) { score_row(p, r, out.data() + r * cols); });
  return out;
}

std::vector<double> oracle_rows(const HostProblem& p, const std::vector<int64_t>& rows) {
  const int64_t cols = p.cols();
  std::vector<double> out(rows.size() * static_cast<size_t>(cols));
  parallel_rows(static_cast<int64_t>(rows.size()), [&](int64_t i) { score_row(p, rows[i], out.data() + i * cols); });
  return out;
}

std::vector<double> oracle_lse(const HostProblem& p, const std::vector<double>& scores) {
  const int64_t rows = p.rows(), cols = p.cols();
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, scores[r * cols + c]);
    if (std::isinf(m)) {
      out[r] = m;
      continue;
    }
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(scores[r * cols + c] - m);
    out[r] = m + std::log(s);
  }
  return out;
}

int64_t visible_pairs(const HostProblem& p) {
  int64_t n = 0;
  for (int64_t r = 0; r < p.rows(); ++r) {
    int64_t lo, hi;
    row_window(p, r, &lo, &hi);
    n += hi - lo;
  }
  return n;
}

Comparison compare(const float* got, const double* ref, int64_t n, int64_t cols) {
  Comparison c;
  c.cells = n;
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = got[i];
    const double r = ref[i];
    const bool gi = std::isinf(g) && g < 0, ri = std::isinf(r) && r < 0;
    if (std::isnan(g) || (std::isinf(g) && g > 0)) {
      if (c.non_finite++ == 0 && c.first_problem.empty())
        c.first_problem = fmt::format("cell ({}, {}) holds {} (ref {})", i / cols, i % cols, g, r);
      continue;
    }
    if (gi != ri) {
      if (c.pattern_mismatch++ == 0 && c.first_problem.empty())
        c.first_problem = fmt::format("cell ({}, {}) got {} ref {}", i / cols, i % cols, g, r);
      continue;
    }
    if (!ri) {
      num += (g - r) * (g - r);
      den += r * r;
    }
  }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

}  // namespace dsa_support
