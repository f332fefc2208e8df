// FP8 E4M3 inputs (issue 22) through the generic family, named, against the fp64 oracle on the dequantized inputs
// (q8 * q_scale, k8 * k_scale): rel-L2 <= kFp8ScoreTol per case and over all cases (printed at
// the end with the aim), the exact -inf pattern, every cell written (outputs are poisoned with a
// NaN before each run), LSE; plus what holds by construction: run-to-run and bf16-W == fp32-W
// bitwise, scales of 1 == no scales bitwise, power-of-two scales scale the scores exactly.
#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "edge_grid.hpp"
#include "lean_cases.hpp"

using namespace dsa_gpu_test;

namespace {

constexpr KernelFamily kFam = KernelFamily::generic;

// Makes `p` an FP8 problem; the case index picks the scales: both, q only, k only, none (over
// every 7 cases: 2 both, 2 q only, 2 k only, 1 none), and k_scale (B, S_k, 1) / THD (T_k, 1) or
// (B, S_k) / THD (T_k,).
void make_fp8(HostProblem& p, int index) {
  p.fp8 = true;
  const int mode = (index % 7) % 4;
  p.fp8_q_scale = mode == 0 || mode == 1;
  p.fp8_k_scale = mode == 0 || mode == 2;
  p.k_scale_unit_dim = index % 3 != 0;
}

HostProblem fp8(HostProblem p, int index = 0) {
  make_fp8(p, index);
  return p;
}

// fp64 lse of one row of oracle scores (-inf when none is visible).
double row_lse(const double* row, int64_t cols) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < cols; ++c) m = std::max(m, row[c]);
  if (std::isinf(m)) return m;
  double s = 0.0;
  for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c] - m);
  return m + std::log(s);
}

// Every cell of every row: exactly -inf outside the row's window, finite inside (a poisoned
// cell left unwritten is a NaN).
void check_pattern_every_cell(const HostProblem& p, const std::vector<float>& scores) {
  const int64_t cols = p.cols();
  int64_t bad = 0;
  std::string first;
  for (int64_t r = 0; r < p.rows(); ++r) {
    int64_t lo, hi;
    dsa_support::row_window(p, r, &lo, &hi);
    for (int64_t c = 0; c < cols; ++c) {
      const float v = scores[static_cast<size_t>(r * cols + c)];
      const bool ok = (c >= lo && c < hi) ? std::isfinite(v) : (std::isinf(v) && v < 0);
      if (!ok && bad++ == 0) first = fmt::format("cell ({}, {}) holds {} (window [{}, {}))", r, c, v, lo, hi);
    }
  }
  INFO("cells off the pattern: " << bad << "; " << first);
  CHECK(bad == 0);
}

