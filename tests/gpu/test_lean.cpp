// The lean family on the device: against the fp64 oracle and bitwise against generic (which
// is what makes the dispatcher's choice invisible), at saturated shapes.
#include <climits>

#include "edge_grid.hpp"

using namespace dsa_gpu_test;

namespace {

// Lean against the oracle, then the same inputs through generic and through the dispatcher:
// all three must agree bit for bit.
void check_lean(HostProblem p, uint64_t seed) {
  auto r = check_against_oracle(p, KernelFamily::lean, seed);
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p);
  auto gen = dsa_support::run(p, dp, KernelFamily::generic);
  auto aut = dsa_support::run(p, dp, KernelFamily::automatic);
  auto again = dsa_support::run(p, dp, KernelFamily::lean);
  INFO(p.describe());
  CHECK(bitwise_equal(r.gpu.scores, gen.scores));
  CHECK(bitwise_equal(r.gpu.scores, aut.scores));
  CHECK(bitwise_equal(r.gpu.scores, again.scores));
}

}  // namespace

TEST_CASE("lean: saturated shapes against the fp64 oracle and bitwise against generic", "[lean]") {
  // 1056 tokens = 132 q-tiles: exactly one per SM of an H100/H200.
  check_lean(bshd(1, 1056, 528, 64, 2), 301);
  HostProblem s = bshd(1, 1056, 528, 64, 2);
  s.sm_scale = 0.125f;
  check_lean(s, 302);
  HostProblem f = bshd(2, 1024, 512, 64, 2);
  f.w_f32 = true;
  f.sm_scale = 0.3f;
  check_lean(f, 303);
  // B 1, 2, 3 in one launch
  for (int64_t B : {1, 2, 3}) check_lean(bshd(B, 2048 / B / 8 * 8 + 8, 700, 64, 3), 310 + static_cast<uint64_t>(B));
}

TEST_CASE("lean: ragged S_k tails (1, 127, 129, 999) via ratio 1 and via offsets", "[lean]") {
  for (int64_t sk : {1, 127, 129, 999}) {
    check_lean(bshd(1, 1056, sk, 64, 1), 400 + static_cast<uint64_t>(sk));
    HostProblem o = bshd(2, 1024, sk, 64, 4);
    o.offsets = {static_cast<int32_t>(4 * sk), 17};  // batch 0 sees the whole tail from row 0
    check_lean(o, 500 + static_cast<uint64_t>(sk));
  }
}

TEST_CASE("lean: offsets near INT32_MAX and negative (all-masked rows)", "[lean]") {
  HostProblem p = bshd(3, 1024, 999, 64, 2);
  p.offsets = {INT32_MAX - 1024, -5000, -300};
  p.sm_scale = 0.125f;
  auto r = check_against_oracle(p, KernelFamily::lean, 601);
  // batch 1 is masked everywhere: exactly -inf in every cell
  const int64_t per_batch = 1024 * 999;
  bool all_neg_inf = true;
  for (int64_t i = per_batch; i < 2 * per_batch; ++i)
    all_neg_inf = all_neg_inf && std::isinf(r.gpu.scores[static_cast<size_t>(i)]) && r.gpu.scores[static_cast<size_t>(i)] < 0;
  CHECK(all_neg_inf);
  check_lean(p, 602);
}

TEST_CASE("lean: bf16 W and fp32 W of the same values give the same bits, run to run", "[lean]") {
  HostProblem p = bshd(1, 1056, 600, 64, 2);
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(KernelFamily::lean, p);
  p.sm_scale = 1.0f;
  run_determinism_and_w_dtype(KernelFamily::lean, p);
}

TEST_CASE("lean: a new batch size does not recompile", "[lean]") {
  HostProblem p = bshd(1, 2048, 1000, 64, 2);
  dsa_support::fill_random(p, 700);
  auto dp = dsa_support::upload(p);
  dsa_support::run(p, dp, KernelFamily::lean);
  const auto s0 = dsa_indexer::kernel_cache_stats();
  for (int64_t B : {2, 3, 4}) {
    HostProblem q = bshd(B, 2048, 1000, 64, 2);
    q.sm_scale = 0.5f;  // the same scale variant ("any") as 1/... is not 1
    dsa_support::fill_random(q, 700 + static_cast<uint64_t>(B));
    auto dq = dsa_support::upload(q);
    dsa_support::run(q, dq, KernelFamily::lean);
  }
  const auto s1 = dsa_indexer::kernel_cache_stats();
  // B 1 ran with sm_scale 1 (the unit variant); B 2..4 share the other variant: one more
  // production, then hits.
  CHECK(s1.misses == s0.misses + 1);
  CHECK(s1.hits >= s0.hits + 2);
}

TEST_CASE("lean: a forced lean call names the failed gate on the real device", "[lean]") {
  auto expect_gate = [](HostProblem p, const char* gate) {
    dsa_support::fill_random(p, 800);
    auto dp = dsa_support::upload(p);
    INFO(p.describe() << " -> " << gate);
    try {
      dsa_support::run(p, dp, KernelFamily::lean);
      FAIL("expected UnsupportedConfig");
    } catch (const dsa_indexer::UnsupportedConfig& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains(gate));
    }
    auto g = dsa_support::run(p, dp, KernelFamily::automatic);  // automatic serves it (generic)
    CHECK(g.scores.size() == static_cast<size_t>(p.rows() * p.cols()));
  };
  expect_gate(bshd(1, 2048, 1024, 32, 2), "heads H");
  expect_gate(bshd(1, 1024, 512, 64, 2), "grid saturation");  // 128 q-tiles < 132 SMs
  HostProblem l = bshd(1, 2048, 1024, 64, 2);
  l.lse = true;
  expect_gate(l, "lse");
  HostProblem w = bshd(1, 2048, 1024, 64, 2);
  w.ks.assign(2048, 0);
  w.ke.assign(2048, 100);
  expect_gate(w, "explicit windows");
  expect_gate(bshd(1, 2052, 1024, 64, 2), "S_q");
}
