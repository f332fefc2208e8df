#pragma once
// Lean's device checks shared by its test files: against the oracle and bitwise against generic
// and the dispatcher, with two consumer warpgroups (the default) or four (set_lean_consumers).
#include <cstdio>
#include <cstring>

#include "cuda/driver.hpp"
#include "dispatch/planner.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "gpu_cases.hpp"
#include "ops/validate.hpp"

namespace dsa_gpu_test {

// The process-wide lean consumer count for a scope; two again whatever a check throws.
struct LeanConsumers {
  explicit LeanConsumers(int n) { dsa_indexer::detail::set_lean_consumers(n); }
  ~LeanConsumers() { dsa_indexer::detail::set_lean_consumers(2); }
  LeanConsumers(const LeanConsumers&) = delete;
  LeanConsumers& operator=(const LeanConsumers&) = delete;
};

// Free-running lean consumers (set_lean_free) for a scope; the ring again whatever a check throws.
struct LeanFree {
  LeanFree() { dsa_indexer::detail::set_lean_free(true); }
  ~LeanFree() { dsa_indexer::detail::set_lean_free(false); }
  LeanFree(const LeanFree&) = delete;
  LeanFree& operator=(const LeanFree&) = delete;
};

// The plan of a lean call of these inputs (the planner's choice now).
inline dsa_indexer::detail::Plan planned_lean(const dsa_support::DeviceProblem& dp) {
  namespace dd = dsa_indexer::detail;
  const dd::Problem prob = dd::validate(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, nullptr);
  return dd::make_plan(prob, dd::device_info(0), dd::lean_family());
}
// The consumers of the kernel a lean call of these inputs runs.
inline int planned_lean_consumers(const dsa_support::DeviceProblem& dp) {
  return dsa_indexer::detail::lean_spec_consumers(planned_lean(dp).spec);
}

inline int64_t differing_cells(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

// Lean with `consumers` against the oracle (oracle = false: large shapes, none), then the same
// inputs through generic, through the dispatcher (lean with two consumers where its gates hold)
// and through lean with `consumers` again: every cell (and lse) bit for bit the same.
inline void check_lean(HostProblem p, uint64_t seed, int consumers = 2, bool oracle = true) {
  INFO(p.describe() << ", " << consumers << " consumers");
  std::vector<float> first;
  if (oracle) {
    LeanConsumers c(consumers);
    first = check_against_oracle(p, KernelFamily::lean, seed).gpu.scores;
  }
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p);
  const auto gen = dsa_support::run(p, dp, KernelFamily::generic);
  const auto aut = dsa_support::run(p, dp, KernelFamily::automatic);
  CHECK(differing_cells(aut.scores, gen.scores) == 0);
  LeanConsumers c(consumers);
  REQUIRE(planned_lean_consumers(dp) == consumers);
  const auto again = dsa_support::run(p, dp, KernelFamily::lean);
  CHECK(differing_cells(again.scores, gen.scores) == 0);
  if (oracle) CHECK(differing_cells(again.scores, first) == 0);
  if (p.lse) CHECK(differing_cells(again.lse, gen.lse) == 0);
}

// FP8: lean with `consumers` == generic FP8 on every cell (no oracle: the FP8 suite's cases
// check generic against it).
inline void check_fp8_lean_equals_generic(HostProblem p, uint64_t seed, int consumers = 2) {
  dsa_support::fill_random(p, seed);
  INFO(p.describe() << ", " << consumers << " consumers");
  auto dp = dsa_support::upload(p);
  const auto g = dsa_support::run(p, dp, KernelFamily::generic);
  LeanConsumers c(consumers);
  REQUIRE(planned_lean_consumers(dp) == consumers);
  const auto l = dsa_support::run(p, dp, KernelFamily::lean);
  const int64_t diff = differing_cells(g.scores, l.scores);
  CHECK(diff == 0);
  if (p.lse) CHECK(differing_cells(g.lse, l.lse) == 0);
  std::printf("fp8 lean (%d consumers) == generic: %-80s %s\n", consumers, p.describe().c_str(),
              diff == 0 ? "bitwise equal" : "DIFFERS");
}

// The saturated BSHD H 64 cases (132 q-tiles: one per SM of an H100/H200; sm_scale; B 2 with
// fp32 W; B 1, 2, 3 in one launch), seeds from seed0 + 1.
inline void lean_saturated_cases(int consumers, uint64_t seed0) {
  check_lean(bshd(1, 1056, 528, 64, 2), seed0 + 1, consumers);
  HostProblem s = bshd(1, 1056, 528, 64, 2);
  s.sm_scale = 0.125f;
  check_lean(s, seed0 + 2, consumers);
  HostProblem f = bshd(2, 1024, 512, 64, 2);
  f.w_f32 = true;
  f.sm_scale = 0.3f;
  check_lean(f, seed0 + 3, consumers);
  for (int64_t B : {1, 2, 3}) check_lean(bshd(B, 2048 / B / 8 * 8 + 8, 700, 64, 3), seed0 + 10 + static_cast<uint64_t>(B), consumers);
}

}  // namespace dsa_gpu_test