// A large problem: two runs (bitwise equal), the pattern of every cell, a sample of rows against
// the oracle (fed to the FP8 aggregate), LSE of the sampled rows against the oracle's and of
// every row against the lse of the scores written.
void check_large(HostProblem p, uint64_t seed) {
  dsa_support::fill_random(p, seed);
  INFO(p.describe());
  auto dp = dsa_support::upload(p);
  const auto r1 = dsa_support::run(p, dp, kFam);
  const auto r2 = dsa_support::run(p, dp, kFam);
  CHECK(bitwise_equal(r1.scores, r2.scores));
  if (p.lse) CHECK(bitwise_equal(r1.lse, r2.lse));
  check_pattern_every_cell(p, r1.scores);

  const int64_t rows_n = p.rows(), cols = p.cols();
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < std::min<int64_t>(rows_n, 10); ++r) rows.push_back(r);  // the first tiles
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 48; ++i) rows.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows_n)));
  for (int64_t r : {rows_n / 2 - 1, rows_n / 2, rows_n - 9, rows_n - 2, rows_n - 1})
    if (r >= 0) rows.push_back(r);
  std::vector<double> mag;
  const auto ref = dsa_support::oracle_rows(p, rows, &mag);
  std::vector<float> got;
  for (int64_t r : rows) got.insert(got.end(), r1.scores.begin() + r * cols, r1.scores.begin() + (r + 1) * cols);
  const auto c = dsa_support::compare(got.data(), ref.data(), static_cast<int64_t>(ref.size()), cols);
  const Fp8Stats s = fp8_stats(got.data(), ref.data(), mag.data(), ref.size());
  INFO("sampled rows: rel-L2 " << c.rel_l2 << ", -inf mismatches " << c.pattern_mismatch << ", non-finite " << c.non_finite << "; "
                               << c.first_problem);
  CHECK(c.pattern_mismatch == 0);
  CHECK(c.non_finite == 0);
  CHECK(s.held() <= kFp8ScoreTol);
  fp8_accumulate(s);
  std::printf("case %-100s cells %8lld rel-L2 %.3e (%zu sampled rows)\n", p.describe().c_str(), static_cast<long long>(s.finite),
              c.rel_l2, rows.size());
  if (p.lse) {
    int64_t bad = 0;
    std::string first, first_self;
    for (size_t i = 0; i < rows.size(); ++i) {
      const double want = row_lse(ref.data() + i * cols, cols), g = r1.lse[static_cast<size_t>(rows[i])];
      if (!fp8_lse_ok(g, want, max_in_row(mag, static_cast<int64_t>(i), cols)) && bad++ == 0)
        first = fmt::format("row {}: got {} expected {}", rows[i], g, want);
    }
    const int64_t bad_self = lse_self_mismatches(r1.lse, r1.scores.data(), rows_n, cols, &first_self);
    INFO("lse against the oracle: " << first << "; against the written scores: " << first_self);
    CHECK(bad == 0);
    CHECK(bad_self == 0);
  }
}

}  // namespace

TEST_CASE("fp8: BSHD edge grid against the fp64 oracle", "[fp8]") { run_edge_grid(kFam, make_fp8); }

TEST_CASE("fp8: THD layouts against the fp64 oracle", "[fp8]") { run_thd_cases(kFam, make_fp8); }

TEST_CASE("fp8: explicit windows", "[fp8]") {
  run_window_cases(kFam, make_fp8);
  SECTION("THD local explicit windows (local columns), empty and clamped ones") {
    HostProblem p = fp8(thd({20, 1, 33}, {40, 0, 90}, 64, 1, Layout::thd_local), 2);
    p.ks.resize(54);
    p.ke.resize(54);
    for (int r = 0; r < 54; ++r) {
      p.ks[r] = (r * 11) % 60 - 10;
      p.ke[r] = p.ks[r] + (r * 7) % 70;
    }
    p.ks[3] = 30;
    p.ke[3] = 30;  // empty
    p.lse = true;
    p.w_f32 = true;
    check_against_oracle(p, kFam, 93);
  }
  SECTION("BSHD B 3, H 16, windows past both ends, sm_scale != 1, no scales") {
    HostProblem p = fp8(bshd(3, 41, 260, 16, 1), 3);
    p.ks.resize(123);
    p.ke.resize(123);
    for (int r = 0; r < 123; ++r) {
      p.ks[r] = r % 5 == 0 ? INT32_MIN : (r * 17) % 300 - 30;
      p.ke[r] = r % 7 == 0 ? INT32_MAX : p.ks[r] + (r * 29) % 280;
    }
    p.sm_scale = 0.0625f;
    p.lse = true;
    check_against_oracle(p, kFam, 94);
  }
}

