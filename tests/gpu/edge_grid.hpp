#pragma once
// The contract's edge grid, run for any kernel family against the CPU fp64 oracle.
#include <climits>
#include <functional>

#include "gpu_cases.hpp"

namespace dsa_gpu_test {

// Applied to each case just before it runs (none: the cases as written), with the case's index
// in its grid: the FP8 tests turn the same grids into FP8 problems (tests/gpu/test_fp8.cpp).
using CaseTweak = std::function<void(HostProblem&, int index)>;

inline void run_edge_grid(KernelFamily fam, const CaseTweak& tweak = {}) {
  uint64_t seed = 1000;
  const int heads[3] = {16, 32, 64};
  const int64_t ratios[3] = {1, 2, 4};
  int n = 0;
  for (int64_t sk : {1, 127, 129, 999})
    for (int64_t sq : {1, 3, 7, 256})
      for (int64_t ratio : ratios) {
        const int h = heads[(n++) % 3];
        HostProblem p = bshd(1 + (n % 2), sq, sk, h, ratio);
        // offsets: 0, 7, negative, and the int32 edge, cycling
        const int which = n % 4;
        const int32_t offs[4] = {0, 7, -(static_cast<int32_t>(sq) + 5), static_cast<int32_t>(INT32_MAX - sq)};
        if (which != 0) p.offsets.assign(static_cast<size_t>(p.batch), offs[which]);
        if (which == 1 && p.batch > 1) p.offsets[1] = static_cast<int32_t>(sk * ratio - sq);  // bottom-right aligned
        p.sm_scale = (n % 3 == 0) ? 0.125f : 1.0f;
        p.w_f32 = n % 2 == 0;
        p.lse = n % 5 == 0;
        SECTION(fmt::format("S_k {} S_q {} ratio {} H {} offsets#{}", sk, sq, ratio, h, which)) {
          if (tweak) tweak(p, n);
          check_against_oracle(p, fam, ++seed);
        }
      }
}

inline void run_thd_cases(KernelFamily fam, const CaseTweak& tweak = {}) {
  uint64_t seed = 5000;
  int index = 0;
  for (Layout l : {Layout::thd_local, Layout::thd_global})
    for (int h : {16, 32, 64})
      for (int64_t ratio : {1, 4}) {
        // an empty segment, a one-token segment, ragged tails
        HostProblem p = thd({5, 0, 1, 37, 11}, {3, 9, 1, 70, 0}, h, ratio, l);
        p.lse = h != 32;
        p.w_f32 = ratio == 4;
        p.offsets = {0, 3, 2, static_cast<int32_t>(70 * ratio - 37), 9};
        const int i = index++;
        SECTION(fmt::format("{} H {} ratio {}", l == Layout::thd_local ? "local" : "global", h, ratio)) {
          if (tweak) tweak(p, i);
          check_against_oracle(p, fam, ++seed);
        }
      }
  SECTION("THD read from device cu_seqlens (no host mirror)") {
    HostProblem p = thd({7, 67}, {5, 70}, 64, 4);
    p.offsets = {0, static_cast<int32_t>(70 * 4 - 67)};
    if (tweak) tweak(p, index);
    check_against_oracle(p, fam, 77, /*host_seqlens=*/false);
  }
  SECTION("THD with max_seqlen_k larger than every segment") {
    HostProblem p = thd({9, 4}, {6, 8}, 32, 1);
    p.max_k = 13;
    if (tweak) tweak(p, index + 1);
    check_against_oracle(p, fam, 78);
  }
}

inline void run_window_cases(KernelFamily fam, const CaseTweak& tweak = {}) {
  SECTION("BSHD explicit windows") {
    HostProblem p = bshd(2, 70, 300, 64, 1);
    p.ks.resize(140);
    p.ke.resize(140);
    for (int r = 0; r < 140; ++r) {
      p.ks[r] = (r * 7) % 200 - 20;         // some negative: clamped to 0
      p.ke[r] = p.ks[r] + 10 + (r * 13) % 150;  // some past S_k: clamped
    }
    p.ks[5] = 100;
    p.ke[5] = 50;  // empty
    p.lse = true;
    if (tweak) tweak(p, 0);
    check_against_oracle(p, fam, 91);
  }
  SECTION("THD global explicit windows stay inside the segment") {
    HostProblem p = thd({20, 30}, {40, 50}, 32, 1, Layout::thd_global);
    p.ks.resize(50);
    p.ke.resize(50);
    for (int r = 0; r < 50; ++r) {
      p.ks[r] = r * 2;
      p.ke[r] = r * 2 + 35;
    }
    if (tweak) tweak(p, 1);
    check_against_oracle(p, fam, 92);
  }
}

inline void run_determinism_and_w_dtype(KernelFamily fam, HostProblem p) {
  dsa_support::fill_random(p, 4242);
  auto dp = dsa_support::upload(p);
  auto r1 = dsa_support::run(p, dp, fam);
  auto r2 = dsa_support::run(p, dp, fam);
  CHECK(bitwise_equal(r1.scores, r2.scores));
  if (p.lse) CHECK(bitwise_equal(r1.lse, r2.lse));
  HostProblem pf = p;
  pf.w_f32 = !p.w_f32;
  auto dpf = dsa_support::upload(pf);
  auto r3 = dsa_support::run(pf, dpf, fam);
  CHECK(bitwise_equal(r1.scores, r3.scores));
  if (p.lse) CHECK(bitwise_equal(r1.lse, r3.lse));
}

}  // namespace dsa_gpu_test
