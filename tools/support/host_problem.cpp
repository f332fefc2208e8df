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

uint8_t e4m3_encode(float f) {
  if (std::isnan(f)) return 0x7e;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;  // saturate (+-inf too)
  if (a == 0.0) return sign;
  // The quantum of a's binade (subnormals: 2^-9); a / quantum is exact in double, and
  // nearbyint under the default rounding mode rounds half to even.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the binade is [2^(e-1), 2^e)
  const int lo = std::max(e - 1, -6);
  const double quantum = std::ldexp(1.0, lo - 3);
  const double n = std::nearbyint(a / quantum);  // 0 .. 16
  const double v = n * quantum;
  if (v >= 448.0) return sign | 0x7e;  // (does not happen below 448: 448 is on the grid)
  if (v == 0.0) return sign;           // underflow to (signed) zero
  if (v < std::ldexp(1.0, -6)) return sign | static_cast<uint8_t>(n);  // subnormal: n * 2^-9, n 1..7
  int ve;
  const double vm = std::frexp(v, &ve);  // v = vm * 2^ve, vm in [0.5, 1)
  const int exp_field = ve - 1 + 7;      // 1 .. 15
  const int mant = static_cast<int>(std::lround((vm * 2.0 - 1.0) * 8.0));  // exact: 0 .. 7
  return sign | static_cast<uint8_t>(exp_field << 3) | static_cast<uint8_t>(mant);
}

float e4m3_decode(uint8_t c) {
  if (e4m3_is_nan(c)) return std::numeric_limits<float>::quiet_NaN();
  const int exp_field = (c >> 3) & 0xf, mant = c & 7;
  const double mag = exp_field == 0 ? std::ldexp(static_cast<double>(mant), -9)
                                    : std::ldexp(static_cast<double>(8 + mant), exp_field - 10);
  const float v = static_cast<float>(mag);  // exact: at most 4 significant bits
  return (c & 0x80) ? -v : v;
}

int64_t HostProblem::cols() const {
  if (layout == Layout::bshd) return window_width > 0 ? window_width : s_k;
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
    if (window_width > 0) s += fmt::format(" window_start N={}", window_width);
  }
  if (!offsets.empty()) s += fmt::format(" off0={}", offsets[0]);
  if (fp8) {
    const char* kdesc = thd() ? (k_scale_unit_dim ? "(T_k,1)" : "(T_k,)") : (k_scale_unit_dim ? "(B,S_k,1)" : "(B,S_k)");
    s += fmt::format(" e4m3 q_scale={} k_scale={}", q_scale.empty() ? "-" : "given", k_scale.empty() ? "-" : kdesc);
  }
  return s;
}

namespace {
uint16_t nonzero_bf16(std::mt19937_64& rng, std::normal_distribution<float>& nd) {
  for (;;) {
    const uint16_t h = float_to_bf16(nd(rng));
    if ((h & 0x7fff) != 0) return h;
  }
}

// W of every (row, head): bf16 draws and their exact fp32 copies.
void fill_weights(HostProblem& p, std::mt19937_64& rng, std::normal_distribution<float>& nd) {
  const size_t nw = static_cast<size_t>(p.t_q() * p.heads);
  p.w_bf16.resize(nw);
  p.w_f32v.resize(nw);
  for (size_t i = 0; i < nw; ++i) {
    p.w_bf16[i] = nonzero_bf16(rng, nd);
    p.w_f32v[i] = bf16_to_float(p.w_bf16[i]);
  }
}

// The FP8 draw of fill_random (the bf16 one is left as it was, draw for draw).
void fill_random_fp8(HostProblem& p, std::mt19937_64& rng, std::normal_distribution<float>& nd) {
  std::uniform_real_distribution<double> u01(0.0, 1.0), u33(-3.0, 3.0);
  auto nonzero_e4m3 = [&] {
    for (;;) {
      const uint8_t c = e4m3_encode(nd(rng) * kFp8Spread);
      if ((c & 0x7f) != 0) return c;
    }
  };
  auto scale = [&] {
    return static_cast<float>(std::exp2(u33(rng)) * (1.0 + u01(rng)) / static_cast<double>(kFp8Spread));
  };
  const int64_t D = 128;
  p.q.clear();
  p.k.clear();
  p.q8.resize(static_cast<size_t>(p.t_q() * p.heads * D));
  p.k8.resize(static_cast<size_t>(p.t_k() * D));
  for (auto& x : p.q8) x = nonzero_e4m3();
  for (auto& x : p.k8) x = nonzero_e4m3();
  fill_weights(p, rng, nd);
  const size_t nw = static_cast<size_t>(p.t_q() * p.heads);
  p.q_scale.clear();
  p.k_scale.clear();
  if (p.fp8_q_scale) {
    p.q_scale.resize(nw);
    for (auto& x : p.q_scale) x = scale();
  }
  if (p.fp8_k_scale) {
    p.k_scale.resize(static_cast<size_t>(p.t_k()));
    for (auto& x : p.k_scale) x = scale();
  }
}
}  // namespace

