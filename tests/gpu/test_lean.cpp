// The lean family on the device: against the fp64 oracle and bitwise against generic (which
// is what makes the dispatcher's choice invisible), at saturated shapes.
#include <climits>

#include "edge_grid.hpp"
#include "lean_cases.hpp"

using namespace dsa_gpu_test;

TEST_CASE("lean: saturated shapes against the fp64 oracle and bitwise against generic", "[lean]") {
  lean_saturated_cases(2, 300);
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
  expect_gate(thd({500, 300}, {250, 150}, 64, 2, Layout::thd_local), "grid saturation");  // 100 q-tiles < 132 SMs
  // explicit windows: lean's row windows serve B 1 (one packed sequence), not B 2
  HostProblem w = bshd(2, 2048, 1024, 64, 2);
  w.ks.assign(2 * 2048, 0);
  w.ke.assign(2 * 2048, 100);
  expect_gate(w, "explicit windows");
  expect_gate(bshd(1, 2052, 1024, 64, 2), "S_q");
}

// ---------------- the split variant ----------------
// BSHD calls whose q-tiles x B are fewer than the SMs: lean cuts every q-tile's KV tiles into
// chunks (one work item each). Scores are per cell, so the chunks change no bit: against the
// oracle, and bitwise against generic and the dispatcher.

TEST_CASE("lean split: unsaturated shapes against the fp64 oracle and bitwise against generic", "[lean][lean_split]") {
  // chunked prefill: S_q 256 over 16384 keys, the rows ending at S_k (four chunks of 64 tiles)
  HostProblem a = bshd(1, 256, 16384, 64, 1);
  a.offsets = {16384 - 256};
  check_lean(a, 901);
  // S_q 64 over 8192 keys (sixteen chunks of 8), sm_scale, fp32 W
  HostProblem b = bshd(1, 64, 8192, 64, 1);
  b.offsets = {8192 - 64};
  b.sm_scale = 0.125f;
  b.w_f32 = true;
  check_lean(b, 902);
  // B 3 of 5 q-tiles: one batch masked everywhere, one near INT32_MAX, a ragged S_k tail
  HostProblem c = bshd(3, 40, 9999, 64, 2);
  c.offsets = {2 * 9999 - 40, -5000, INT32_MAX - 400};
  check_lean(c, 903);
  // no offsets: short windows leave most chunks empty (their rows' fillers still run)
  check_lean(bshd(1, 512, 4096, 64, 1), 904);
  // one q-tile over 65536 keys: 64 chunks of 16 tiles
  HostProblem d = bshd(1, 8, 65536, 64, 1);
  d.offsets = {65536 - 8};
  check_lean(d, 905);
  // 128 q-tiles (nearly saturated): one chunk, the split kernel all the same
  HostProblem e = bshd(1, 1024, 700, 64, 1);
  e.offsets = {700 - 1024 + 600};
  check_lean(e, 906);
}

TEST_CASE("lean split: run to run bitwise, and bf16 W == fp32 W", "[lean][lean_split]") {
  HostProblem p = bshd(1, 512, 20000, 64, 1);
  p.offsets = {20000 - 512};
  p.sm_scale = 0.5f;
  run_determinism_and_w_dtype(KernelFamily::lean, p);
}

// ---------------- H 32 and 16 (BSHD) ----------------
// q-tiles of 16 and 32 tokens (256 packed token-head rows per consumer, as at H 64), the same
// head sum as generic: against the oracle and bitwise against generic and the dispatcher.