TEST_CASE("fp8: H 64/32/16, B 1-3, bf16 and fp32 W, sm_scale, scales given and not", "[fp8]") {
  uint64_t seed = 20000;
  int index = 0;
  for (int h : {64, 32, 16})
    for (int64_t B : {1, 2, 3})
      for (int64_t ratio : {1, 4}) {
        const int i = index++;
        HostProblem p = fp8(bshd(B, 130 + 37 * B, 190 + 61 * B * ratio, h, ratio), i);
        p.w_f32 = i % 2 == 1;
        p.lse = i % 3 != 2;
        p.sm_scale = i % 4 == 0 ? 1.0f : (i % 4 == 1 ? 0.08838834764831845f : 3.0f);  // 1, 1/sqrt(128), 3
        if (i % 5 == 3) {
          p.offsets.resize(static_cast<size_t>(B));
          for (int64_t b = 0; b < B; ++b) p.offsets[static_cast<size_t>(b)] = static_cast<int32_t>(p.s_k * ratio - p.s_q - 17 * b);
        }
        check_against_oracle(p, kFam, ++seed);
      }
}

TEST_CASE("fp8: offsets near INT32_MAX and negative, BSHD and THD", "[fp8]") {
  for (int h : {64, 32, 16}) {
    HostProblem b = fp8(bshd(3, 77, 300, h, 2), h);
    b.offsets = {INT32_MAX - 77, -77 - 5, -20};
    b.lse = true;
    check_against_oracle(b, kFam, 30000 + h);
    for (Layout l : {Layout::thd_local, Layout::thd_global}) {
      HostProblem t = fp8(thd({40, 3, 70, 1}, {50, 9, 130, 64}, h, 4, l), h + 1);
      t.offsets = {INT32_MAX - 40, -3 - 1, -30, INT32_MAX - 1};
      t.lse = true;
      t.w_f32 = l == Layout::thd_global;
      check_against_oracle(t, kFam, 30100 + h + (l == Layout::thd_global ? 1 : 0));
    }
  }
}

TEST_CASE("fp8: saturated shapes: every cell, sampled rows against the oracle, run to run bitwise", "[fp8]") {
  SECTION("H 64, S_q 8192, S_k 4096, ratio 2 (the issue's headline shape), both scales, LSE") {
    HostProblem p = fp8(bshd(1, 8192, 4096, 64, 2), 7);  // both scales, (B, S_k, 1)
    p.lse = true;
    check_large(p, 40001);
  }
  SECTION("H 64, S_q 2048, S_k 8192, windows ending at i + S_k - S_q, k_scale (B, S_k), fp32 W") {
    HostProblem p = fp8(bshd(1, 2048, 8192, 64, 1), 3 * 7);  // both scales, (B, S_k)
    p.offsets = {8192 - 2048};
    p.w_f32 = true;
    p.lse = true;
    p.sm_scale = 0.08838834764831845f;
    check_large(p, 40002);
  }
  SECTION("H 32, B 2, S_q 4096, S_k 4096, ratio 1, q_scale only") {
    HostProblem p = fp8(bshd(2, 4096, 4096, 32, 1), 1);
    check_large(p, 40003);
  }
  SECTION("H 16, B 3, S_q 4096, S_k 2048, ratio 4, k_scale only, LSE") {
    HostProblem p = fp8(bshd(3, 4096, 2048, 16, 4), 2);
    p.lse = true;
    check_large(p, 40004);
  }
  SECTION("THD global, H 64, two long segments, ratio 2, both scales, k_scale (T_k,)") {
    HostProblem p = fp8(thd({4096, 3000}, {2048, 1600}, 64, 2, Layout::thd_global), 3 * 7);
    p.lse = true;
    check_large(p, 40005);
  }
  SECTION("THD local, H 64, three segments, ratio 1, no scales") {
    HostProblem p = fp8(thd({2000, 17, 3000}, {2000, 40, 3000}, 64, 1, Layout::thd_local), 3);
    p.lse = true;
    check_large(p, 40006);
  }
}