void fill_random(HostProblem& p, uint64_t seed) {
  p.finalize_thd_defaults();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t D = 128;
  if (p.fp8) {
    fill_random_fp8(p, rng, nd);
    return;
  }
  p.q.resize(static_cast<size_t>(p.t_q() * p.heads * D));
  p.k.resize(static_cast<size_t>(p.t_k() * D));
  for (auto& x : p.q) x = nonzero_bf16(rng, nd);
  for (auto& x : p.k) x = nonzero_bf16(rng, nd);
  fill_weights(p, rng, nd);
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
    if (p.window_width > 0) {  // columns from the window's start: its first window_width keys
      h = std::min(h, s + p.window_width);
      if (h <= l) l = h = s;
      *lo = l - s;
      *hi = h - s;
      return;
    }
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
// mag (optional): each cell's magnitude, |sm_scale| * sum_h |w[h]| * sum_d |q[h,d] * k[d]| (0
// outside the window).
void score_row(const HostProblem& p, int64_t r, double* out, double* mag = nullptr) {
  const int64_t cols = p.cols(), D = 128, H = p.heads;
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) out[c] = ninf;
  if (mag)
    for (int64_t c = 0; c < cols; ++c) mag[c] = 0.0;
  int64_t lo, hi;
  row_window(p, r, &lo, &hi);
  const int64_t b = p.thd() ? 0 : r / p.s_q;
  int64_t seg = 0;
  if (p.thd())
    while (seg + 1 < static_cast<int64_t>(p.cu_q.size()) - 1 && p.cu_q[seg + 1] <= r) ++seg;
  std::vector<double> qd(static_cast<size_t>(H * D)), wd(static_cast<size_t>(H));
  if (!p.fp8) {
    for (int64_t e = 0; e < H * D; ++e) qd[e] = bf16_to_float(p.q[r * H * D + e]);
  } else {
    // FP8: the dequantized inputs, q8 * q_scale (per token and head), k8 * k_scale (per K row)
    for (int64_t e = 0; e < H * D; ++e)
      qd[e] = static_cast<double>(e4m3_decode(p.q8[r * H * D + e])) * (p.q_scale.empty() ? 1.0 : p.q_scale[r * H + e / D]);
  }
  for (int64_t h = 0; h < H; ++h) wd[h] = p.w_f32 ? p.w_f32v[r * H + h] : bf16_to_float(p.w_bf16[r * H + h]);
  for (int64_t c = lo; c < hi; ++c) {
    int64_t krow;
    if (!p.thd()) krow = b * p.s_k + c + (p.window_width > 0 ? p.ks[r] : 0);
    else if (p.layout == Layout::thd_global) krow = c;
    else krow = p.cu_k[seg] + c;
    double kd[128];
    if (!p.fp8) {
      const uint16_t* kr = &p.k[krow * D];
      for (int d = 0; d < D; ++d) kd[d] = bf16_to_float(kr[d]);
    } else {
      const uint8_t* kr = &p.k8[krow * D];
      const double ksc = p.k_scale.empty() ? 1.0 : p.k_scale[krow];
      for (int d = 0; d < D; ++d) kd[d] = static_cast<double>(e4m3_decode(kr[d])) * ksc;
    }
    double acc = 0.0, abs_acc = 0.0;
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += qd[h * D + d] * kd[d];
      acc += std::max(dot, 0.0) * wd[h];
      if (mag) {
        double abs_dot = 0.0;
        for (int d = 0; d < D; ++d) abs_dot += std::fabs(qd[h * D + d] * kd[d]);
        abs_acc += abs_dot * std::fabs(wd[h]);
      }
    }
    out[c] = acc * static_cast<double>(p.sm_scale);
    if (mag) mag[c] = abs_acc * std::fabs(static_cast<double>(p.sm_scale));
  }
}
}  // namespace

// Rows are independent: spread them over the machine's cores (a thread per row when there are
// fewer rows than cores: a sampled row of a long KV is seconds of fp64 work).
template <class F>
void parallel_rows(int64_t n, F f) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t nt = std::min<int64_t>(hw, std::max<int64_t>(1, n));
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

std::vector<double> oracle_scores(const HostProblem& p, std::vector<double>* magnitudes) {
  const int64_t rows = p.rows(), cols = p.cols();
  std::vector<double> out(static_cast<size_t>(rows * cols));
  magnitudes->assign(out.size(), 0.0);
  parallel_rows(rows, [&](int64_t r) { score_row(p, r, out.data() + r * cols, magnitudes->data() + r * cols); });
  return out;
}

std::vector<double> oracle_rows(const HostProblem& p, const std::vector<int64_t>& rows, std::vector<double>* magnitudes) {
  const int64_t cols = p.cols();
  std::vector<double> out(rows.size() * static_cast<size_t>(cols));
  magnitudes->assign(out.size(), 0.0);
  parallel_rows(static_cast<int64_t>(rows.size()),
                [&](int64_t i) { score_row(p, rows[i], out.data() + i * cols, magnitudes->data() + i * cols); });
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
