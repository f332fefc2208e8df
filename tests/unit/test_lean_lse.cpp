// Lean's lse output (kWithLse) without a GPU: which calls it takes (everything lean serves, the
// split variant with its combine's workspace and launch), its keys and shared memory, the sources
// of the variants without lse unchanged, and every lse variant compiled by NVRTC without spills.
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

TEST_CASE("lean lse: BSHD and THD take lean with lse, the split variant with a combine of its chunks", "[dispatch][lean_lse]") {
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
  // 64 q-tiles < 132 SMs: the split variant, with lse its chunks' partial sums in the plan's
  // workspace (float2 [parts][B][S_q]) and a second launch that merges them
  const Problem small = problem(with_lse(bshd_call(1, 512, 16384, 64), 1, 512));
  CHECK(lean_check(small, dev).passed());
  CHECK(&choose_family(small, dev, KernelFamily::automatic, false) == &lean_family());
  const Plan with = make_plan(small, dev, lean_family());
  const Plan split = make_plan(problem(bshd_call(1, 512, 16384, 64)), dev, lean_family());
  CHECK(split.kv_parts > 1);
  CHECK_THAT(split.spec.shape_key(), Contains(".split1"));
  CHECK(split.n_launches == 1);
  CHECK(split.workspace_bytes == 0);
  CHECK(with.kv_parts == split.kv_parts);
  CHECK(with.kv_chunk == split.kv_chunk);
  CHECK(with.num_tiles == split.num_tiles);
  CHECK(with.spec.shape_key() == split.spec.shape_key() + ".lse1");
  REQUIRE(with.n_launches == 2);
  CHECK(with.launches[0].grid[0] == split.launches[0].grid[0]);
  CHECK(with.launches[1].grid[0] == 2);  // 512 rows, a thread each, 256 a block
  CHECK(with.launches[1].block[0] == 256);
  CHECK(with.workspace_bytes == static_cast<uint64_t>(with.kv_parts) * 512 * 8);
  const GeneratedSource g = render(with.spec);
  REQUIRE(g.kernels.size() == 2);
  CHECK_THAT(g.kernels[1], Contains("sm90_indexer_lean_lse_combine"));
  CHECK(render(split.spec).kernels.size() == 1);
  // B 3, S_q 256: rows are B x S_q, the workspace 256-byte aligned
  const Problem b3 = problem(with_lse(bshd_call(3, 256, 65536, 32), 3, 256));
  const Plan p3 = make_plan(b3, dev, lean_family());
  REQUIRE(p3.kv_parts > 1);
  CHECK(p3.workspace_bytes == (static_cast<uint64_t>(p3.kv_parts) * 768 * 8 + 255) / 256 * 256);
  CHECK(p3.workspace_bytes % 256 == 0);
  CHECK(p3.launches[1].grid[0] == 3);
  // THD, both column modes
  for (bool global : {false, true}) {
    PackedCall t({4096, 4096}, {2048, 2048}, global);
    t.opt.lse = TensorDesc::contiguous(fake(0xa00000), DType::f32, {8192});
    const Problem p = problem(t);
    CHECK(lean_check(p, dev).passed());
    CHECK_THAT(make_plan(p, dev, lean_family()).spec.shape_key(), Contains(".lse1"));
  }
  // the fused top-k's sweep never takes a scores lse (the call's comes as sweep.has_lse: kTopkLse)
  CHECK_FALSE(topk_fused_sweep_family().check(problem(with_lse(bshd_call(1, 8192, 4096, 64), 1, 8192)), dev).passed());
}

TEST_CASE("lean lse: every lse variant compiles without spills", "[nvrtc][lean_lse]") {
  // (four consumers' FP8 lse variants at H 16, THD and split are never planned: lean_plan gives
  // them two)
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
  // the split variant with its lse combine (the second kernel of the module)
  for (int consumers : {2, 4})
    for (int64_t h : {64, 32, 16}) {
      specs.push_back(lean_spec(512, 16384, DType::bf16, true, Layout::bshd, DType::bf16, true, h, consumers, true));
      specs.push_back(lean_spec(512, 65535, DType::f32, false, Layout::bshd, DType::bf16, true, h, consumers, true));
      if (consumers == 2)  // (four consumers' are never planned: lean_plan gives them two)
        specs.push_back(lean_spec(1024, 65536, DType::bf16, false, Layout::bshd, DType::e4m3, true, h, consumers, true));
    }
  check_compiles_without_spills(specs, "sm90_indexer_lean");
}
