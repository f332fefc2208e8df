// The FP8 test support (tools/support): the host E4M3 codec, the FP8 draw of fill_random, the
// fp64 oracle on dequantized inputs and the descriptors the GPU runner hands the library. The
// GPU tests (tests/gpu/test_fp8.cpp) rely on all of them; this file holds them on the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gpu_runner.hpp"
#include "host_problem.hpp"
#include "ops/validate.hpp"

using dsa_support::e4m3_decode;
using dsa_support::e4m3_encode;
using dsa_support::e4m3_is_nan;
using dsa_support::HostProblem;
using dsa_support::Layout;

namespace {

// The E4M3 table written out independently of the codec: sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0: subnormal m/8 * 2^-6; S.1111.111: NaN; no infinities.
double table_value(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v = e == 0 ? (m / 8.0) * (1.0 / 64.0) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST_CASE("fp8 support: every E4M3 code decodes as the table says", "[fp8]") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    const float v = e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(v));
      CHECK(e4m3_is_nan(static_cast<uint8_t>(c)));
      continue;
    }
    CHECK_FALSE(e4m3_is_nan(static_cast<uint8_t>(c)));
    CHECK(static_cast<double>(v) == table_value(c));
    CHECK(std::signbit(v) == ((c & 0x80) != 0));
  }
  // known values
  CHECK(same_bits(e4m3_decode(0x38), 1.0f));
  CHECK(same_bits(e4m3_decode(0x7e), 448.0f));
  CHECK(same_bits(e4m3_decode(0xfe), -448.0f));
  CHECK(same_bits(e4m3_decode(0x01), std::ldexp(1.0f, -9)));
  CHECK(same_bits(e4m3_decode(0x07), 7.0f * std::ldexp(1.0f, -9)));
  CHECK(same_bits(e4m3_decode(0x08), std::ldexp(1.0f, -6)));  // the smallest normal
  CHECK(same_bits(e4m3_decode(0x00), 0.0f));
  CHECK(same_bits(e4m3_decode(0x80), -0.0f));
  CHECK(same_bits(e4m3_decode(0x40), 2.0f));
  CHECK(same_bits(e4m3_decode(0x3c), 1.5f));
  CHECK(same_bits(e4m3_decode(0x77), 240.0f));
  CHECK(same_bits(e4m3_decode(0x7d), 416.0f));
  CHECK(same_bits(e4m3_decode(0xb8), -1.0f));
  // positive codes 0x00 .. 0x7e are strictly increasing
  for (int c = 0; c < 0x7e; ++c) CHECK(e4m3_decode(static_cast<uint8_t>(c)) < e4m3_decode(static_cast<uint8_t>(c + 1)));
}

TEST_CASE("fp8 support: encode(decode(c)) == c for every non-NaN code", "[fp8]") {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    INFO("code " << c);
    CHECK(static_cast<int>(e4m3_encode(e4m3_decode(static_cast<uint8_t>(c)))) == c);
  }
}

