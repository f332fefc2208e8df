// Lean's lse output (kWithLse) on the device: against the fp64 oracle, and bitwise against the
// generic family's lse and scores (lean pushes every visible cell in generic's order and merges
// as generic's lse_finish does), with two and four consumers, bf16 and FP8, BSHD and THD; the
// split variant's lse (its chunks combined) within 2e-7 of generic's and bitwise run to run.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "edge_grid.hpp"
#include "lean_cases.hpp"

using namespace dsa_gpu_test;

namespace {

// Lean with two and four consumers: against the oracle (bf16: scores and lse) and bitwise
// against generic (scores and lse); FP8 (no oracle): bitwise against generic FP8.
void check_lean_lse(HostProblem p, uint64_t seed, bool oracle = true) {
  p.lse = true;
  for (int consumers : {2, 4}) {
    // (four consumers' FP8 lse variants at H 16 and THD are planned with two: lean_plan)
    if (p.fp8 && consumers == 4 && (p.heads == 16 || p.thd())) continue;
    if (p.fp8) check_fp8_lean_equals_generic(p, seed, consumers);
    else check_lean(p, seed, consumers, oracle);
  }
}

// The split variant (q-tiles x B below the SM count): its chunks' partial sums merged in chunk
// order, so its lse is not generic's bits. Against the oracle (bf16); scores bitwise generic's;
// lse with generic's -inf pattern and within kSplitLseTol x max(1, |lse|) of generic's; the same
// bits run to run. Prints the largest difference from generic's lse seen.
constexpr double kSplitLseTol = 2e-7;
void check_split_lse(HostProblem p, uint64_t seed) {
  p.lse = true;
  for (int consumers : {2, 4}) {
    if (p.fp8 && consumers == 4) continue;  // planned with two (lean_plan)
    INFO(p.describe() << ", " << consumers << " consumers");
    {
      LeanConsumers c(consumers);
      if (p.fp8) check_fp8_against_oracle(p, KernelFamily::lean, seed, true);
      else check_against_oracle(p, KernelFamily::lean, seed);
    }
    dsa_support::fill_random(p, seed);
    auto dp = dsa_support::upload(p);
    const auto gen = dsa_support::run(p, dp, KernelFamily::generic);
    LeanConsumers c(consumers);
    const dsa_indexer::detail::Plan plan = planned_lean(dp);
    REQUIRE(dsa_indexer::detail::lean_spec_consumers(plan.spec) == consumers);
    REQUIRE(plan.kv_parts > 1);
    REQUIRE(plan.n_launches == 2);
    const auto a = dsa_support::run(p, dp, KernelFamily::lean);
    const auto b = dsa_support::run(p, dp, KernelFamily::lean);
    CHECK(differing_cells(a.scores, gen.scores) == 0);
    CHECK(differing_cells(a.scores, b.scores) == 0);
    CHECK(differing_cells(a.lse, b.lse) == 0);
    REQUIRE(a.lse.size() == gen.lse.size());
    int64_t bad = 0, exact = 0;
    double worst = 0.0;
    for (size_t i = 0; i < a.lse.size(); ++i) {
      const double g = gen.lse[i], l = a.lse[i];
      if (std::isinf(g) || std::isinf(l)) {
        bad += !(g == l);
        continue;
      }
      const double rel = std::fabs(l - g) / std::max(1.0, std::fabs(g));
      worst = std::max(worst, rel);
      exact += l == g;
      bad += !(rel <= kSplitLseTol);
    }
    CHECK(bad == 0);
    std::printf("lean split lse (%d consumers, %d chunks): %-70s vs generic: %lld of %zu rows equal, largest |diff| / max(1, |lse|) %.3g\n",
                consumers, plan.kv_parts, p.describe().c_str(), static_cast<long long>(exact), a.lse.size(), worst);
  }
}

}  // namespace

