// Lean's split variant without a GPU: the planner's chunks (against a simulation of the kernel's
// item order), the dispatcher's choice, the plan and launch geometry, the generated source, and
// every split variant compiled by NVRTC without spills.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_topk_fused.hpp"
#include "jit/codegen.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "ops/validate.hpp"
#include "compile_checks.hpp"
#include "problems.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::KernelFamily;
using Catch::Contains;

namespace {

// The busiest CTA when `grid` CTAs walk base x parts items as LeanSplitWork does (round-robin
// and snake), item cost = its chunk's KV tiles (of n) + the model's fixed work.
double simulated(int64_t n, int64_t base, int64_t grid, const LeanSplitPlan& s, bool snake) {
  const int64_t items = base * s.parts;
  const int64_t g = std::min(grid, items);
  std::vector<double> load(static_cast<std::size_t>(g), 0.0);
  for (int64_t pos = 0; pos < items; ++pos) {
    const int64_t k = pos / g, slot = pos % g;
    const int64_t cta = (snake && (k & 1)) ? g - 1 - slot : slot;
    const int64_t part = pos / base;
    const int64_t tiles = std::max<int64_t>(0, std::min<int64_t>(s.chunk, n - part * s.chunk));
    load[static_cast<std::size_t>(cta)] += static_cast<double>(tiles) + LeanGeometry::kTileOverhead;
  }
  return *std::max_element(load.begin(), load.end());
}

Problem problem(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }

// Chunked prefill: S_q rows over S_k keys, offsets making the rows end at S_k (q_causal_offsets
// is a device array: its values do not reach the planner, only that it is given).
Call prefill(int64_t B, int64_t sq, int64_t sk) {
  Call c = bshd_call(B, sq, sk);
  c.opt.ratio = 1;
  c.opt.q_causal_offsets = TensorDesc::contiguous(fake(0x700000), DType::i32, {B});
  return c;
}

}  // namespace

TEST_CASE("lean split: the planner's chunks for the unsaturated shapes of issue 23", "[planner][lean_split]") {
  // S_q 512 (64 q-tiles) over 16384 keys (256 KV tiles): two chunks of 128 fill 128 of 132 SMs
  LeanSplitPlan s = lean_split_plan(16384, 64, 132);
  CHECK(s.parts == 2);
  CHECK(s.chunk == 128);
  // S_q 1024 (128 q-tiles): already 128 items, nothing to gain from cutting
  s = lean_split_plan(16384, 128, 132);
  CHECK(s.parts == 1);
  CHECK(s.chunk == 256);
  // S_q 256 (32 q-tiles) over 8192 keys: four chunks of 32
  s = lean_split_plan(8192, 32, 132);
  CHECK(s.parts == 4);
  CHECK(s.chunk == 32);
  // a single q-tile over 131072 keys: as many chunks as SMs can take, within the cap
  s = lean_split_plan(131072, 1, 132);
  CHECK(s.parts == kLeanMaxParts);
  CHECK(s.chunk == 2048 / kLeanMaxParts);
  // chunks are never shorter than kLeanMinChunk (but the last): 15 KV tiles are 8 + 7, 8 tiles one
  s = lean_split_plan(960, 1, 132);
  CHECK(s.parts == 2);
  CHECK(s.chunk == kLeanMinChunk);
  s = lean_split_plan(512, 1, 132);
  CHECK(s.parts == 1);
  CHECK(s.chunk == 8);
  s = lean_split_plan(1, 1, 132);
  CHECK(s.parts == 1);
  CHECK(s.chunk == 1);
}

TEST_CASE("lean split: every plan covers the keys, and the model bounds the kernel's order", "[planner][lean_split]") {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 3000; ++i) {
    const int64_t grid = 1 + static_cast<int64_t>(rng() % 160);
    const int64_t base = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(grid));
    const int64_t s_k = 1 + static_cast<int64_t>(rng() % 200000);
    const int64_t n = (s_k + 63) / 64;
    const LeanSplitPlan s = lean_split_plan(s_k, base, grid);
    INFO("s_k " << s_k << " base " << base << " grid " << grid << " -> " << s.parts << " x " << s.chunk);
    REQUIRE(s.parts >= 1);
    REQUIRE(s.parts <= kLeanMaxParts);
    CHECK(static_cast<int64_t>(s.parts) * s.chunk >= n);      // every KV tile in some chunk
    CHECK(static_cast<int64_t>(s.parts - 1) * s.chunk < n);   // and no chunk empty by construction
    if (s.parts > 1) CHECK(s.chunk >= kLeanMinChunk);
    // the model is what the kernel's order gives, or an upper bound of it
    CHECK(simulated(n, base, grid, s, false) <= s.makespan + 1e-9);
    CHECK(simulated(n, base, grid, s, true) <= s.makespan + 1e-9);
    // never worse than not cutting
    const LeanSplitPlan whole{1, static_cast<int32_t>(n), 0};
    CHECK(s.makespan <= simulated(n, base, grid, whole, false) + 1e-9);
  }
  // Where S_k is long, the busiest CTA is within 10 % of an even share of the work (plus one
  // item's fixed cost): the point of splitting.
  for (int64_t base : {1, 8, 32, 64, 100, 128, 131})
    for (int64_t s_k : {16384, 65536, 131072}) {
      const int64_t n = s_k / 64;
      const LeanSplitPlan s = lean_split_plan(s_k, base, 132);
      const double even = static_cast<double>(base * n) / 132.0;
      INFO("base " << base << " s_k " << s_k << " -> " << s.parts << " x " << s.chunk << ", " << s.makespan << " vs " << even);
      CHECK(simulated(n, base, 132, s, true) <= 1.10 * even + 2 * LeanGeometry::kTileOverhead + (base == 1 ? 32 : 0));
    }
}