TEST_CASE("fp8 support: encode rounds to nearest, ties to even", "[fp8]") {
  // Every midpoint between neighbouring codes (exact in float) goes to the even code (the
  // mantissa's last bit is the code's), and the floats just either side of it to the nearer.
  for (int c = 0; c < 0x7e; ++c) {
    for (int s : {0, 0x80}) {
      const float a = e4m3_decode(static_cast<uint8_t>(c | s)), b = e4m3_decode(static_cast<uint8_t>((c + 1) | s));
      const float mid = (a + b) / 2;
      INFO("codes " << (c | s) << ", " << ((c + 1) | s) << " midpoint " << mid);
      const int even = (c % 2 == 0) ? c : c + 1;
      CHECK(static_cast<int>(e4m3_encode(mid)) == (even | s));  // (+-2^-10: to +-0)
      const float toward_a = std::nextafter(mid, a), toward_b = std::nextafter(mid, b);
      CHECK(static_cast<int>(e4m3_encode(toward_a)) == (c | s));
      CHECK(static_cast<int>(e4m3_encode(toward_b)) == ((c + 1) | s));
    }
  }
  // spot checks
  CHECK(e4m3_encode(1.0625f) == 0x38);   // 1 + 1/16: between 1.0 (even) and 1.125
  CHECK(e4m3_encode(1.1875f) == 0x3a);   // between 1.125 (odd) and 1.25 (even)
  CHECK(e4m3_encode(1.9375f) == 0x40);   // between 1.875 (odd) and 2.0 (even, next binade)
  CHECK(e4m3_encode(432.0f) == 0x7e);    // between 416 (odd) and 448 (even)
  CHECK(e4m3_encode(1.5f * std::ldexp(1.0f, -9)) == 0x02);  // subnormal tie 1.5 -> 2
  CHECK(e4m3_encode(2.5f * std::ldexp(1.0f, -9)) == 0x02);  // 2.5 -> 2
  CHECK(e4m3_encode(std::ldexp(1.0f, -10)) == 0x00);        // 0.5 ulp: to zero
  CHECK(e4m3_encode(std::ldexp(1.0f, -11)) == 0x00);
  CHECK(e4m3_encode(-std::ldexp(1.0f, -12)) == 0x80);
  CHECK(e4m3_encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(e4m3_encode(0.0f) == 0x00);
  CHECK(e4m3_encode(-0.0f) == 0x80);
  CHECK(e4m3_encode(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(e4m3_encode(0.3f) == 0x2a);  // 0.3 = 1.2 * 2^-2: 1.25 * 2^-2 (0.3125) is nearer than 1.125 * 2^-2
}

TEST_CASE("fp8 support: encode saturates to +-448 and never makes a NaN", "[fp8]") {
  const float big[] = {448.0f, std::nextafter(448.0f, 1e9f), 449.0f, 464.0f, 479.0f, 480.0f, 500.0f, 1e6f,
                       std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()};
  for (float f : big) {
    INFO(f);
    CHECK(e4m3_encode(f) == 0x7e);
    CHECK(e4m3_encode(-f) == 0xfe);
  }
  CHECK_FALSE(e4m3_is_nan(e4m3_encode(std::numeric_limits<float>::quiet_NaN())));
  CHECK_FALSE(e4m3_is_nan(e4m3_encode(-std::numeric_limits<float>::quiet_NaN())));
  // random float bit patterns (every exponent): never a NaN code, always the nearest finite
  // code (ties aside) for finite inputs
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    const uint8_t c = e4m3_encode(f);
    REQUIRE_FALSE(e4m3_is_nan(c));
    if (!std::isfinite(f)) continue;
    const double x = std::fabs(static_cast<double>(f)), got = std::fabs(static_cast<double>(e4m3_decode(c)));
    if (x >= 448.0) {
      REQUIRE(got == 448.0);
      continue;
    }
    REQUIRE(std::signbit(e4m3_decode(c)) == std::signbit(f));
    for (int o = 0; o < 0x7f; ++o) REQUIRE(std::fabs(x - got) <= std::fabs(x - table_value(o)));
  }
}

TEST_CASE("fp8 support: fill_random draws E4M3 codes over the range and positive scales", "[fp8]") {
  HostProblem p;
  p.batch = 2;
  p.s_q = 300;
  p.s_k = 700;
  p.heads = 32;
  p.fp8 = true;
  dsa_support::fill_random(p, 5);
  REQUIRE(p.q8.size() == static_cast<size_t>(2 * 300 * 32 * 128));
  REQUIRE(p.k8.size() == static_cast<size_t>(2 * 700 * 128));
  CHECK(p.q.empty());
  CHECK(p.k.empty());
  int64_t subnormal = 0, big = 0, negative = 0;
  for (const auto* v : {&p.q8, &p.k8})
    for (uint8_t c : *v) {
      REQUIRE((c & 0x7f) != 0);     // never zero
      REQUIRE((c & 0x7f) != 0x7f);  // never NaN
      subnormal += (c & 0x78) == 0;
      big += std::fabs(e4m3_decode(c)) >= 256.0f;
      negative += (c & 0x80) != 0;
    }
  const int64_t n = static_cast<int64_t>(p.q8.size() + p.k8.size());
  CHECK(subnormal > 0);  // the low end of the range is used
  CHECK(big > 0);        // and the high end
  CHECK(negative > n / 3);
  CHECK(negative < 2 * n / 3);
  REQUIRE(p.q_scale.size() == static_cast<size_t>(2 * 300 * 32));
  REQUIRE(p.k_scale.size() == static_cast<size_t>(2 * 700));
  float lo = 1e30f, hi = 0.0f;
  for (const auto* v : {&p.q_scale, &p.k_scale})
    for (float s : *v) {
      REQUIRE(std::isfinite(s));
      REQUIRE(s > 0.0f);
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
  CHECK(lo >= 0.125f / dsa_support::kFp8Spread);
  CHECK(hi <= 16.0f / dsa_support::kFp8Spread);
  CHECK(hi / lo > 32.0f);  // varied
  for (size_t i = 0; i < p.w_bf16.size(); ++i) REQUIRE(same_bits(p.w_f32v[i], dsa_support::bf16_to_float(p.w_bf16[i])));
  // scales not asked for stay empty (not given)
  HostProblem u = p;
  u.fp8_q_scale = false;
  u.fp8_k_scale = false;
  dsa_support::fill_random(u, 5);
  CHECK(u.q_scale.empty());
  CHECK(u.k_scale.empty());
  // the same seed draws the same inputs
  HostProblem again = p;
  dsa_support::fill_random(again, 5);
  CHECK(again.q8 == p.q8);
  CHECK(again.k8 == p.k8);
  CHECK(again.q_scale == p.q_scale);
}

TEST_CASE("fp8 support: the oracle computes the contract on the dequantized inputs", "[fp8]") {
  auto one_cell = [](const HostProblem& p, int64_t r, int64_t c) {
    // sm_scale * sum_h w[h] * relu(q_scale[r,h] * k_scale[j] * (q8[r,h,:] . k8[j,:])), j the K row
    const int64_t H = p.heads, D = 128;
    int64_t seg = 0;
    if (p.thd())
      while (seg + 1 < static_cast<int64_t>(p.cu_q.size()) - 1 && p.cu_q[seg + 1] <= r) ++seg;
    const int64_t j = !p.thd() ? (r / p.s_q) * p.s_k + c : (p.layout == Layout::thd_global ? c : p.cu_k[seg] + c);
    double acc = 0.0;
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d)
        dot += static_cast<double>(e4m3_decode(p.q8[(r * H + h) * D + d])) * static_cast<double>(e4m3_decode(p.k8[j * D + d]));
      const double qs = p.q_scale.empty() ? 1.0 : p.q_scale[r * H + h], ks = p.k_scale.empty() ? 1.0 : p.k_scale[j];
      const double w = p.w_f32 ? p.w_f32v[r * H + h] : dsa_support::bf16_to_float(p.w_bf16[r * H + h]);
      acc += w * std::max(0.0, qs * ks * dot);
    }
    return acc * static_cast<double>(p.sm_scale);
  };
  auto check_problem = [&](HostProblem p, uint64_t seed) {
    p.fp8 = true;
    dsa_support::fill_random(p, seed);
    INFO(p.describe());
    const auto ref = dsa_support::oracle_scores(p);
    const int64_t cols = p.cols();
    int64_t checked = 0;
    for (int64_t r = 0; r < p.rows(); ++r) {
      int64_t lo, hi;
      dsa_support::row_window(p, r, &lo, &hi);
      for (int64_t c = 0; c < cols; ++c) {
        const double v = ref[r * cols + c];
        if (c < lo || c >= hi) {
          REQUIRE((std::isinf(v) && v < 0));
          continue;
        }
        if ((r + c) % 7) continue;  // a sample of the visible cells
        const double e = one_cell(p, r, c);
        REQUIRE(std::fabs(v - e) <= 1e-12 * (1.0 + std::fabs(e)));
        ++checked;
      }
    }
    CHECK(checked > 5);
  };
  HostProblem b;
  b.batch = 2;
  b.s_q = 9;
  b.s_k = 40;
  b.heads = 16;
  b.ratio = 2;
  b.sm_scale = 0.5f;
  b.offsets = {20, -3};
  check_problem(b, 11);
  b.w_f32 = true;
  b.fp8_q_scale = false;
  check_problem(b, 12);
  HostProblem t;
  t.layout = Layout::thd_local;
  t.heads = 32;
  t.cu_q = {0, 5, 5, 12};
  t.cu_k = {0, 30, 31, 50};
  t.fp8_k_scale = false;
  check_problem(t, 13);
  t.layout = Layout::thd_global;
  t.fp8_k_scale = true;
  t.ks = {0, 1, 2, 3, 40, 31, 31, 32, 33, 34, 35, 36};
  t.ke = {30, 10, 20, 3, 50, 50, 40, 50, 41, 45, 49, 48};
  check_problem(t, 14);

  // The magnitudes: the oracle's scores unchanged, |score| <= magnitude, 0 outside the windows.
  {
    HostProblem m = b;
    m.fp8 = true;
    m.sm_scale = -0.5f;
    dsa_support::fill_random(m, 16);
    std::vector<double> mag;
    const auto with = dsa_support::oracle_scores(m, &mag), without = dsa_support::oracle_scores(m);
    REQUIRE(mag.size() == with.size());
    CHECK(std::memcmp(with.data(), without.data(), with.size() * sizeof(double)) == 0);
    int64_t cancelled = 0;
    for (size_t i = 0; i < with.size(); ++i) {
      if (std::isinf(with[i])) {
        REQUIRE(mag[i] == 0.0);
        continue;
      }
      REQUIRE(std::fabs(with[i]) <= mag[i] * (1 + 1e-12));
      cancelled += std::fabs(with[i]) < 0.5 * mag[i];
    }
    CHECK(cancelled > 0);  // signed weights do cancel
    const std::vector<int64_t> rows = {3, 0, 17};
    std::vector<double> rmag;
    const auto sel = dsa_support::oracle_rows(m, rows, &rmag), sel0 = dsa_support::oracle_rows(m, rows);
    CHECK(std::memcmp(sel.data(), sel0.data(), sel.size() * sizeof(double)) == 0);
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < m.cols(); ++c) REQUIRE(rmag[i * m.cols() + c] == mag[rows[i] * m.cols() + c]);
  }

  // No scales: the fp8 oracle is the bf16 oracle of the same values (E4M3 values are bf16 values).
  HostProblem f = b;
  f.fp8 = true;
  f.fp8_q_scale = f.fp8_k_scale = false;
  dsa_support::fill_random(f, 15);
  HostProblem g = f;
  g.fp8 = false;
  for (uint8_t c : f.q8) g.q.push_back(dsa_support::float_to_bf16(e4m3_decode(c)));
  for (uint8_t c : f.k8) g.k.push_back(dsa_support::float_to_bf16(e4m3_decode(c)));
  const auto rf = dsa_support::oracle_scores(f), rg = dsa_support::oracle_scores(g);
  REQUIRE(rf.size() == rg.size());
  CHECK(std::memcmp(rf.data(), rg.data(), rf.size() * sizeof(double)) == 0);
}