TEST_CASE("fp8: deterministic, bf16 W == fp32 W bitwise", "[fp8]") {
  HostProblem p = fp8(bshd(2, 1000, 700, 64, 2), 0);
  p.lse = true;
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(kFam, p);
  HostProblem t = fp8(thd({300, 1, 0, 700}, {150, 1, 3, 350}, 32, 2), 1);
  run_determinism_and_w_dtype(kFam, t);
  HostProblem g = fp8(thd({300, 1, 0, 700}, {150, 1, 3, 350}, 16, 2, Layout::thd_global), 3);
  g.lse = true;
  run_determinism_and_w_dtype(kFam, g);
}

TEST_CASE("fp8: scales of 1 are no scales, power-of-two scales scale the scores exactly", "[fp8]") {
  // The scales multiply the weights and the head sums: scaling every q_scale by 2 and every
  // k_scale by 4 scales each score by exactly 8 (binary scaling commutes with fp32 rounding),
  // and scales of 1 leave every bit as without scales.
  auto run_case = [](HostProblem p) {
    dsa_support::fill_random(p, 50000 + p.heads);
    INFO(p.describe());
    auto dp = dsa_support::upload(p);
    const auto base = dsa_support::run(p, dp, kFam);
    HostProblem s = p;
    for (auto& x : s.q_scale) x *= 2.0f;
    for (auto& x : s.k_scale) x *= 4.0f;
    auto ds = dsa_support::upload(s);
    const auto scaled = dsa_support::run(s, ds, kFam);
    REQUIRE(scaled.scores.size() == base.scores.size());
    int64_t bad = 0;
    std::string first;
    for (size_t i = 0; i < base.scores.size(); ++i) {
      const float want = base.scores[i] * 8.0f;
      if (std::memcmp(&want, &scaled.scores[i], 4) != 0 && bad++ == 0)
        first = fmt::format("cell {}: {} with scales x2 / x4, {} * 8 without", i, scaled.scores[i], base.scores[i]);
    }
    INFO(first);
    CHECK(bad == 0);
    HostProblem ones = p, none = p;
    std::fill(ones.q_scale.begin(), ones.q_scale.end(), 1.0f);
    std::fill(ones.k_scale.begin(), ones.k_scale.end(), 1.0f);
    none.q_scale.clear();
    none.k_scale.clear();
    auto d1 = dsa_support::upload(ones), d0 = dsa_support::upload(none);
    const auto r1 = dsa_support::run(ones, d1, kFam), r0 = dsa_support::run(none, d0, kFam);
    CHECK(bitwise_equal(r1.scores, r0.scores));
    if (p.lse) CHECK(bitwise_equal(r1.lse, r0.lse));
    // and the unscaled run is right too
    const auto ref = dsa_support::oracle_scores(none);
    const auto c = dsa_support::compare(r0.scores.data(), ref.data(), static_cast<int64_t>(ref.size()), none.cols());
    INFO("no scales: rel-L2 " << c.rel_l2 << ", -inf mismatches " << c.pattern_mismatch << "; " << c.first_problem);
    CHECK(c.ok(kFp8ScoreTol));
  };
  HostProblem b = fp8(bshd(2, 300, 500, 64, 2), 0);
  b.lse = true;
  b.sm_scale = 0.3f;
  run_case(b);
  HostProblem t = fp8(thd({100, 0, 250}, {90, 5, 300}, 32, 1, Layout::thd_global), 3 * 7);
  t.offsets = {0, 0, 50};
  run_case(t);
  HostProblem l = fp8(thd({100, 0, 250}, {90, 5, 300}, 16, 1, Layout::thd_local), 1 * 7);
  l.w_f32 = true;
  l.lse = true;
  run_case(l);
}

