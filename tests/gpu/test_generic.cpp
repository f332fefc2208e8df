#include <climits>

#include "edge_grid.hpp"

using namespace dsa_gpu_test;

TEST_CASE("generic: BSHD edge grid against the fp64 oracle", "[generic]") { run_edge_grid(KernelFamily::generic); }

TEST_CASE("generic: THD layouts against the fp64 oracle", "[generic]") { run_thd_cases(KernelFamily::generic); }

TEST_CASE("generic: explicit windows", "[generic]") { run_window_cases(KernelFamily::generic); }

TEST_CASE("generic: partly visible block left of the last one is masked", "[generic]") {
  // H 32, ratio 1, offset 1: tokens 60..63 see columns up to 61..64, so a 16-token tile
  // straddles the 64-column boundary and block 0 still holds cells that must be -inf.
  HostProblem p = bshd(1, 64, 200, 32, 1);
  p.offsets = {1};
  auto r = check_against_oracle(p, KernelFamily::generic, 61);
  const int64_t cols = p.cols();
  CHECK(std::isinf(r.gpu.scores[60 * cols + 62]));
  CHECK(std::isfinite(r.gpu.scores[60 * cols + 61]));
  CHECK(std::isfinite(r.gpu.scores[63 * cols + 64]));
  for (int32_t off : {2, 3, 5, 62, 63}) {
    HostProblem q = bshd(1, 128, 200, 32, 1);
    q.offsets = {off};
    check_against_oracle(q, KernelFamily::generic, 61 + off);
  }
}

TEST_CASE("generic: THD segment boundaries inside a q-tile", "[generic]") {
  // H 64 packs 8 tokens per tile: segments of 3, 5, 1, 13 and 2 tokens cross tile boundaries.
  HostProblem p = thd({3, 5, 1, 13, 2, 40}, {100, 7, 1, 64, 65, 129}, 64, 1);
  p.offsets = {97, 2, 0, 51, 63, 89};
  p.lse = true;
  check_against_oracle(p, KernelFamily::generic, 71);
  HostProblem g = p;
  g.layout = Layout::thd_global;
  check_against_oracle(g, KernelFamily::generic, 72);
}

TEST_CASE("generic: large shapes against the reference kernel", "[generic]") {
  for (auto [B, sq, sk, h, ratio] : {std::tuple<int64_t, int64_t, int64_t, int, int64_t>{1, 2048, 1024, 64, 2},
                                     {2, 1000, 1300, 32, 1}, {1, 1536, 384, 16, 4}}) {
    HostProblem p = bshd(B, sq, sk, h, ratio);
    p.lse = true;
    p.sm_scale = 0.3f;
    dsa_support::fill_random(p, 8000 + sq);
    INFO(p.describe());
    auto dp = dsa_support::upload(p);
    auto gen = dsa_support::run(p, dp, KernelFamily::generic);
    auto ref = dsa_support::run(p, dp, KernelFamily::reference);
    std::vector<double> refd(ref.scores.begin(), ref.scores.end());
    auto c = dsa_support::compare(gen.scores.data(), refd.data(), static_cast<int64_t>(refd.size()), p.cols());
    INFO("rel-L2 " << c.rel_l2 << " mismatches " << c.pattern_mismatch << " " << c.first_problem);
    CHECK(c.pattern_mismatch == 0);
    CHECK(c.non_finite == 0);
    CHECK(c.rel_l2 <= 2e-7);
    // and a sample of rows against fp64
    std::vector<int64_t> rows = {0, 1, sq / 2, sq - 1, B * sq - 1};
    auto o = dsa_support::oracle_rows(p, rows);
    std::vector<float> got;
    for (auto r : rows) got.insert(got.end(), gen.scores.begin() + r * p.cols(), gen.scores.begin() + (r + 1) * p.cols());
    auto c2 = dsa_support::compare(got.data(), o.data(), static_cast<int64_t>(o.size()), p.cols());
    CHECK(c2.ok(2e-7));
    int64_t lse_bad = 0;
    for (size_t i = 0; i < gen.lse.size(); ++i) {
      const float a = gen.lse[i], b = ref.lse[i];
      if (std::isinf(b) ? !(std::isinf(a) && a < 0) : std::fabs(a - b) > 2e-5f * (1.0f + std::fabs(b))) ++lse_bad;
    }
    CHECK(lse_bad == 0);
  }
}

TEST_CASE("generic: deterministic, bf16 W == fp32 W bitwise", "[generic]") {
  HostProblem p = bshd(2, 1000, 700, 64, 2);
  p.lse = true;
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(KernelFamily::generic, p);
  HostProblem t = thd({300, 1, 0, 700}, {150, 1, 3, 350}, 32, 2);
  run_determinism_and_w_dtype(KernelFamily::generic, t);
}

TEST_CASE("generic: back-to-back calls on other buffers and shapes get their own tensor maps", "[generic]") {
  // The launcher reuses the last call's TMA descriptors when base and geometry repeat: a call
  // on another buffer of the same shape, or on another shape at the same buffer, must not.
  HostProblem a = bshd(1, 300, 200, 64, 2), b = a, small = bshd(1, 200, 120, 64, 2);
  a.lse = b.lse = small.lse = true;
  dsa_support::fill_random(a, 31);
  dsa_support::fill_random(b, 32);
  dsa_support::fill_random(small, 33);
  auto da = dsa_support::upload(a), db = dsa_support::upload(b);
  const auto ra = dsa_support::oracle_scores(a), rb = dsa_support::oracle_scores(b), rs = dsa_support::oracle_scores(small);
  auto ok = [](const dsa_support::GpuResult& g, const std::vector<double>& ref, int64_t cols) {
    auto c = dsa_support::compare(g.scores.data(), ref.data(), static_cast<int64_t>(ref.size()), cols);
    INFO("rel-L2 " << c.rel_l2 << " mismatches " << c.pattern_mismatch << " " << c.first_problem);
    return c.ok(2e-7);
  };
  for (int round = 0; round < 2; ++round) {
    CHECK(ok(dsa_support::run(a, da, KernelFamily::generic), ra, a.cols()));
    CHECK(ok(dsa_support::run(b, db, KernelFamily::generic), rb, b.cols()));
    // the smaller problem's inputs written into a's buffers: same bases, other geometry
    auto ds = dsa_support::upload(small);
    da.q.upload(small.q.data(), small.q.size() * 2);
    da.k.upload(small.k.data(), small.k.size() * 2);
    ds.tq.data = da.q.get();
    ds.tk.data = da.k.get();
    CHECK(ok(dsa_support::run(small, ds, KernelFamily::generic), rs, small.cols()));
    da = dsa_support::upload(a);
  }
}

TEST_CASE("generic: the kernel cache compiles once per variant", "[generic]") {
  auto before = dsa_indexer::kernel_cache_stats();
  for (int64_t sq : {64, 100, 333}) {
    HostProblem p = bshd(1, sq, sq / 2 + 1, 16, 2);
    p.w_f32 = true;
    p.lse = true;
    p.layout = Layout::bshd;
    check_against_oracle(p, KernelFamily::generic, 9000 + sq);
  }
  auto after = dsa_indexer::kernel_cache_stats();
  CHECK(after.misses - before.misses <= 1);  // one variant (h16.wf32.lse1.bshd) for all three shapes
  CHECK(after.hits - before.hits >= 2);
}