TEST_CASE("fp8 support: the runner's FP8 descriptors pass the validator", "[fp8]") {
  using dsa_indexer::DType;
  namespace dd = dsa_indexer::detail;
  dsa_support::ProblemPointers ptr;
  uintptr_t a = 0x100000;
  for (void** slot : {&ptr.q, &ptr.k, &ptr.w, &ptr.out, &ptr.lse, &ptr.offsets, &ptr.cu_q, &ptr.cu_k, &ptr.ks, &ptr.ke, &ptr.q_scale,
                      &ptr.k_scale}) {
    *slot = reinterpret_cast<void*>(a);
    a += 0x100000;
  }
  auto validate = [](const dsa_support::DeviceProblem& d) { return dd::validate(d.tq, d.tk, d.tw, d.tout, d.opt, nullptr); };

  SECTION("BSHD, both scales, k_scale (B, S_k, 1) and (B, S_k)") {
    HostProblem p;
    p.batch = 3;
    p.s_q = 100;
    p.s_k = 77;
    p.heads = 64;
    p.fp8 = true;
    p.lse = true;
    dsa_support::fill_random(p, 1);
    for (bool unit : {true, false}) {
      p.k_scale_unit_dim = unit;
      dsa_support::DeviceProblem d;
      dsa_support::describe_problem(p, ptr, d);
      CHECK(d.tq.dtype == DType::e4m3);
      CHECK(d.tk.dtype == DType::e4m3);
      CHECK(d.tq.strides[1] == 64 * 128);  // elements, not bytes
      CHECK(d.tk.strides[1] == 128);
      CHECK(d.opt.q_scale.rank == 3);
      CHECK(d.opt.k_scale.rank == (unit ? 3 : 2));
      const dd::Problem q = validate(d);
      CHECK(q.qk_dtype == DType::e4m3);
      CHECK(q.has_q_scale);
      CHECK(q.has_k_scale);
      CHECK(q.q_scale == ptr.q_scale);
      CHECK(q.k_scale == ptr.k_scale);
      // the layout the oracle reads: q_scale[r * H + h] with r = b * S_q + s, k_scale[b * S_k + j]
      CHECK(q.q_scale_stride[0] == 100 * 64);
      CHECK(q.q_scale_stride[1] == 64);
      CHECK(q.q_scale_stride[2] == 1);
      CHECK(q.k_scale_stride[0] == 77);
      CHECK(q.k_scale_stride[1] == 1);
      CHECK(q.q_stride[1] == 64 * 128);
      CHECK(q.k_stride[1] == 128);
    }
    p.q_scale.clear();
    p.k_scale.clear();
    dsa_support::DeviceProblem d;
    dsa_support::describe_problem(p, ptr, d);
    CHECK_FALSE(d.opt.q_scale.present());
    CHECK_FALSE(d.opt.k_scale.present());
    const dd::Problem q = validate(d);
    CHECK_FALSE(q.has_q_scale);
    CHECK_FALSE(q.has_k_scale);
  }
  SECTION("THD, k_scale (T_k, 1) and (T_k,), both column modes") {
    HostProblem p;
    p.layout = Layout::thd_local;
    p.heads = 16;
    p.cu_q = {0, 5, 5, 12};
    p.cu_k = {0, 30, 31, 50};
    p.fp8 = true;
    dsa_support::fill_random(p, 2);
    for (Layout l : {Layout::thd_local, Layout::thd_global})
      for (bool unit : {true, false}) {
        p.layout = l;
        p.k_scale_unit_dim = unit;
        dsa_support::DeviceProblem d;
        dsa_support::describe_problem(p, ptr, d);
        CHECK(d.opt.q_scale.rank == 2);
        CHECK(d.opt.k_scale.rank == (unit ? 2 : 1));
        const dd::Problem q = validate(d);
        CHECK(q.qk_dtype == DType::e4m3);
        CHECK(q.layout == l);
        CHECK(q.has_q_scale);
        CHECK(q.has_k_scale);
        CHECK(q.q_scale_stride[1] == 16);
        CHECK(q.q_scale_stride[2] == 1);
        CHECK(q.k_scale_stride[1] == 1);
      }
  }
  SECTION("bf16 problems are described as before: bf16 q/k, no scales") {
    HostProblem p;
    p.batch = 2;
    p.s_q = 10;
    p.s_k = 20;
    p.heads = 32;
    dsa_support::fill_random(p, 3);
    dsa_support::DeviceProblem d;
    dsa_support::describe_problem(p, ptr, d);
    CHECK(d.tq.dtype == DType::bf16);
    CHECK(d.tk.dtype == DType::bf16);
    CHECK_FALSE(d.opt.q_scale.present());
    CHECK_FALSE(d.opt.k_scale.present());
    CHECK(validate(d).qk_dtype == DType::bf16);
  }
}
