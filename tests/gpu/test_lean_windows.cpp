// Explicit windows of B 1 BSHD calls through lean's THD kernel, one packed sequence whose rows'
// windows come from ks / ke (kRowWindows; DeepGEMM's logits through deepgemm_compat): against
// the fp64 oracle (poisoned outputs, the exact -inf pattern, lse), and every cell and lse bit for
// bit generic's and the dispatcher's, in both column modes, bf16 and FP8, two and four consumers.
#include "lean_cases.hpp"

using namespace dsa_gpu_test;

namespace {

// n > 0: window-start columns of width n; n == 0: key columns (S_k), with windows shaped for
// a width of `shape_n`.
HostProblem row_windows(int64_t sq, int64_t sk, int64_t n, int64_t shape_n) {
  HostProblem p = windows_problem(1, sq, sk, 64, shape_n);
  p.window_width = n;
  return p;
}

// DeepGEMM's benchmark rows: row i sees [0, i + S_k - S_q + 1) (ks 0), or the last `len` keys of
// that (ks = ke - len, negative near the start).
HostProblem deepgemm_rows(int64_t sq, int64_t sk, int64_t n, int64_t len) {
  HostProblem p = bshd(1, sq, sk, 64, 1);
  p.window_width = n;
  p.ks.resize(static_cast<size_t>(sq));
  p.ke.resize(p.ks.size());
  for (int64_t i = 0; i < sq; ++i) {
    const int64_t e = i + sk - sq + 1;
    p.ke[static_cast<size_t>(i)] = static_cast<int32_t>(e);
    p.ks[static_cast<size_t>(i)] = static_cast<int32_t>(len > 0 ? e - len : 0);
  }
  return p;
}

}  // namespace

TEST_CASE("lean row windows (B 1 explicit windows): oracle, bitwise generic, both column modes", "[lean_windows]") {
  uint64_t seed = 71000;
  // every kind of row (windows_problem): before key 0, from INT32_MIN, exactly n, longer than n,
  // empty, past S_k, ending past S_k, short, DeepGEMM's causal rows; 132-264 q-tiles
  HostProblem a = row_windows(1056, 3000, 700, 700);
  a.lse = true;
  a.sm_scale = 0.75f;
  check_lean(a, ++seed);
  HostProblem b = row_windows(2112, 1500, 0, 900);  // key columns
  b.w_f32 = true;
  check_lean(b, ++seed);
  check_lean(row_windows(1056, 520, 1, 1), ++seed);    // one column per row
  check_lean(row_windows(1056, 700, 2000, 2000), ++seed);  // columns past S_k
  // DeepGEMM's rows, window-start columns of width S_k (deepgemm_compat with max_seqlen_k = S_k)
  // and sliding windows of 1000 keys, several items per CTA: bitwise generic (too large for the
  // host oracle; generic's windows are held to it in test_window_start.cpp)
  check_lean(deepgemm_rows(2048, 8192, 8192, 0), ++seed, 2, false);
  HostProblem s = deepgemm_rows(4224, 5000, 1000, 1000);
  s.lse = true;
  check_lean(s, ++seed, 2, false);
}

TEST_CASE("lean row windows, FP8: oracle, bitwise generic FP8, two and four consumers", "[lean_windows][fp8]") {
  uint64_t seed = 72000;
  check_lean(fp8_inputs(row_windows(1056, 3000, 700, 700), true, true, false), ++seed);
  HostProblem k = fp8_inputs(row_windows(2112, 1500, 0, 900), true, false, true);  // key columns, q scale only
  k.w_f32 = true;
  check_lean(k, ++seed);
  HostProblem l = fp8_inputs(deepgemm_rows(2048, 8192, 8192, 0), false, true, true);  // DeepGEMM's: k scale only
  l.lse = true;
  check_lean(l, ++seed, 2, false);
  check_lean(fp8_inputs(deepgemm_rows(4224, 5000, 1000, 1000), true, true, false), ++seed, 2, false);  // 528 items: Q buffers reused
  check_lean(fp8_inputs(row_windows(1056, 3000, 700, 700), true, true, false), ++seed, 4);
  check_lean(row_windows(1056, 3000, 0, 700), ++seed, 4);
}
