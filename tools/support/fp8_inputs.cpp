#include "fp8_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

namespace dsa_support::fp8in {

namespace {

// Splits [0, n) into one contiguous range per core.
template <class F>
void parallel_ranges(int64_t n, F f) {
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  const int64_t nt = std::min<int64_t>(hw, std::max<int64_t>(1, n / 64));
  std::vector<std::thread> th;
  for (int64_t t = 0; t < nt; ++t)
    th.emplace_back([&, t] { f(n * t / nt, n * (t + 1) / nt); });
  for (auto& x : th) x.join();
}

// A per-row stream of N(0,1) draws: splitmix64 over (seed, row), Box-Muller.
class RowNormal {
 public:
  RowNormal(uint64_t seed, uint64_t row) : x_(seed * 0x9E3779B97F4A7C15ull ^ (row + 1) * 0xD1B54A32D192ED03ull) {}
  float next() {
    if (have_) {
      have_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
    spare_ = static_cast<float>(r * std::sin(t));
    have_ = true;
    return static_cast<float>(r * std::cos(t));
  }

 private:
  uint64_t bits() {
    uint64_t z = (x_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(bits() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  uint64_t x_;
  float spare_ = 0.0f;
  bool have_ = false;
};

uint16_t nonzero_bf16(RowNormal& g) {
  for (;;) {
    const uint16_t h = float_to_bf16(g.next());
    if ((h & 0x7fff) != 0) return h;
  }
}

}  // namespace

void quantize_rows_bf16(const uint16_t* x, int64_t rows, uint8_t* codes, float* scales) {
  parallel_ranges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* xr = x + r * 128;
      float amax = 0.0f;
      for (int d = 0; d < 128; ++d) amax = std::max(amax, std::fabs(bf16_to_float(xr[d])));
      const float s = std::max(amax, 1e-4f) / kE4m3Max;
      scales[r] = s;
      for (int d = 0; d < 128; ++d) codes[r * 128 + d] = encode(bf16_to_float(xr[d]) / s);
    }
  });
}

Fp8Inputs quantize(const HostProblem& p) {
  Fp8Inputs f;
  const int64_t qrows = p.t_q() * p.heads, krows = p.t_k();
  f.q8.resize(static_cast<size_t>(qrows * 128));
  f.q_scale.resize(static_cast<size_t>(qrows));
  f.k8.resize(static_cast<size_t>(krows * 128));
  f.k_scale.resize(static_cast<size_t>(krows));
  quantize_rows_bf16(p.q.data(), qrows, f.q8.data(), f.q_scale.data());
  quantize_rows_bf16(p.k.data(), krows, f.k8.data(), f.k_scale.data());
  return f;
}

void fill_random_rows(HostProblem& p, uint64_t seed) {
  p.finalize_thd_defaults();
  const int64_t H = p.heads, tq = p.t_q(), tk = p.t_k();
  p.q.resize(static_cast<size_t>(tq * H * 128));
  p.k.resize(static_cast<size_t>(tk * 128));
  p.w_bf16.resize(static_cast<size_t>(tq * H));
  p.w_f32v.resize(p.w_bf16.size());
  // Row streams: q rows (token, head) first, then k rows, then one W stream per token.
  parallel_ranges(tq * H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RowNormal g(seed, static_cast<uint64_t>(r));
      for (int d = 0; d < 128; ++d) p.q[static_cast<size_t>(r * 128 + d)] = nonzero_bf16(g);
    }
  });
  parallel_ranges(tk, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RowNormal g(seed, static_cast<uint64_t>(tq * H + r));
      for (int d = 0; d < 128; ++d) p.k[static_cast<size_t>(r * 128 + d)] = nonzero_bf16(g);
    }
  });
  parallel_ranges(tq, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RowNormal g(seed, static_cast<uint64_t>(tq * H + tk + r));
      for (int64_t h = 0; h < H; ++h) {
        const size_t i = static_cast<size_t>(r * H + h);
        p.w_bf16[i] = nonzero_bf16(g);
        p.w_f32v[i] = bf16_to_float(p.w_bf16[i]);
      }
    }
  });
}

std::vector<uint8_t> random_codes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  const int64_t rows = static_cast<int64_t>((n + 127) / 128);
  parallel_ranges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RowNormal g(seed, static_cast<uint64_t>(r));
      for (size_t i = static_cast<size_t>(r) * 128; i < std::min(n, static_cast<size_t>(r + 1) * 128); ++i) v[i] = encode(g.next());
    }
  });
  return v;
}

HostProblem as_fp8_problem(HostProblem p, Fp8Inputs f) {
  p.fp8 = true;
  p.q8 = std::move(f.q8);
  p.k8 = std::move(f.k8);
  p.q_scale = std::move(f.q_scale);
  p.k_scale = std::move(f.k_scale);
  p.q.clear();  // the bf16 draws are not read by the FP8 oracle
  p.k.clear();
  return p;
}

std::vector<double> oracle_rows(const HostProblem& p, const Fp8Inputs& f, const std::vector<int64_t>& rows) {
  return dsa_support::oracle_rows(as_fp8_problem(p, f), rows);
}

}  // namespace dsa_support::fp8in