TEST_CASE("lean lse: BSHD H 64, 32 and 16 against the oracle and bitwise against generic", "[lean_lse]") {
  for (int h : {64, 32, 16}) {
    const int64_t tile = 512 / h;
    check_lean_lse(bshd(1, 132 * tile, 528, h, 2), 3000 + static_cast<uint64_t>(h));
    HostProblem f = bshd(2, 66 * tile, 700, h, 2);  // fp32 W, sm_scale, offsets, a ragged tail
    f.w_f32 = true;
    f.sm_scale = 0.3f;
    f.offsets = {17, 2 * 700 - 66 * static_cast<int32_t>(tile)};
    check_lean_lse(f, 3100 + static_cast<uint64_t>(h));
    HostProblem m = bshd(3, 48 * tile, 999, h, 1);  // one batch masked everywhere: lse -inf
    m.offsets = {INT32_MAX - 2000, -5000, 999 - 48 * static_cast<int32_t>(tile)};
    check_lean_lse(m, 3200 + static_cast<uint64_t>(h));
  }
  // the headline shape (no oracle of every cell)
  HostProblem h = bshd(1, 8192, 4096, 64, 2);
  h.sm_scale = 0.125f;
  check_lean_lse(h, 3300, false);
}

TEST_CASE("lean lse: fewer q-tiles x B than SMs (the split variant and its combine) against the oracle and generic", "[lean_lse]") {
  HostProblem a = bshd(1, 256, 8192, 64, 1);  // 32 q-tiles, the rows ending at S_k
  a.offsets = {8192 - 256};
  check_split_lse(a, 3600);
  HostProblem b = bshd(3, 40, 9999, 64, 2);  // 15 q-tiles: one batch masked everywhere, one near INT32_MAX
  b.offsets = {2 * 9999 - 40, -5000, INT32_MAX - 400};
  b.sm_scale = 0.125f;
  check_split_lse(b, 3601);
  HostProblem h = bshd(1, 8 * 32, 4096, 16, 1);  // H 16: 8 q-tiles of 32 tokens
  h.offsets = {4096 - 8 * 32};
  check_split_lse(h, 3602);
  HostProblem m = bshd(2, 16 * 16, 20000, 32, 1);  // H 32, fp32 W, sm_scale, rows ending at S_k
  m.offsets = {20000 - 256, 20000 - 256};
  m.w_f32 = true;
  m.sm_scale = 0.3f;
  check_split_lse(m, 3603);
  HostProblem f = bshd(1, 512, 16384, 64, 1);  // FP8 with both scales, the chunked-prefill shape
  f.offsets = {16384 - 512};
  f.fp8 = true;
  f.fp8_q_scale = f.fp8_k_scale = true;
  check_split_lse(f, 3604);
}

TEST_CASE("lean lse: THD packings against the oracle and bitwise against generic", "[lean_lse]") {
  for (Layout l : {Layout::thd_local, Layout::thd_global}) {
    HostProblem p = thd({300, 5, 0, 400, 371}, {150, 3, 7, 200, 180}, 64, 2, l);  // 1-token and empty segments
    p.offsets = {INT32_MAX - 300, -5000, 9, -100, 333};
    p.sm_scale = 0.25f;
    check_lean_lse(p, 3400 + static_cast<uint64_t>(l));
    HostProblem w = thd({1, 520, 1, 533, 3}, {1, 260, 0, 266, 5}, 64, 1, l);  // T_q 1058: a short last q-tile
    w.w_f32 = true;
    check_lean_lse(w, 3410 + static_cast<uint64_t>(l));
  }
  check_lean_lse(thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4), 3420, false);
}

TEST_CASE("lean lse: FP8 bitwise against generic FP8", "[lean_lse][fp8]") {
  auto fp8 = [](HostProblem p) {
    p.fp8 = true;
    p.fp8_q_scale = p.fp8_k_scale = true;
    return p;
  };
  check_lean_lse(fp8(bshd(1, 1056, 2000, 64, 1)), 3500, false);
  HostProblem o = fp8(bshd(2, 1056, 3000, 64, 1));
  o.offsets = {3000 - 1056 - 1, INT32_MAX - 2000};
  o.sm_scale = 0.125f;
  check_lean_lse(o, 3501, false);
  check_lean_lse(fp8(bshd(1, 132 * 32, 999, 16, 2)), 3502, false);
  check_lean_lse(fp8(thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4)), 3503, false);
}