TEST_CASE("fp8: the same values as bf16 inputs agree within the FP8 tolerance", "[fp8]") {
  // Every E4M3 value is a bf16 value: with no scales, the bf16 path (validated to 2e-7) on the
  // decoded inputs computes the same products; same -inf pattern, scores within kFp8ScoreTol.
  for (int h : {64, 32, 16}) {
    HostProblem f = fp8(bshd(2, 200, 333, h, 2), 3);  // no scales
    f.lse = true;
    dsa_support::fill_random(f, 60000 + h);
    HostProblem g = f;
    g.fp8 = false;
    for (uint8_t c : f.q8) g.q.push_back(dsa_support::float_to_bf16(dsa_support::e4m3_decode(c)));
    for (uint8_t c : f.k8) g.k.push_back(dsa_support::float_to_bf16(dsa_support::e4m3_decode(c)));
    INFO(f.describe());
    auto df = dsa_support::upload(f), dg = dsa_support::upload(g);
    const auto rf = dsa_support::run(f, df, kFam), rg = dsa_support::run(g, dg, kFam);
    std::vector<double> gd(rg.scores.begin(), rg.scores.end());
    const auto c = dsa_support::compare(rf.scores.data(), gd.data(), static_cast<int64_t>(gd.size()), f.cols());
    INFO("fp8 against bf16: rel-L2 " << c.rel_l2 << ", -inf mismatches " << c.pattern_mismatch << "; " << c.first_problem);
    CHECK(c.ok(kFp8ScoreTol));
    std::vector<double> mag;
    dsa_support::oracle_scores(f, &mag);
    int64_t bad = 0;
    for (size_t i = 0; i < rf.lse.size(); ++i) bad += !fp8_lse_ok(rf.lse[i], rg.lse[i], max_in_row(mag, static_cast<int64_t>(i), f.cols()));
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8: alternating bf16 and FP8 calls on one buffer get their own tensor maps", "[fp8]") {
  // The launcher memoizes the last call's TMA descriptors by base and geometry: an FP8 call on
  // the buffer a bf16 call just used (same base, same shape, other element size) must not reuse
  // them, nor the bf16 call after it.
  HostProblem a = bshd(1, 300, 200, 64, 2);
  HostProblem f = fp8(bshd(1, 300, 200, 64, 2), 0);
  a.lse = f.lse = true;
  dsa_support::fill_random(a, 71);
  dsa_support::fill_random(f, 72);
  const auto ra = dsa_support::oracle_scores(a), rf = dsa_support::oracle_scores(f);
  auto da = dsa_support::upload(a);
  auto df = dsa_support::upload(f);
  df.tq.data = da.q.get();  // f's descriptors over a's q and k buffers (twice the bytes f needs)
  df.tk.data = da.k.get();
  for (int round = 0; round < 2; ++round) {
    da.q.upload(a.q.data(), a.q.size() * 2);
    da.k.upload(a.k.data(), a.k.size() * 2);
    const auto ga = dsa_support::run(a, da, KernelFamily::generic);
    const auto ca = dsa_support::compare(ga.scores.data(), ra.data(), static_cast<int64_t>(ra.size()), a.cols());
    INFO("round " << round << " bf16: rel-L2 " << ca.rel_l2 << " mismatches " << ca.pattern_mismatch << " " << ca.first_problem);
    CHECK(ca.ok(2e-7));
    da.q.upload(f.q8.data(), f.q8.size());
    da.k.upload(f.k8.data(), f.k8.size());
    const auto gf = dsa_support::run(f, df, kFam);
    const auto cf = dsa_support::compare(gf.scores.data(), rf.data(), static_cast<int64_t>(rf.size()), f.cols());
    INFO("round " << round << " fp8: rel-L2 " << cf.rel_l2 << " mismatches " << cf.pattern_mismatch << " " << cf.first_problem);
    CHECK(cf.ok(kFp8ScoreTol));
  }
}

TEST_CASE("fp8: the kernel cache compiles once per FP8 variant", "[fp8]") {
  auto before = dsa_indexer::kernel_cache_stats();
  for (int64_t sq : {64, 100, 333}) {
    HostProblem p = fp8(bshd(1, sq, sq / 2 + 1, 16, 2), 0);  // both scales each time
    p.w_f32 = true;
    p.lse = true;
    check_against_oracle(p, kFam, 9100 + sq);
  }
  auto after = dsa_indexer::kernel_cache_stats();
  CHECK(after.misses - before.misses <= 1);  // one FP8 variant (h16.wf32.lse1.bshd, e4m3) for all three shapes
  CHECK(after.hits - before.hits >= 2);
}

// Lean's FP8 main loop (named) against generic's: the same cells, the same bits (the same
// products, the same fp32 weights w * q_scale, k_scale before sm_scale); BSHD and THD, both
// weight dtypes, both scale variants, scales given and not.
TEST_CASE("fp8: lean == generic bitwise", "[fp8]") {
  auto same = [](HostProblem p, uint64_t seed) { check_fp8_lean_equals_generic(std::move(p), seed); };
  same(fp8(bshd(1, 8192, 4096, 64, 2), 0), 50001);            // both scales
  HostProblem a = fp8(bshd(2, 1056, 3000, 64, 1), 1);         // q scale only, B 2, offsets
  a.offsets = {3000 - 1056 - 1, INT32_MAX - 2000};
  a.w_f32 = true;
  same(a, 50002);
  HostProblem b = fp8(bshd(1, 2048, 8192, 64, 1), 2);         // k scale only, sm_scale != 1
  b.offsets = {8192 - 2048};
  b.sm_scale = 0.25f;
  same(b, 50003);
  same(fp8(bshd(1, 1056, 700, 64, 4), 6), 50004);             // no scales
  // lean's split variant (q-tiles x B below the SMs), its chunks offset into k_scale
  HostProblem c = fp8(bshd(1, 512, 16384, 64, 1), 0);
  c.offsets = {16384 - 512};
  same(c, 50007);
  HostProblem d = fp8(bshd(2, 256, 9000, 64, 1), 2);
  d.offsets = {9000 - 256, 100};
  same(d, 50008);
  // H 32 and 16 (q-tiles of 16 and 32 tokens), saturated and split
  same(fp8(bshd(1, 132 * 16, 3000, 32, 2), 0), 50009);
  same(fp8(bshd(1, 132 * 32, 3000, 16, 2), 1), 50010);
  HostProblem e = fp8(bshd(1, 256, 9000, 32, 1), 2);
  e.offsets = {9000 - 256};
  same(e, 50011);
  same(fp8(thd({4000, 17, 3000}, {2000, 40, 3000}, 64, 2, Layout::thd_local), 0), 50005);
  same(fp8(thd({5000, 3000}, {2500, 1500}, 64, 1, Layout::thd_global), 2), 50006);
}

// Lean FP8 keeps two Q buffers per consumer (item parity) and the consumers fold their weights from
// the raw copies the producer's cp.async left: the buffers are reused only when a CTA takes three
// items or more, so these shapes give every CTA 3-4 (BSHD, B 3, THD of short segments, four
// consumers), small enough for compute-sanitizer's memcheck and racecheck.
TEST_CASE("fp8: lean over several items per CTA (its Q buffers reused) == generic bitwise", "[fp8][fp8_reuse]") {
  auto same = [](HostProblem p, uint64_t seed, int consumers) { check_fp8_lean_equals_generic(std::move(p), seed, consumers); };
  same(fp8(bshd(1, 4224, 1024, 64, 4), 0), 50021, 2);             // 528 q-tiles, both scales
  HostProblem a = fp8(bshd(3, 1408, 600, 64, 2), 1);               // 528 items over B 3, q scale only
  a.w_f32 = true;
  a.offsets = {0, 37, INT32_MAX - 3000};
  same(a, 50022, 2);
  same(fp8(thd({700, 300, 1100, 90, 500, 260, 400, 130}, {175, 75, 275, 23, 125, 65, 100, 33}, 64, 4,
               Layout::thd_local), 2), 50023, 2);                  // 435 packed q-tiles, k scale only
  same(fp8(bshd(1, 4224, 1024, 64, 4), 6), 50024, 4);             // four consumers, no scales
}
