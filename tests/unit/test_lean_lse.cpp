// Lean's lse output (kWithLse) without a GPU: which calls it takes (everything lean serves but
// the split variant), its keys and shared memory, the sources of the variants without lse
// unchanged, and every lse variant compiled by NVRTC without spills.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_topk_fused.hpp"
#include "jit/codegen.hpp"
#include "ops/validate.hpp"
#include "compile_checks.hpp"
#include "problems.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::DType;
using dsa_indexer::KernelFamily;
using dsa_indexer::TensorDesc;
using Catch::Contains;

namespace {
Problem problem(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }
Call with_lse(Call c, int64_t b, int64_t rows) {
  c.opt.lse = b > 0 ? TensorDesc::contiguous(fake(0xa00000), DType::f32, {b, rows}) : TensorDesc::contiguous(fake(0xa00000), DType::f32, {rows});
  return c;
}
}  // namespace

TEST_CASE("lean lse: BSHD and THD take lean with lse, unsplit where the split variant would serve the scores", "[dispatch][lean_lse]") {
  const DeviceInfo dev = DeviceInfo::h200();
  for (int64_t h : {64, 32, 16}) {
    INFO("H " << h);
    const Problem p = problem(with_lse(bshd_call(2, 8192, 4096, h), 2, 8192));
    REQUIRE(p.has_lse);
    CHECK(lean_check(p, dev).passed());
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &lean_family());
    const Plan plan = make_plan(p, dev, lean_family());
    CHECK_THAT(plan.spec.shape_key(), Contains(".lse1"));
    const Plan none = make_plan(problem(bshd_call(2, 8192, 4096, h)), dev, lean_family());
    CHECK(plan.spec.shape_key() == none.spec.shape_key() + ".lse1");
    // the lse scratch, and a second buffer of the bf16 weights (the lse variants read them from
    // shared memory per tile): 512 packed rows x 2 bytes
    CHECK(plan.launches[0].smem == none.launches[0].smem + static_cast<uint32_t>(LeanGeometry::lse_bytes(h)) + 512 * 2);
    CHECK(render(none.spec).text.find("kWithLse") == std::string::npos);
    CHECK_THAT(render(plan.spec).text, Contains("static constexpr bool kWithLse = true;"));
  }
  // 64 q-tiles < 132 SMs: without lse the split variant, with lse the unsplit kernel on 64 CTAs
  const Problem small = problem(with_lse(bshd_call(1, 512, 16384, 64), 1, 512));
  CHECK(lean_check(small, dev).passed());
  CHECK(&choose_family(small, dev, KernelFamily::automatic, false) == &lean_family());
  const Plan unsplit = make_plan(small, dev, lean_family());
  CHECK(unsplit.kv_parts == 0);
  CHECK(unsplit.num_tiles == 64);
  CHECK(unsplit.launches[0].grid[0] == 64);
  CHECK(unsplit.spec.shape_key() == "bshd.sq512.sk16384.wbf16.scale1.s5.lse1");
  const Plan split = make_plan(problem(bshd_call(1, 512, 16384, 64)), dev, lean_family());
  CHECK(split.kv_parts > 1);
  CHECK_THAT(split.spec.shape_key(), Contains(".split1"));
  // THD, both column modes
  for (bool global : {false, true}) {
    PackedCall t({4096, 4096}, {2048, 2048}, global);
    t.opt.lse = TensorDesc::contiguous(fake(0xa00000), DType::f32, {8192});
    const Problem p = problem(t);
    CHECK(lean_check(p, dev).passed());
    CHECK_THAT(make_plan(p, dev, lean_family()).spec.shape_key(), Contains(".lse1"));
  }
  // the fused top-k's sweep never takes lse
  CHECK_FALSE(topk_fused_sweep_family().check(problem(with_lse(bshd_call(1, 8192, 4096, 64), 1, 8192)), dev).passed());
}

TEST_CASE("lean lse: every lse variant compiles without spills", "[nvrtc][lean_lse]") {
  // (four consumers' FP8 lse variants at H 16 and THD are never planned: lean_plan gives them two)
  std::vector<KernelSpec> specs;
  for (int consumers : {2, 4})
    for (int64_t h : {64, 32, 16}) {
      specs.push_back(lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, h, consumers, true));
      specs.push_back(lean_spec(8192, 4096, DType::f32, false, Layout::bshd, DType::bf16, false, h, consumers, true));
      if (consumers == 2 || h != 16)
        specs.push_back(lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3, false, h, consumers, true));
    }
  for (int consumers : {2, 4}) {
    specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, 64, consumers, true));
    specs.push_back(lean_spec(1056, 0, DType::f32, true, Layout::thd_global, DType::bf16, false, 64, consumers, true));
    if (consumers == 2)
      specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_global, DType::e4m3, false, 64, consumers, true));
    specs.push_back(lean_spec(1056, 999, DType::bf16, false, Layout::bshd, DType::bf16, false, 64, consumers, true));
    specs.push_back(lean_spec(1056, 999, DType::bf16, false, Layout::bshd, DType::e4m3, false, 64, consumers, true));
  }
  check_compiles_without_spills(specs, "sm90_indexer_lean");
}