TEST_CASE("lean heads: H 32 and 16 against the fp64 oracle and bitwise against generic", "[lean][lean_heads]") {
  for (int h : {32, 16}) {
    const int64_t tile = 512 / h;  // tokens per q-tile
    // 132 q-tiles: one per SM
    check_lean(bshd(1, 132 * tile, 528, h, 2), 1000 + static_cast<uint64_t>(h));
    HostProblem f = bshd(2, 66 * tile, 700, h, 2);  // B 2, fp32 W, sm_scale, offsets, a ragged tail
    f.w_f32 = true;
    f.sm_scale = 0.3f;
    f.offsets = {17, 2 * 700 - 66 * static_cast<int32_t>(tile)};
    check_lean(f, 1100 + static_cast<uint64_t>(h));
    HostProblem m = bshd(3, 48 * tile, 999, h, 1);  // B 3: one batch masked everywhere
    m.offsets = {INT32_MAX - 2000, -5000, 999 - 48 * static_cast<int32_t>(tile)};
    check_lean(m, 1200 + static_cast<uint64_t>(h));
    // fewer q-tiles than SMs: the split variant at this H
    HostProblem s = bshd(1, 8 * tile, 8192, h, 1);
    s.offsets = {8192 - 8 * static_cast<int32_t>(tile)};
    check_lean(s, 1300 + static_cast<uint64_t>(h));
  }
}

TEST_CASE("lean heads: H 32 and 16 run to run bitwise, bf16 W == fp32 W", "[lean][lean_heads]") {
  for (int h : {32, 16}) {
    HostProblem p = bshd(1, 132 * (512 / h), 600, h, 2);
    p.sm_scale = 0.125f;
    run_determinism_and_w_dtype(KernelFamily::lean, p);
  }
}

// ---------------- THD ----------------
namespace {

// A random packing of t_q query rows into segments (some empty, some of one token, boundaries
// anywhere inside q-tiles), keys per segment at the given ratio, with a little noise.
HostProblem random_packing(int64_t t_q, int64_t ratio, uint64_t seed, Layout l = Layout::thd_local, int heads = 64) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> lq, lk;
  for (int64_t left = t_q; left > 0;) {
    const uint64_t kind = rng() % 6;
    int64_t s = kind == 0 ? 0 : kind == 1 ? 1 : 1 + static_cast<int64_t>(rng() % 700);
    s = std::min(s, left);
    left -= s;
    lq.push_back(static_cast<int32_t>(s));
    lk.push_back(static_cast<int32_t>(std::max<int64_t>(0, s / ratio + static_cast<int64_t>(rng() % 3) - 1)));
  }
  return thd(lq, lk, heads, ratio, l);
}

// `p` (its inputs drawn from `seed`, kept in p) through lean and generic: every cell bit for bit;
// lean's result.
dsa_support::GpuResult lean_bitwise_generic(HostProblem& p, uint64_t seed) {
  dsa_support::fill_random(p, seed);
  auto dp = dsa_support::upload(p);
  auto lean = dsa_support::run(p, dp, KernelFamily::lean);
  auto gen = dsa_support::run(p, dp, KernelFamily::generic);
  INFO(p.describe());
  CHECK(bitwise_equal(lean.scores, gen.scores));
  return lean;
}

}  // namespace

TEST_CASE("lean THD: random packings against the fp64 oracle and bitwise against generic THD", "[lean][thd]") {
  // 1056..1063 packed rows: 132 or 133 q-tiles (the last one short of 8 rows)
  uint64_t seed = 900;
  for (Layout l : {Layout::thd_local, Layout::thd_global})
    for (int64_t ratio : {1, 2, 4})
      for (int64_t t_q : {1056, 1061}) {
        HostProblem p = random_packing(t_q, ratio, ++seed, l);
        p.sm_scale = seed % 2 ? 1.0f : 0.125f;
        p.w_f32 = seed % 3 == 0;
        check_lean(p, seed);
      }
  // device cu_seqlens only (the library reads them once)
  HostProblem p = random_packing(1100, 2, 950);
  auto r = check_against_oracle(p, KernelFamily::lean, 951, false);
  CHECK(r.gpu.scores.size() == r.ref.size());
}

TEST_CASE("lean THD: offsets near INT32_MAX and negative, both column modes", "[lean][thd]") {
  for (Layout l : {Layout::thd_local, Layout::thd_global}) {
    HostProblem p = thd({300, 5, 0, 400, 371}, {150, 3, 7, 200, 180}, 64, 2, l);
    p.offsets = {INT32_MAX - 300, -5000, 9, -100, 333};
    p.sm_scale = 0.25f;
    check_lean(p, 960 + static_cast<uint64_t>(l));
  }
}

