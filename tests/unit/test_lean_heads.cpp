// Lean at H 32 and 16 (BSHD and THD) without a GPU: q-tiles of 16 and 32 tokens (256 packed token-head
// rows per consumer, as at H 64), the keys (H 64's unchanged), the emitted schedule, the gates,
// and every variant compiled by NVRTC without spills.
#include <catch2/catch.hpp>

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
Problem problem(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }
}  // namespace

TEST_CASE("lean heads: H 32 and 16 plan q-tiles of 16 and 32 tokens, H 64 keeps its keys", "[planner][lean_heads]") {
  const DeviceInfo dev = DeviceInfo::h200();
  struct Want {
    int64_t heads, tile;
    const char* key;
  };
  for (const Want& w : {Want{64, 8, "bshd.sq8192.sk4096.wbf16.scale1.s5"}, Want{32, 16, "bshd.sq8192.sk4096.wbf16.scale1.s5.h32"},
                        Want{16, 32, "bshd.sq8192.sk4096.wbf16.scale1.s5.h16"}}) {
    INFO("H " << w.heads);
    const Call c = bshd_call(1, 8192, 4096, w.heads);
    const Problem p = problem(c);
    REQUIRE(&choose_family(p, dev, KernelFamily::lean, false) == &lean_family());
    const Plan plan = make_plan(p, dev, lean_family());
    CHECK(plan.spec.shape_key() == w.key);
    CHECK(plan.tokens_per_tile == w.tile);
    CHECK(plan.tiles_per_batch == 8192 / w.tile);
    CHECK(plan.num_tiles == 8192 / w.tile);
    CHECK(plan.launches[0].grid[0] == 132);
    CHECK(plan.kv_parts == 0);
    // the source: kHeads only where it is not 64, and a schedule of S_q / tile q-tiles
    const GeneratedSource g = render(plan.spec);
    CHECK((g.text.find("static constexpr int kHeads = ") != std::string::npos) == (w.heads != 64));
    CHECK_THAT(g.text, Contains("static constexpr long long kTilesPerBatch = " + std::to_string(8192 / w.tile) + ";"));
    CHECK(lean_schedule(8192, 4096, w.heads).tiles_per_batch == 8192 / w.tile);
    CHECK(lean_tile_costs(8192, 4096, 2, w.heads).size() == static_cast<std::size_t>(8192 / w.tile));
    // the same S_q with fewer q-tiles than SMs: the split variant
    const Plan small = make_plan(problem(bshd_call(1, 1024, 16384, w.heads)), dev, lean_family());
    CHECK(small.kv_parts >= 1);
    CHECK_THAT(small.spec.shape_key(), Contains(".split1"));
  }
  CHECK(lean_spec(8192, 4096, dsa_indexer::DType::bf16, true) ==
        lean_spec(8192, 4096, dsa_indexer::DType::bf16, true, Layout::bshd, dsa_indexer::DType::bf16, false, 64));
}

TEST_CASE("lean heads: THD at H 32 and 16 plans q-tiles of 16 and 32 tokens; the fused sweep stays H 64", "[dispatch][lean_heads]") {
  const DeviceInfo dev = DeviceInfo::h200();
  for (int64_t h : {64, 32, 16}) {
    INFO("H " << h);
    const int64_t tile = 512 / h;
    // T_q 6001 (not a multiple of any tile): rounded up to the q-tile in the items; the key
    // carries one q-tile
    PackedCall t({4096, 1905}, {2048, 1000}, false, static_cast<int>(h));
    const Problem p = problem(t);
    REQUIRE(&choose_family(p, dev, KernelFamily::lean, false) == &lean_family());
    const Plan plan = make_plan(p, dev, lean_family());
    const int64_t rounded = (6001 + tile - 1) / tile * tile;
    CHECK(plan.tokens_per_tile == tile);
    CHECK(plan.num_tiles == rounded / tile);
    CHECK_THAT(plan.spec.shape_key(), Contains("thd_local.sq" + std::to_string(tile) + ".sk0"));
    CHECK((plan.spec.shape_key().find(".h" + std::to_string(h)) != std::string::npos) == (h != 64));
    // the planner's per-tile KV counts follow the q-tile
    CHECK(lean_thd_tile_kv(p.cu_q_host, p.cu_k_host, p.t_q, p.ratio, tile).size() == static_cast<std::size_t>(rounded / tile));
    // fewer q-tiles than SMs: THD has no split variant
    const Gate small = lean_family().check(problem(PackedCall({500, 300}, {250, 150}, false, static_cast<int>(h))), dev);
    CHECK_FALSE(small.passed());
  }
  // H 64's per-tile KV counts: the default tile is 8 tokens
  CHECK(lean_thd_tile_kv({0, 100}, {0, 50}, 100, 2) == lean_thd_tile_kv({0, 100}, {0, 50}, 100, 2, 8));
  const Gate g = topk_fused_sweep_family().check(problem(bshd_call(1, 8192, 4096, 32)), dev);
  CHECK_FALSE(g.passed());
  CHECK(std::string(g.failed) == "heads H");
}

TEST_CASE("lean heads: the H 32 and 16 variants compile without spills", "[nvrtc][lean_heads]") {
  using dsa_indexer::DType;
  std::vector<KernelSpec> specs;
  for (int64_t h : {32, 16}) {
    specs.push_back(lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, h));
    specs.push_back(lean_spec(8192, 4096, DType::f32, false, Layout::bshd, DType::bf16, false, h));
    specs.push_back(lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3, false, h));
    specs.push_back(lean_spec(1024, 16384, DType::bf16, true, Layout::bshd, DType::bf16, true, h));
    // THD: both column modes, fp32 W, FP8, lse, four consumers
    specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, h));
    specs.push_back(lean_spec(8192, 0, DType::f32, true, Layout::thd_global, DType::bf16, false, h));
    specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_global, DType::e4m3, false, h));
    specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, h, 2, true));
    specs.push_back(lean_spec(8192, 0, DType::f32, false, Layout::thd_local, DType::e4m3, false, h, 2, true));
    specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_global, DType::bf16, false, h, 4));
  }
  check_compiles_without_spills(specs, "sm90_indexer_lean");
}
