// Lean with four consumer warpgroups (m64n128, 128 packed token-head rows each; session 11's
// experiment, docs/PERF_NOTES.md) without a GPU: which plans take it, their keys, launch shape
// and shared memory, the sources of the two-consumer variants unchanged, and every
// four-consumer variant compiled by NVRTC without spills or serialized wgmma.
#include <catch2/catch.hpp>

#include <stdexcept>
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
using dsa_indexer::DType;
using dsa_indexer::KernelFamily;
using Catch::Contains;

namespace {
Problem problem(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }

// set_lean_consumers is process-wide: every test puts the default back, whatever it throws.
struct Consumers {
  explicit Consumers(int n) { set_lean_consumers(n); }
  ~Consumers() { set_lean_consumers(2); }
  Consumers(const Consumers&) = delete;
  Consumers& operator=(const Consumers&) = delete;
};
// set_lean_free likewise: the ring again whatever the test throws.
struct Free {
  Free() { set_lean_free(true); }
  ~Free() { set_lean_free(false); }
  Free(const Free&) = delete;
  Free& operator=(const Free&) = delete;
};
// set_lean_trace for a scope (planning only: the address is never read here).
struct Trace {
  Trace() { set_lean_trace(reinterpret_cast<uint32_t*>(uintptr_t(0x100000))); }
  ~Trace() { set_lean_trace(nullptr); }
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;
};
}  // namespace

TEST_CASE("lean consumers: every scores plan takes the process-wide count, the fused sweep keeps two", "[planner][lean_consumers]") {
  const DeviceInfo dev = DeviceInfo::h200();
  CHECK(lean_consumers() == 2);
  const Call c = bshd_call(1, 8192, 4096, 64);
  const Plan two = make_plan(problem(c), dev, lean_family());
  PackedCall t({4096, 4096}, {2048, 2048});
  const Plan thd_two = make_plan(problem(t), dev, lean_family());
  Consumers four(4);
  CHECK(lean_consumers() == 4);
  for (int64_t h : {64, 32, 16}) {
    INFO("H " << h);
    const Plan p4 = make_plan(problem(bshd_call(1, 8192, 4096, h)), dev, lean_family());
    CHECK(lean_spec_consumers(p4.spec) == 4);
    CHECK_THAT(p4.spec.shape_key(), Contains(".c4"));
    CHECK(p4.launches[0].block[0] == 640);
    CHECK(p4.launches[0].smem == static_cast<uint32_t>(LeanGeometry::smem_bytes(DType::bf16, LeanGeometry::kKvStages, DType::bf16, 4)));
    // the same q-tiles and schedule: only the consumers differ
    CHECK(p4.tokens_per_tile == LeanGeometry::tokens_per_tile(h));
    CHECK(p4.num_tiles == 8192 / LeanGeometry::tokens_per_tile(h));
    CHECK(p4.launches[0].grid[0] == 132);
    // the split variant (q-tiles x B below the SMs) too
    const Plan small = make_plan(problem(bshd_call(1, 1024, 16384, h)), dev, lean_family());
    CHECK(small.kv_parts >= 1);
    CHECK(lean_spec_consumers(small.spec) == 4);
    CHECK(small.launches[0].block[0] == 640);
  }
  CHECK(lean_spec_consumers(two.spec) == 2);
  const Plan p4 = make_plan(problem(c), dev, lean_family());
  CHECK(two.spec.shape_key() + ".c4" == p4.spec.shape_key());
  CHECK(two.launches[0].block[0] == 384);
  // two more consumers' barriers (q full/empty, w full: 8 bytes each) and nothing else (bf16
  // weights in registers: one buffer)
  CHECK(p4.launches[0].smem == two.launches[0].smem + 2 * 3 * 8);
  // two tokens per consumer at H 64, four at 32, eight at 16: 512 packed rows per q-tile either way
  CHECK(LeanGeometry::tokens_per_consumer(64, 4) == 2);
  CHECK(LeanGeometry::tokens_per_consumer(16, 4) == 8);
  CHECK(LeanGeometry::tokens_per_consumer(64) == 4);
  // THD
  const Plan thd4 = make_plan(problem(t), dev, lean_family());
  CHECK(lean_spec_consumers(thd_two.spec) == 2);
  CHECK(lean_spec_consumers(thd4.spec) == 4);
  CHECK(thd_two.spec.shape_key() + ".c4" == thd4.spec.shape_key());
  CHECK(thd4.launches[0].block[0] == 640);
  // the fused top-k's sweep keeps two (its epilogue keeps one row per consumer warp)
  const Plan sweep = lean_plan(problem(c), dev, PlanPurpose::launch, topk_fused_sweep_family(), 0, false);
  CHECK(lean_spec_consumers(sweep.spec) == 2);
  CHECK(sweep.launches[0].block[0] == 384);
}