TEST_CASE("lean THD: one segment is bitwise equal to BSHD B 1 of the same data", "[lean][thd]") {
  for (int64_t sk : {528, 1000}) {
    HostProblem b = bshd(1, 1056, sk, 64, 2);
    HostProblem t = thd({1056}, {static_cast<int32_t>(sk)}, 64, 2);
    dsa_support::fill_random(b, 970);
    dsa_support::fill_random(t, 970);
    REQUIRE(b.q == t.q);
    auto db = dsa_support::upload(b);
    auto dt = dsa_support::upload(t);
    auto rb = dsa_support::run(b, db, KernelFamily::lean);
    auto rt = dsa_support::run(t, dt, KernelFamily::lean);
    CHECK(bitwise_equal(rb.scores, rt.scores));
  }
}

TEST_CASE("lean THD: large packings bitwise against generic THD (3 ragged and 8 segments)", "[lean][thd]") {
  const std::vector<std::vector<int32_t>> packs = {{3001, 1, 5190}, {1500, 700, 2100, 300, 1200, 900, 1100, 392}};
  for (const auto& lq : packs)
    for (int64_t ratio : {2, 4}) {
      std::vector<int32_t> lk;
      for (int32_t s : lq) lk.push_back(static_cast<int32_t>(s / ratio));
      HostProblem p = thd(lq, lk, 64, ratio);
      const auto lean = lean_bitwise_generic(p, 980 + static_cast<uint64_t>(ratio));
      INFO(p.describe());
      // a sample of rows against the oracle (first, last and boundary rows of every segment)
      std::vector<int64_t> rows;
      for (size_t s = 0; s + 1 < p.cu_q.size(); ++s)
        for (int64_t r : {int64_t(p.cu_q[s]), int64_t(p.cu_q[s + 1]) - 1})
          if (r >= int64_t(p.cu_q[s]) && r < p.rows()) rows.push_back(r);
      const auto ref = dsa_support::oracle_rows(p, rows);
      std::vector<float> got;
      for (int64_t r : rows)
        got.insert(got.end(), lean.scores.begin() + r * p.cols(), lean.scores.begin() + (r + 1) * p.cols());
      auto c = dsa_support::compare(got.data(), ref.data(), static_cast<int64_t>(ref.size()), p.cols());
      INFO("rel-L2 " << c.rel_l2 << "; " << c.first_problem);
      CHECK(c.pattern_mismatch == 0);
      CHECK(c.rel_l2 <= kScoreTol);
    }
}

TEST_CASE("lean THD: bf16 W and fp32 W of the same values give the same bits, run to run", "[lean][thd]") {
  HostProblem p = random_packing(1200, 2, 990);
  run_determinism_and_w_dtype(KernelFamily::lean, p);
}

TEST_CASE("lean THD: 20 packings of 20 T_q compile once", "[lean][thd]") {
  // the variant carries one q-tile as T_q: T_q 2048 down to 1098 (lean's gate: a q-tile per SM;
  // not all multiples of the q-tile), T_k and the boundaries change every time, one compile
  auto stats0 = dsa_indexer::kernel_cache_stats();
  for (int i = 0; i < 20; ++i) {
    HostProblem p = random_packing(2048 - 50 * i - (i % 6), 1 + (i % 4), 1000 + static_cast<uint64_t>(i));
    dsa_support::fill_random(p, 1100 + static_cast<uint64_t>(i));
    auto dp = dsa_support::upload(p);
    auto r = dsa_support::run(p, dp, KernelFamily::lean);
    CHECK(r.scores.size() == static_cast<size_t>(p.rows() * p.cols()));
  }
  auto stats1 = dsa_indexer::kernel_cache_stats();
  CHECK(stats1.misses - stats0.misses <= 1);  // 0 if an earlier case already loaded it
  CHECK(stats1.hits - stats0.hits >= 19);
}