TEST_CASE("lean split: forced lean plans the split variant where q-tiles x B cannot fill the GPU", "[dispatch][lean_split]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const Problem p = problem(prefill(1, 512, 16384));
  CHECK(&choose_family(p, dev, KernelFamily::lean, false) == &lean_family());
  CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &lean_family());
  const Plan plan = make_plan(p, dev, lean_family());
  CHECK(plan.spec.shape_key() == "bshd.sq512.sk16384.wbf16.scale1.s5.split1");
  CHECK(plan.kv_parts == 2);
  CHECK(plan.kv_chunk == 128);
  CHECK(plan.num_tiles == 128);  // work items: 64 q-tiles x 2 chunks
  CHECK(plan.tiles_per_batch == 64);
  CHECK(plan.launches[0].grid[0] == 128);
  CHECK(plan.launches[0].smem == plan.spec.dynamic_smem);
  // the split variant is one kernel per (S_q, S_k) whatever B: B 2 is 128 q-tiles, one chunk each
  const Plan b2 = make_plan(problem(prefill(2, 512, 16384)), dev, lean_family());
  CHECK(b2.spec == plan.spec);
  CHECK(b2.kv_parts == 1);
  CHECK(b2.num_tiles == 128);
  // B 3 saturates: the unsplit variant, its key unchanged
  const Plan b3 = make_plan(problem(prefill(3, 512, 16384)), dev, lean_family());
  CHECK(b3.spec.shape_key() == "bshd.sq512.sk16384.wbf16.scale1.s5");
  CHECK(b3.kv_parts == 0);
  CHECK(b3.num_tiles == 192);
  // the sources: the split kernel, its name expression, and the same schedule struct
  const GeneratedSource g = render(plan.spec);
  REQUIRE(g.kernels.size() == 1);
  CHECK(g.kernels[0] == "dsa::sm90_indexer_lean_split<DsaKernelConfig, DsaLeanSchedule>");
  CHECK_THAT(g.text, Contains("static constexpr bool kKvSplit = true;") && Contains("struct DsaLeanSchedule"));
  CHECK_THAT(render(b3.spec).text, !Contains("kKvSplit"));
  // FP8 and fp32 W take it too
  Call f = prefill(1, 256, 65536);
  f.w = TensorDesc::contiguous(fake(0x300000), DType::f32, {1, 256, 64});
  f.opt.sm_scale = 0.5f;
  const Plan pf = make_plan(problem(f), dev, lean_family());
  CHECK(pf.spec.shape_key() == "bshd.sq256.sk65536.wf32.scaleany.s5.split1");
}

TEST_CASE("lean split: THD, and the fused top-k's sweep, keep the saturation gate", "[dispatch][lean_split]") {
  const DeviceInfo dev = DeviceInfo::h200();
  PackedCall small({500, 300}, {250, 150});
  try {
    choose_family(problem(small), dev, KernelFamily::lean, false);
    FAIL("expected UnsupportedConfig");
  } catch (const dsa_indexer::UnsupportedConfig& e) {
    CHECK_THAT(std::string(e.what()), Contains("grid saturation (q-tiles of T_q)"));
  }
  // the sweep's per-row selection state spans the whole row: one item per q-tile
  const Problem p = problem(prefill(1, 512, 16384));
  const Gate g = topk_fused_sweep_family().check(p, dev);
  CHECK_FALSE(g.passed());
  CHECK(std::string(g.failed).find("grid saturation") != std::string::npos);
}

TEST_CASE("lean split: its variants compile without spills", "[nvrtc][lean_split]") {
  using dsa_indexer::DType;
  const std::vector<KernelSpec> specs = {lean_spec(512, 16384, DType::bf16, true, Layout::bshd, DType::bf16, true),
                                         lean_spec(1024, 999, DType::f32, false, Layout::bshd, DType::bf16, true),
                                         lean_spec(256, 65536, DType::bf16, false, Layout::bshd, DType::e4m3, true)};
  check_compiles_without_spills(specs, "sm90_indexer_lean_split");
}
