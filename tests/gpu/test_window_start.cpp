// Explicit windows whose output columns start at each window (WindowColumns::window_start,
// DeepGEMM's compressed logits), through the families that serve it (generic, bf16 and FP8, and
// the reference kernel): against the fp64 oracle in that layout (poisoned outputs, the exact -inf
// pattern, LSE), and bit for bit the cells the same call with key columns writes.
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "gpu_cases.hpp"

using namespace dsa_gpu_test;

namespace {

// `res` (window_start columns of `p`) against the key-column run of the same inputs: every
// column c of row r is the key-column cell of key ks[r] + c when that key exists, else -inf;
// and rows whose window fits in the n columns from ks have the key-column run's lse bits.
void check_against_key_columns(const HostProblem& p, const dsa_support::GpuResult& res, KernelFamily fam, uint64_t seed) {
  HostProblem key = p;
  key.window_width = 0;
  dsa_support::fill_random(key, seed);  // the same draws: the inputs do not depend on the columns
  auto dk = dsa_support::upload(key);
  const auto full = dsa_support::run(key, dk, fam);
  const int64_t n = p.window_width, sk = p.s_k;
  int64_t bad = 0, bad_lse = 0, fitting = 0;
  std::string first;
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t ks = p.ks[static_cast<size_t>(r)], ke = p.ke[static_cast<size_t>(r)];
    for (int64_t c = 0; c < n; ++c) {
      const int64_t key_col = ks + c;
      const float want = (key_col >= 0 && key_col < sk) ? full.scores[static_cast<size_t>(r * sk + key_col)]
                                                        : -std::numeric_limits<float>::infinity();
      const float got = res.scores[static_cast<size_t>(r * n + c)];
      if (std::memcmp(&want, &got, 4) != 0 && bad++ == 0)
        first = fmt::format("row {} column {} (key {}): {} against the key columns' {}", r, c, key_col, got, want);
    }
    // the window fits when its last visible key is within the n columns from ks (a window from
    // before key 0 spends columns on keys that do not exist)
    if (p.lse && std::min<int64_t>(ke, sk) <= ks + n) {
      ++fitting;
      if (std::memcmp(&res.lse[static_cast<size_t>(r)], &full.lse[static_cast<size_t>(r)], 4) != 0) ++bad_lse;
    }
  }
  INFO(first);
  CHECK(bad == 0);
  CHECK(bad_lse == 0);
  if (p.lse) CHECK(fitting > 0);
}

}  // namespace

TEST_CASE("window_start: generic bf16 against the oracle and bit for bit the key columns' cells", "[window_start]") {
  struct Case {
    int64_t B, sq, sk;
    int heads;
    int64_t n;
    bool w_f32, lse;
  };
  const Case cases[] = {{2, 203, 517, 64, 64, false, true},  {1, 130, 300, 64, 1, true, true},   {2, 77, 700, 64, 700, false, false},
                        {1, 96, 250, 64, 333, true, true},   {3, 50, 180, 32, 100, false, true}, {2, 64, 129, 16, 65, true, false}};
  uint64_t seed = 600;
  for (const Case& c : cases) {
    HostProblem p = windows_problem(c.B, c.sq, c.sk, c.heads, c.n);
    p.w_f32 = c.w_f32;
    p.lse = c.lse;
    p.sm_scale = 0.75f;
    const CaseResult r = check_against_oracle(p, KernelFamily::generic, ++seed);
    check_against_key_columns(p, r.gpu, KernelFamily::generic, seed);
  }
}

TEST_CASE("window_start: the reference kernel against the oracle", "[window_start]") {
  HostProblem p = windows_problem(2, 70, 300, 64, 90);
  p.lse = true;
  check_against_oracle(p, KernelFamily::reference, 650);
  HostProblem q = windows_problem(1, 40, 150, 16, 200);
  check_against_oracle(q, KernelFamily::reference, 651);
}

TEST_CASE("window_start: generic FP8 (DeepGEMM's compressed logits) against the oracle, key columns' bits", "[window_start][fp8]") {
  struct Case {
    int64_t B, sq, sk;
    int heads;
    int64_t n;
    bool q_scale, k_scale, lse;
  };
  // S 512 / S_kv 2048 with width 640: DeepGEMM's causal rows ending at i + S_kv - S
  const Case cases[] = {{1, 512, 2048, 64, 640, false, true, false}, {2, 100, 400, 64, 128, true, true, true},
                        {1, 90, 333, 32, 50, true, false, true}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    HostProblem p = windows_problem(c.B, c.sq, c.sk, c.heads, c.n);
    p.fp8 = true;
    p.fp8_q_scale = c.q_scale;
    p.fp8_k_scale = c.k_scale;
    p.k_scale_unit_dim = false;
    p.w_f32 = true;
    p.lse = c.lse;
    const CaseResult r = check_against_oracle(p, KernelFamily::generic, ++seed);
    check_against_key_columns(p, r.gpu, KernelFamily::generic, seed);
  }
}

TEST_CASE("window_start: automatic calls run generic, deterministic run to run", "[window_start]") {
  HostProblem p = windows_problem(1, 2048, 4096, 64, 1024);
  dsa_support::fill_random(p, 777);
  auto dp = dsa_support::upload(p);
  const auto a = dsa_support::run(p, dp, KernelFamily::automatic);
  const auto b = dsa_support::run(p, dp, KernelFamily::generic);
  CHECK(bitwise_equal(a.scores, b.scores));
  const auto c = dsa_support::run(p, dp, KernelFamily::automatic);
  CHECK(bitwise_equal(a.scores, c.scores));
}
