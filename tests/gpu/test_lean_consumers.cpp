// Lean with four consumer warpgroups (m64n128 over 128 packed token-head rows each; session 11's
// experiment, set_lean_consumers(4)): against the fp64 oracle, and bitwise against generic and
// against lean's two-consumer kernels (the same per-lane terms in the same order), bf16 and FP8,
// BSHD at H 64, 32 and 16, the split variant and THD, run to run.
#include <climits>

#include "edge_grid.hpp"
#include "lean_cases.hpp"

using namespace dsa_gpu_test;

namespace {

void check_lean4(HostProblem p, uint64_t seed) { check_lean(std::move(p), seed, 4); }
void check_lean4_bitwise(HostProblem p, uint64_t seed) { check_lean(std::move(p), seed, 4, false); }

}  // namespace

TEST_CASE("lean4: saturated H 64 shapes against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  lean_saturated_cases(4, 2300);
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

TEST_CASE("lean4: H 32 and 16 against the fp64 oracle, bitwise against generic and two consumers", "[lean4]") {
  for (int h : {32, 16}) {
    const int64_t tile = 512 / h;
    check_lean4(bshd(1, 132 * tile, 528, h, 2), 2700 + static_cast<uint64_t>(h));
    HostProblem f = bshd(2, 66 * tile, 700, h, 2);
    f.w_f32 = true;
    f.sm_scale = 0.3f;
    f.offsets = {17, 2 * 700 - 66 * static_cast<int32_t>(tile)};
    check_lean4(f, 2750 + static_cast<uint64_t>(h));
    HostProblem m = bshd(3, 48 * tile, 999, h, 1);
    m.offsets = {INT32_MAX - 2000, -5000, 999 - 48 * static_cast<int32_t>(tile)};
    check_lean4(m, 2790 + static_cast<uint64_t>(h));
  }
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
  LeanConsumers four(4);
  HostProblem p = bshd(1, 1056, 600, 64, 2);
  p.sm_scale = 0.125f;
  run_determinism_and_w_dtype(KernelFamily::lean, p);
  HostProblem h = bshd(1, 132 * 16, 600, 32, 2);
  run_determinism_and_w_dtype(KernelFamily::lean, h);
}

TEST_CASE("lean4: FP8 == generic FP8 bitwise, and against the fp64 oracle", "[lean4][fp8]") {
  auto same = [](HostProblem p, uint64_t seed) { check_fp8_lean_equals_generic(std::move(p), seed, 4); };
  same(fp8_inputs(bshd(1, 8192, 4096, 64, 2), true, true), 52001);
  HostProblem a = fp8_inputs(bshd(2, 1056, 3000, 64, 1), true, false);
  a.offsets = {3000 - 1056 - 1, INT32_MAX - 2000};
  a.w_f32 = true;
  same(a, 52002);
  HostProblem b = fp8_inputs(bshd(1, 2048, 8192, 64, 1), false, true);
  b.offsets = {8192 - 2048};
  b.sm_scale = 0.25f;
  same(b, 52003);
  same(fp8_inputs(bshd(1, 1056, 700, 64, 4), false, false), 52004);
  same(fp8_inputs(bshd(1, 132 * 16, 999, 32, 2), true, true), 52005);
  same(fp8_inputs(bshd(1, 132 * 32, 999, 16, 2), true, false), 52006);
  HostProblem sp = fp8_inputs(bshd(1, 512, 16384, 64, 1), true, true);  // the split variant
  sp.offsets = {16384 - 512};
  same(sp, 52007);
  HostProblem th = fp8_inputs(thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4), true, true);
  same(th, 52008);
  LeanConsumers four(4);
  HostProblem o = fp8_inputs(bshd(1, 1056, 2000, 64, 1), true, true);
  o.offsets = {2000 - 1056};
  o.sm_scale = 0.125f;
  auto r = check_fp8_against_oracle(o, KernelFamily::lean, 52010, true);
  CHECK(r.gpu.scores.size() == static_cast<size_t>(o.rows() * o.cols()));
}

// Free-running consumers (set_lean_free: no ring of named barriers, session 12's experiment):
// the same bits as generic and the ring's, with four and two consumers, bf16 and FP8, BSHD at
// H 64 and 16, the split variant and THD with short segments.
TEST_CASE("lean free-running consumers: against the fp64 oracle, bitwise against generic", "[lean4][lean_free]") {
  LeanFree free_running;
  for (int consumers : {4, 2}) {
    check_lean(bshd(1, 1056, 528, 64, 2), 2950, consumers);
    HostProblem s = bshd(1, 132 * 32, 700, 16, 2);
    s.sm_scale = 0.125f;
    check_lean(s, 2951, consumers);
    HostProblem c = bshd(1, 512, 16384, 64, 1);  // the split variant
    c.offsets = {16384 - 512};
    check_lean(c, 2952, consumers, false);
    check_lean(thd({1500, 700, 2100, 300, 1200, 900, 1100, 392}, {375, 175, 525, 75, 300, 225, 275, 98}, 64, 4), 2953, consumers,
               false);
    check_lean(thd({300, 5, 0, 400, 371}, {150, 3, 7, 200, 180}, 64, 2), 2954, consumers);
    check_fp8_lean_equals_generic(fp8_inputs(bshd(1, 8192, 4096, 64, 2), true, true), 2955, consumers);
  }
  HostProblem r = bshd(1, 1056, 600, 64, 2);
  LeanConsumers four(4);
  run_determinism_and_w_dtype(KernelFamily::lean, r);
}