TEST_CASE("lean consumers: four consumers' FP8 lse at H 16, THD and split take two (they spill at 104 registers)", "[planner][lean_consumers]") {
  const DeviceInfo dev = DeviceInfo::h200();
  Consumers four(4);
  auto consumers = [&](Call c, int64_t b, int64_t rows, bool fp8) {
    c.opt.lse = b > 0 ? TensorDesc::contiguous(fake(0xa00000), DType::f32, {b, rows}) : TensorDesc::contiguous(fake(0xa00000), DType::f32, {rows});
    Problem p = problem(c);
    if (fp8) p.qk_dtype = DType::e4m3;  // (the plan reads the precision from here)
    return lean_spec_consumers(make_plan(p, dev, lean_family()).spec);
  };
  for (bool fp8 : {false, true}) {
    INFO("FP8 " << fp8);
    CHECK(consumers(bshd_call(1, 8192, 4096, 64), 1, 8192, fp8) == 4);
    CHECK(consumers(bshd_call(1, 8192, 4096, 32), 1, 8192, fp8) == 4);
    CHECK(consumers(bshd_call(1, 8192, 4096, 16), 1, 8192, fp8) == (fp8 ? 2 : 4));
    CHECK(consumers(bshd_call(1, 512, 16384, 64), 1, 512, fp8) == (fp8 ? 2 : 4));  // split
    CHECK(consumers(PackedCall({4096, 4096}, {2048, 2048}), 0, 8192, fp8) == (fp8 ? 2 : 4));
  }
  CHECK(lean_spec_consumers(make_plan(problem(bshd_call(1, 512, 16384, 64)), dev, lean_family()).spec) == 4);
}

TEST_CASE("lean consumers: only 2 and 4, and the two-consumer sources do not name kConsumers", "[lean_consumers]") {
  CHECK_THROWS_AS(set_lean_consumers(3), std::invalid_argument);
  CHECK_THROWS_AS(set_lean_consumers(0), std::invalid_argument);
  CHECK(lean_consumers() == 2);
  const KernelSpec two = lean_spec(8192, 4096, DType::bf16, true);
  const KernelSpec four = lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 4);
  CHECK(two == lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 2));
  CHECK(two.shape_key() == "bshd.sq8192.sk4096.wbf16.scale1.s5");
  CHECK(four.shape_key() == "bshd.sq8192.sk4096.wbf16.scale1.s5.c4");
  CHECK(render(two).text.find("kConsumers") == std::string::npos);
  CHECK_THAT(render(four).text, Contains("static constexpr int kConsumers = 4;"));
}

TEST_CASE("lean consumers: every four-consumer variant compiles without spills", "[nvrtc][lean_consumers]") {
  std::vector<KernelSpec> specs;
  for (int64_t h : {64, 32, 16}) {
    specs.push_back(lean_spec(1024, 16384, DType::bf16, true, Layout::bshd, DType::bf16, true, h, 4));  // split
    specs.push_back(lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, h, 4));
    specs.push_back(lean_spec(8192, 4096, DType::f32, false, Layout::bshd, DType::bf16, false, h, 4));
    specs.push_back(lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3, false, h, 4));
  }
  // ragged S_k, the smallest saturating S_q, S_k longer than S_q, FP8 with fp32 W
  specs.push_back(lean_spec(1056, 1, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(2048, 999, DType::f32, true, Layout::bshd, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(4096, 8192, DType::bf16, false, Layout::bshd, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(2048, 65536, DType::f32, false, Layout::bshd, DType::e4m3, false, 64, 4));
  // THD, both column modes, both weight dtypes, FP8
  specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(1056, 0, DType::f32, true, Layout::thd_global, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(2048, 0, DType::bf16, true, Layout::thd_local, DType::bf16, false, 64, 4));
  specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_global, DType::e4m3, false, 64, 4));
  // 640 threads launch with 96 registers each (65,536 / 640 in steps of 8); the consumers'
  // setmaxnreg to 104 relies on it
  check_compiles_without_spills(specs, "sm90_indexer_lean", 96);
}

