// Lean with four consumer warpgroups (m64n128 over 128 packed token-head rows each; session 11's
// experiment, set_lean_consumers(4)): against the fp64 oracle, and bitwise against generic and
// against lean's two-consumer kernels (the same per-lane terms in the same order), bf16 and FP8,
// BSHD at H 64, 32 and 16, the split variant and THD, run to run.
#include <climits>
#include <cstring>

#include "cuda/driver.hpp"
#include "dispatch/planner.hpp"
#include "edge_grid.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "ops/validate.hpp"

using namespace dsa_gpu_test;

namespace {

namespace dd = dsa_indexer::detail;

// set_lean_consumers is process-wide: the default comes back whatever a check throws.
struct FourConsumers {
  FourConsumers() { dd::set_lean_consumers(4); }
  ~FourConsumers() { dd::set_lean_consumers(2); }
  FourConsumers(const FourConsumers&) = delete;
  FourConsumers& operator=(const FourConsumers&) = delete;
};

// The consumers of the kernel a lean call of these inputs runs (the planner's choice).
int planned_consumers(const dsa_support::DeviceProblem& dp) {
  const dd::Problem prob = dd::validate(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, nullptr);
  return dd::lean_spec_consumers(dd::make_plan(prob, dd::device_info(0), dd::lean_family()).spec);
}

// Lean with four consumers against the oracle; then the same inputs through generic, through
// lean with two consumers and through four again: all must agree bit for bit.
void check_lean4(HostProblem p, uint64_t seed) {
  INFO(p.describe());
  CaseResult r;
  {
    FourConsumers four;
    r = check_against_oracle(p, KernelFamily::lean, seed);
  }
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p);
  CHECK(planned_consumers(dp) == 2);
  auto gen = dsa_support::run(p, dp, KernelFamily::generic);
  auto two = dsa_support::run(p, dp, KernelFamily::lean);
  CHECK(bitwise_equal(r.gpu.scores, gen.scores));
  CHECK(bitwise_equal(r.gpu.scores, two.scores));
  FourConsumers four;
  REQUIRE(planned_consumers(dp) == 4);  // the call above ran the four-consumer kernel
  auto again = dsa_support::run(p, dp, KernelFamily::lean);
  CHECK(bitwise_equal(r.gpu.scores, again.scores));
}

// Large shapes (no fp64 oracle of every cell): four consumers bitwise against generic and two.
void check_lean4_bitwise(HostProblem p, uint64_t seed) {
  INFO(p.describe());
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p);
  auto gen = dsa_support::run(p, dp, KernelFamily::generic);
  auto two = dsa_support::run(p, dp, KernelFamily::lean);
  FourConsumers four;
  REQUIRE(planned_consumers(dp) == 4);
  auto got = dsa_support::run(p, dp, KernelFamily::lean);
  CHECK(bitwise_equal(got.scores, gen.scores));
  CHECK(bitwise_equal(got.scores, two.scores));
}

HostProblem fp8(HostProblem p, bool q_scale, bool k_scale) {
  p.fp8 = true;
  p.fp8_q_scale = q_scale;
  p.fp8_k_scale = k_scale;
  return p;
}

}  // namespace

TEST_CASE("lean4: saturated H 64 shapes against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  // 1056 tokens = 132 q-tiles: one per SM of an H100/H200
  check_lean4(bshd(1, 1056, 528, 64, 2), 2301);
  HostProblem s = bshd(1, 1056, 528, 64, 2);
  s.sm_scale = 0.125f;
  check_lean4(s, 2302);
  HostProblem f = bshd(2, 1024, 512, 64, 2);
  f.w_f32 = true;
  f.sm_scale = 0.3f;
  check_lean4(f, 2303);
  for (int64_t B : {1, 2, 3}) check_lean4(bshd(B, 2048 / B / 8 * 8 + 8, 700, 64, 3), 2310 + static_cast<uint64_t>(B));
  // the headline shape, and S_k longer than S_q
  HostProblem h = bshd(1, 8192, 4096, 64, 2);
  h.sm_scale = 0.125f;
  check_lean4_bitwise(h, 2320);
  HostProblem l = bshd(1, 2048, 16384, 64, 1);
  l.offsets = {16384 - 2048};
  check_lean4_bitwise(l, 2321);
}

TEST_CASE("lean4: ragged S_k tails and offsets near INT32_MAX and negative", "[lean4]") {
  for (int64_t sk : {1, 127, 129, 999}) {
    check_lean4(bshd(1, 1056, sk, 64, 1), 2400 + static_cast<uint64_t>(sk));
    HostProblem o = bshd(2, 1024, sk, 64, 4);
    o.offsets = {static_cast<int32_t>(4 * sk), 17};
    check_lean4(o, 2500 + static_cast<uint64_t>(sk));
  }
  HostProblem p = bshd(3, 1024, 999, 64, 2);
  p.offsets = {INT32_MAX - 1024, -5000, -300};
  p.sm_scale = 0.125f;
  check_lean4(p, 2601);
}

TEST_CASE("lean4: H 32 against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  const int64_t tile = 16;
  check_lean4(bshd(1, 132 * tile, 528, 32, 2), 2700);
  HostProblem f = bshd(2, 66 * tile, 700, 32, 2);
  f.w_f32 = true;
  f.sm_scale = 0.3f;
  f.offsets = {17, 2 * 700 - 66 * static_cast<int32_t>(tile)};
  check_lean4(f, 2701);
  HostProblem m = bshd(3, 48 * tile, 999, 32, 1);
  m.offsets = {INT32_MAX - 2000, -5000, 999 - 48 * static_cast<int32_t>(tile)};
  check_lean4(m, 2702);
}