// ---------------- THD at H 32 and 16 ----------------
// q-tiles of 16 and 32 packed tokens (256 token-head rows per consumer, as BSHD at these H), so a
// q-tile spans more segment boundaries and a lane holds 2 or 4 token slots, each with its own
// window: against the oracle and bitwise against generic THD and the dispatcher.

TEST_CASE("lean THD heads: H 32 and 16 random packings against the fp64 oracle and bitwise against generic", "[lean][thd][lean_heads]") {
  uint64_t seed = 1400;
  for (int h : {32, 16}) {
    const int64_t tile = 512 / h;
    for (Layout l : {Layout::thd_local, Layout::thd_global})
      for (int64_t ratio : {1, 2, 4}) {
        // 132 q-tiles, or 133 with the last one short
        const int64_t t_q = 132 * tile + (ratio == 2 ? 5 : 0);
        HostProblem p = random_packing(t_q, ratio, ++seed, l, h);
        p.sm_scale = seed % 2 ? 1.0f : 0.125f;
        p.w_f32 = seed % 3 == 0;
        check_lean(p, seed);
      }
  }
}

TEST_CASE("lean THD heads: H 32 and 16 offsets near INT32_MAX and negative, empty and 1-token segments", "[lean][thd][lean_heads]") {
  for (int h : {32, 16}) {
    const int32_t tile = 512 / h;
    for (Layout l : {Layout::thd_local, Layout::thd_global}) {
      // 132 q-tiles: six segments, two of them empty or of one token, boundaries inside q-tiles
      const int32_t n = 132 * tile;
      HostProblem p = thd({n / 3 + 3, 0, 1, n / 4 - 7, n / 5, n - (n / 3 + 3) - 1 - (n / 4 - 7) - n / 5},
                          {n / 6, 7, 1, n / 8, 0, n / 3}, h, 2, l);
      p.offsets = {INT32_MAX - n, 3, -5000, 9, -100, 333};
      p.sm_scale = 0.25f;
      check_lean(p, 1500 + static_cast<uint64_t>(h) + static_cast<uint64_t>(l));
    }
  }
}

TEST_CASE("lean THD heads: H 32 and 16 lse, four consumers, FP8", "[lean][thd][lean_heads]") {
  uint64_t seed = 1600;
  for (int h : {32, 16}) {
    const int64_t tile = 512 / h;
    HostProblem p = random_packing(132 * tile + 3, 2, ++seed, Layout::thd_local, h);
    p.lse = true;
    check_lean(p, seed);
    HostProblem g = random_packing(140 * tile, 4, ++seed, Layout::thd_global, h);
    check_lean(g, seed, 4);
    ++seed;
    check_fp8_lean_equals_generic(fp8_inputs(random_packing(132 * tile, 1, seed, Layout::thd_local, h), true, true), seed);
    HostProblem f = fp8_inputs(random_packing(132 * tile + 9, 2, ++seed, Layout::thd_global, h), false, true, false);
    f.lse = true;
    f.w_f32 = true;
    check_fp8_lean_equals_generic(f, seed);
  }
}

TEST_CASE("lean THD heads: H 32 and 16 large packings bitwise against generic, run to run, bf16 W == fp32 W", "[lean][thd][lean_heads]") {
  for (int h : {32, 16}) {
    // 8 segments at ratio 4 (issue 23's short-segment packing)
    std::vector<int32_t> lq = {1500, 700, 2100, 300, 1200, 900, 1100, 392}, lk;
    for (int32_t s : lq) lk.push_back(s / 4);
    HostProblem p = thd(lq, lk, h, 4);
    lean_bitwise_generic(p, 1700 + static_cast<uint64_t>(h));
    HostProblem r = random_packing(150 * (512 / h), 2, 1800 + static_cast<uint64_t>(h), Layout::thd_local, h);
    r.sm_scale = 0.5f;
    run_determinism_and_w_dtype(KernelFamily::lean, r);
  }
}
