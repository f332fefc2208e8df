// Lean at H 32 and 16 (BSHD) without a GPU: q-tiles of 16 and 32 tokens (256 packed token-head
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

TEST_CASE("lean heads: THD and the fused top-k's sweep stay H 64", "[dispatch][lean_heads]") {
  const DeviceInfo dev = DeviceInfo::h200();
  PackedCall t({4096, 4096}, {2048, 2048}, false, 32);
  try {
    choose_family(problem(t), dev, KernelFamily::lean, false);
    FAIL("expected UnsupportedConfig");
  } catch (const dsa_indexer::UnsupportedConfig& e) {
    CHECK_THAT(std::string(e.what()), Contains("heads H") && Contains("64 (THD)"));
  }
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
  }
  check_compiles_without_spills(specs, "sm90_indexer_lean");
}