TEST_CASE("lean4: H 16 against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  const int64_t tile = 32;
  check_lean4(bshd(1, 132 * tile, 528, 16, 2), 2750);
  HostProblem f = bshd(2, 66 * tile, 700, 16, 2);
  f.w_f32 = true;
  f.sm_scale = 0.3f;
  f.offsets = {17, 2 * 700 - 66 * static_cast<int32_t>(tile)};
  check_lean4(f, 2751);
}

TEST_CASE("lean4: the split variant against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  HostProblem a = bshd(1, 256, 16384, 64, 1);  // four chunks of 64 tiles
  a.offsets = {16384 - 256};
  check_lean4(a, 2801);
  HostProblem c = bshd(3, 40, 9999, 64, 2);  // one batch masked everywhere, one near INT32_MAX
  c.offsets = {2 * 9999 - 40, -5000, INT32_MAX - 400};
  check_lean4(c, 2802);
  HostProblem d = bshd(1, 8, 65536, 64, 1);  // one q-tile: 64 chunks of 16 tiles
  d.offsets = {65536 - 8};
  d.w_f32 = true;
  check_lean4(d, 2803);
  for (int h : {32, 16}) {
    const int64_t tile = 512 / h;
    HostProblem s = bshd(1, 8 * tile, 8192, h, 1);
    s.offsets = {8192 - 8 * static_cast<int32_t>(tile)};
    check_lean4(s, 2810 + static_cast<uint64_t>(h));
  }
  HostProblem l = bshd(1, 1024, 65536, 64, 1);  // chunked prefill over a long KV
  l.offsets = {65536 - 1024};
  l.sm_scale = 0.125f;
  check_lean4_bitwise(l, 2820);
}

TEST_CASE("lean4: THD against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  for (Layout l : {Layout::thd_local, Layout::thd_global}) {
    // 1-token and empty segments, offsets near INT32_MAX and negative
    HostProblem p = thd({300, 5, 0, 400, 371}, {150, 3, 7, 200, 180}, 64, 2, l);
    p.offsets = {INT32_MAX - 300, -5000, 9, -100, 333};
    p.sm_scale = 0.25f;
    check_lean4(p, 2900 + static_cast<uint64_t>(l));
    HostProblem w = thd({1, 520, 1, 533, 1}, {1, 260, 0, 266, 5}, 64, 1, l);  // 1056 rows: 132 q-tiles
    w.w_f32 = true;
    check_lean4(w, 2910 + static_cast<uint64_t>(l));
  }
  // a training packing of 8 segments (no oracle of every cell)
  HostProblem big = thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4);
  check_lean4_bitwise(big, 2920);
}

TEST_CASE("lean4: run to run bitwise, bf16 W == fp32 W", "[lean4]") {
  FourConsumers four;
  HostProblem p = bshd(1, 1056, 600, 64, 2);
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(KernelFamily::lean, p);
  HostProblem h = bshd(1, 132 * 16, 600, 32, 2);
  run_determinism_and_w_dtype(KernelFamily::lean, h);
}

TEST_CASE("lean4: FP8 == generic FP8 bitwise, and against the fp64 oracle", "[lean4][fp8]") {
  auto same = [](HostProblem p, uint64_t seed) {
    dsa_support::fill_random(p, seed);
    INFO(p.describe());
    auto dp = dsa_support::upload(p);
    const auto g = dsa_support::run(p, dp, KernelFamily::generic);
    std::vector<float> l;
    {
      FourConsumers four;
      REQUIRE(planned_consumers(dp) == 4);
      l = dsa_support::run(p, dp, KernelFamily::lean).scores;
    }
    REQUIRE(g.scores.size() == l.size());
    int64_t diff = 0;
    for (size_t i = 0; i < l.size(); ++i) diff += std::memcmp(&g.scores[i], &l[i], 4) != 0;
    CHECK(diff == 0);
  };
  same(fp8(bshd(1, 8192, 4096, 64, 2), true, true), 52001);
  HostProblem a = fp8(bshd(2, 1056, 3000, 64, 1), true, false);
  a.offsets = {3000 - 1056 - 1, INT32_MAX - 2000};
  a.w_f32 = true;
  same(a, 52002);
  HostProblem b = fp8(bshd(1, 2048, 8192, 64, 1), false, true);
  b.offsets = {8192 - 2048};
  b.sm_scale = 0.25f;
  same(b, 52003);
  same(fp8(bshd(1, 1056, 700, 64, 4), false, false), 52004);
  same(fp8(bshd(1, 132 * 16, 999, 32, 2), true, true), 52005);
  same(fp8(bshd(1, 132 * 32, 999, 16, 2), true, false), 52006);
  HostProblem sp = fp8(bshd(1, 512, 16384, 64, 1), true, true);  // the split variant
  sp.offsets = {16384 - 512};
  same(sp, 52007);
  HostProblem th = fp8(thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4), true, true);
  same(th, 52008);
  FourConsumers four;
  HostProblem o = fp8(bshd(1, 1056, 2000, 64, 1), true, true);
  o.offsets = {2000 - 1056};
  o.sm_scale = 0.125f;
  auto r = check_fp8_against_oracle(o, KernelFamily::lean, 52010, true);
  CHECK(r.gpu.scores.size() == static_cast<size_t>(o.rows() * o.cols()));
}