TEST_CASE("lean free-running consumers: their own key token, no ring in the source's kernel, no spills", "[nvrtc][lean_consumers][lean_free]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const KernelSpec ring = lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 4);
  const KernelSpec free4 = lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 4, false, true);
  CHECK(free4.shape_key() == ring.shape_key() + ".free1");
  CHECK(render(ring).text.find("kFreeConsumers") == std::string::npos);
  CHECK_THAT(render(free4).text, Contains("static constexpr bool kFreeConsumers = true;"));
  // the planner: only while set_lean_free holds, and never for the fused top-k's sweep
  const Call c = bshd_call(1, 8192, 4096, 64);
  CHECK(make_plan(problem(c), dev, lean_family()).spec.shape_key().find("free") == std::string::npos);
  Plan p, sweep;
  {
    Free free_running;
    p = make_plan(problem(c), dev, lean_family());
    sweep = lean_plan(problem(c), dev, PlanPurpose::launch, topk_fused_sweep_family(), 0, false);
  }
  CHECK_FALSE(lean_free());
  CHECK_THAT(p.spec.shape_key(), Contains(".free1"));
  CHECK(sweep.spec.shape_key().find("free") == std::string::npos);
  std::vector<KernelSpec> specs = {free4};
  specs.push_back(lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, 64, 4, false, true));
  specs.push_back(lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3, false, 64, 4, false, true));
  specs.push_back(lean_spec(512, 16384, DType::bf16, false, Layout::bshd, DType::bf16, true, 16, 4, false, true));
  check_compiles_without_spills(specs, "sm90_indexer_lean", 96);
  // two consumers (384 threads at 168 registers)
  check_compiles_without_spills({lean_spec(8192, 4096, DType::bf16, true, Layout::bshd, DType::bf16, false, 64, 2, false, true),
                                 lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::bf16, false, 64, 2, false, true)},
                                "sm90_indexer_lean");
}

TEST_CASE("lean phase stamps: their own key token while set_lean_trace holds, never the sweep's; no spills", "[nvrtc][lean_trace]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const Call c = bshd_call(1, 8192, 4096, 64);
  const Plan plain = make_plan(problem(c), dev, lean_family());
  CHECK(plain.spec.shape_key().find("trace") == std::string::npos);
  CHECK(render(plain.spec).text.find("kTrace") == std::string::npos);
  std::vector<KernelSpec> specs;
  KernelSpec fp8;
  Plan sweep;
  {
    Trace trace;
    const Plan p = make_plan(problem(c), dev, lean_family());
    CHECK(p.spec.shape_key() == plain.spec.shape_key() + ".trace1");
    CHECK_THAT(render(p.spec).text, Contains("static constexpr bool kTrace = true;"));
    sweep = lean_plan(problem(c), dev, PlanPurpose::launch, topk_fused_sweep_family(), 0, false);
    specs.push_back(p.spec);
    Problem f = problem(c);
    f.w_dtype = DType::f32;  // fp32 W
    specs.push_back(make_plan(f, dev, lean_family()).spec);
    Problem e = problem(c);
    e.qk_dtype = DType::e4m3;  // FP8
    fp8 = make_plan(e, dev, lean_family()).spec;
    specs.push_back(make_plan(problem(PackedCall({4096, 4096}, {1024, 1024})), dev, lean_family()).spec);  // THD
    Free free_running;  // THD with free-running consumers (bench's leanf)
    specs.push_back(make_plan(problem(PackedCall({4096, 4096}, {1024, 1024})), dev, lean_family()).spec);
  }
  CHECK(lean_trace() == nullptr);
  CHECK(sweep.spec.shape_key().find("trace") == std::string::npos);
  for (const KernelSpec& s : specs) CHECK_THAT(s.shape_key(), Contains(".trace1"));
  check_compiles_without_spills(specs, "sm90_indexer_lean");
  // FP8's consumers (fp32 weights in registers beside the accumulators) spill 36 bytes with
  // the stamps: it compiles, and its timeline carries that cost (docs/PERF_NOTES.md)
  CHECK_THAT(fp8.shape_key(), Contains(".trace1"));
  const GeneratedSource g = render(fp8);
  const CompileOutput out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(fp8.arch), nullptr});
  CHECK_FALSE(out.cubin.empty());
  CHECK(out.log.find("Performance Loss") == std::string::npos);
}
