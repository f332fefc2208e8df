// Explicit windows whose output columns start at each window (WindowColumns::window_start,
// DeepGEMM's compressed logits): validation, the families that serve it and their variants, the
// manifest key, the host oracle (the C API's appended field: test_c_api.cpp; the GPU results:
// tests/gpu/test_window_start.cpp).
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <climits>
#include <cmath>
#include <limits>

#include "compile_checks.hpp"
#include "host_problem.hpp"
#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "dsa_indexer/errors.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "jit/codegen.hpp"
#include "ops/topk.hpp"
#include "ops/validate.hpp"
#include "ops/warmup.hpp"
#include "problems.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::InvalidArgument;
using dsa_indexer::KernelFamily;
using dsa_indexer::UnsupportedConfig;
using dsa_indexer::WindowColumns;
using Catch::Contains;

namespace {
Problem run(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }

// B 2, S_q 256, S_k 128, H 64 (by default); windows (B, S_q); scores (B, S_q, n); n 0: key columns.
Call window_start_call(int64_t n, DType qk = DType::bf16, int64_t B = 2, int64_t sq = 256, int64_t sk = 128) {
  Call c = bshd_call(B, sq, sk, 64);
  if (qk == DType::e4m3) {
    c.q = TensorDesc::contiguous(fake(0x100000), DType::e4m3, {B, sq, 64, 128});
    c.k = TensorDesc::contiguous(fake(0x200000), DType::e4m3, {B, sk, 1, 128});
  }
  c.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {B, sq, n > 0 ? n : sk});
  c.opt.ks = TensorDesc::contiguous(fake(0x700000), DType::i32, {B, sq});
  c.opt.ke = TensorDesc::contiguous(fake(0x710000), DType::i32, {B, sq});
  if (n > 0) c.opt.window_columns = WindowColumns::window_start;
  return c;
}
}  // namespace

TEST_CASE("window_start: the scores' width is any N >= 1, the windows' columns count from ks", "[validate][window_start]") {
  for (int64_t n : {1, 37, 128, 4096}) {
    const Problem p = run(window_start_call(n));
    CHECK(p.window_start);
    CHECK(p.has_windows);
    CHECK(p.out_cols == n);
    CHECK(p.out_stride[1] == n);
    CHECK(p.out_stride[0] == 256 * n);
  }
  // key columns keep S_k
  Call key = window_start_call(128);
  key.opt.window_columns = WindowColumns::key;
  CHECK_FALSE(run(key).window_start);
  key.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {2, 256, 37});
  CHECK_THROWS_WITH(run(key), Contains("scores.shape[2] (S_k)"));
}

TEST_CASE("window_start: bad input names the parameter", "[validate][window_start]") {
  Call no_windows = bshd_call();
  no_windows.opt.window_columns = WindowColumns::window_start;
  CHECK_THROWS_AS(run(no_windows), InvalidArgument);
  CHECK_THROWS_WITH(run(no_windows), Contains("window_columns: expected key (the default) unless explicit windows"));
  Call value = window_start_call(16);
  value.opt.window_columns = static_cast<WindowColumns>(7);
  CHECK_THROWS_WITH(run(value), Contains("window_columns: expected key (0) or window_start (1), got 7"));
  Call rank = window_start_call(16);
  rank.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {2 * 256, 16});
  CHECK_THROWS_WITH(run(rank), Contains("(B, S_q, N) for window_start columns"));
  // THD: the layout DeepGEMM's compressed logits do not have
  PackedCall thd({5, 7}, {9, 3});
  thd.opt.ks = TensorDesc::contiguous(fake(0x700000), DType::i32, {12});
  thd.opt.ke = TensorDesc::contiguous(fake(0x710000), DType::i32, {12});
  thd.opt.window_columns = WindowColumns::window_start;
  CHECK_THROWS_AS(run(thd), UnsupportedConfig);
  CHECK_THROWS_WITH(run(thd), Contains("window_columns: expected key for THD"));
  // the top-k operation takes no explicit windows at all
  Call t = window_start_call(16);
  t.out = TensorDesc::contiguous(fake(0x400000), DType::i32, {2, 256, 16});
  dsa_indexer::TopkOptions topk;
  topk.k = 16;
  CHECK_THROWS_WITH(validate_topk(t.q, t.k, t.w, t.out, t.opt, topk, nullptr), Contains("ks / ke"));
}

TEST_CASE("explicit windows of B 1: lean's THD kernel serves them as one packed sequence (row windows)", "[dispatch][window_start]") {
  const DeviceInfo dev = DeviceInfo::h200();
  // DeepGEMM's logits through deepgemm_compat: B 1, window-start columns or key columns
  for (int64_t n : {int64_t{8192}, int64_t{700}, int64_t{0}})
    for (DType qk : {DType::bf16, DType::e4m3}) {
      INFO("n " << n << " e4m3 " << (qk == DType::e4m3));
      const Problem p = run(window_start_call(n, qk, 1, 2048, 8192));
      CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &lean_family());
      CHECK(&choose_family(p, dev, KernelFamily::automatic, true) == &generic_family());  // the escape hatch
      const Plan plan = make_plan(p, dev, lean_family());
      const Layout l = n > 0 ? Layout::thd_local : Layout::thd_global;
      // (sm_scale 1; row-window variants carry one q-tile for S_q: the THD kernel's code does not
      // depend on it, so one compile serves every height)
      const KernelSpec want = lean_spec(8, 0, DType::bf16, true, l, qk, false, 64, 2, false, false, true);
      INFO(plan.spec.variant_key() << " against " << want.variant_key());
      CHECK(plan.spec == want);
      CHECK(plan.spec.shape_key().find(".rw1") != std::string::npos);
      CHECK(render(plan.spec).text.find("static constexpr bool kRowWindows = true;") != std::string::npos);
      CHECK(plan.num_tiles == 256);
      REQUIRE(plan.schedule != nullptr);  // THD's schedule of the one segment
    }
  // every other lean variant keeps its key and source: the parameter is omitted at its default
  CHECK(render(lean_spec(2048, 0, DType::bf16, false, Layout::thd_local)).text.find("kRowWindows") == std::string::npos);
  // what it does not take: B > 1, H other than 64, too few q-tiles for the SMs
  auto lean_error = [&](const Call& c) {
    try {
      choose_family(run(c), dev, KernelFamily::lean, false);
    } catch (const UnsupportedConfig& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(lean_error(window_start_call(700, DType::bf16, 2, 2048, 8192)), Contains("explicit windows") && Contains("B 1"));
  Call h32 = window_start_call(700, DType::bf16, 1, 2048, 8192);
  h32.q = TensorDesc::contiguous(fake(0x100000), DType::bf16, {1, 2048, 32, 128});
  h32.w = TensorDesc::contiguous(fake(0x300000), DType::bf16, {1, 2048, 32});
  CHECK_THAT(lean_error(h32), Contains("heads H"));
  CHECK_THAT(lean_error(window_start_call(700, DType::bf16, 1, 512, 8192)), Contains("grid saturation"));
  // the gate key tells B 1 windows from B 2 ones and window-start from key columns
  const std::string k1 = lean_family().gate_key(run(window_start_call(700, DType::bf16, 1, 2048, 8192)), dev);
  CHECK(k1 != lean_family().gate_key(run(window_start_call(700, DType::bf16, 2, 2048, 8192)), dev));
  CHECK(k1 != lean_family().gate_key(run(window_start_call(0, DType::bf16, 1, 2048, 8192)), dev));
}

TEST_CASE("window_start: generic and reference serve it in variants of their own; lean refuses B 2", "[dispatch][window_start]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const Problem p = run(window_start_call(64));
  CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &generic_family());
  CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::lean, false), Contains("explicit windows"));
  const KernelSpec g = make_plan(p, dev, generic_family()).spec;
  CHECK(g.shape_key() == "h64.wbf16.lse0.bshd.s5.ws1");
  CHECK(render(g).text.find("static constexpr bool kWindowStart = true;") != std::string::npos);
  // key columns keep their keys and sources: the parameter is omitted at its default
  CHECK(generic_spec(64, DType::bf16, false, Layout::bshd).shape_key() == "h64.wbf16.lse0.bshd.s5");
  CHECK(render(generic_spec(64, DType::bf16, false, Layout::bshd)).text.find("kWindowStart") == std::string::npos);
  CHECK(render(reference_spec(64, DType::bf16, false, Layout::bshd)).text.find("kWindowStart") == std::string::npos);
  const KernelSpec r = make_plan(p, dev, choose_family(p, dev, KernelFamily::reference, false)).spec;
  CHECK(r == reference_spec(64, DType::bf16, false, Layout::bshd, true));
  CHECK(make_plan(run(window_start_call(64, DType::e4m3)), dev, generic_family()).spec.shape_key() ==
        "h64.wbf16.lse0.bshd.s5.ine4m3.ws1");
}

TEST_CASE("window_start: every variant compiles without spills", "[nvrtc][window_start]") {
  std::vector<KernelSpec> generic, reference, lean;
  // lean's row-windows variants (B 1 explicit windows): both column modes, bf16 / fp32 W, FP8, lse
  for (Layout l : {Layout::thd_local, Layout::thd_global})
    for (bool lse : {false, true}) {
      lean.push_back(lean_spec(2048, 0, DType::bf16, false, l, DType::bf16, false, 64, 2, lse, false, true));
      lean.push_back(lean_spec(2048, 0, DType::f32, false, l, DType::e4m3, false, 64, 2, lse, false, true));
    }
  lean.push_back(lean_spec(2048, 0, DType::bf16, true, Layout::thd_local, DType::e4m3, false, 64, 4, false, false, true));
  check_compiles_without_spills(lean, "sm90_indexer_lean");
  for (int h : {16, 64})
    for (bool lse : {false, true}) {
      generic.push_back(generic_spec(h, DType::bf16, lse, Layout::bshd, GenericGeometry::kDefaultKvStages, DType::bf16, true));
      generic.push_back(generic_spec(h, DType::f32, lse, Layout::bshd, GenericGeometry::kDefaultKvStages, DType::e4m3, true));
      reference.push_back(reference_spec(h, DType::bf16, lse, Layout::bshd, true));
    }
  check_compiles_without_spills(generic, "sm90_indexer_generic");
  check_compiles_without_spills(reference, "sm90_indexer_reference");
}

TEST_CASE("manifest: columns=window_start warms the generic variant of such calls", "[warmup][window_start]") {
  const DeviceInfo h200 = DeviceInfo::h200();
  const auto v = parse_manifest("sq=2048 sk=8192 ratio=1 w=f32 in=e4m3 columns=window_start\n", "m.txt");
  REQUIRE(v.size() == 1);
  CHECK(v[0].window_start);
  // automatic: lean's row-windows variant (B 1), and generic, which the escape hatch picks
  const KernelSpec want = generic_spec(64, DType::f32, false, Layout::bshd, GenericGeometry::kDefaultKvStages, DType::e4m3, true);
  const KernelSpec lean_rw = lean_spec(8, 0, DType::f32, false, Layout::thd_local, DType::e4m3, false, 64, 2, false, false, true);
  CHECK(manifest_specs(v, h200) == std::vector<KernelSpec>{lean_rw, want});
  // key columns with explicit windows say windows=1: lean's THD-global row-windows variant
  const auto kw = parse_manifest("sq=2048 sk=8192 windows=1 family=lean\n", "m.txt");
  CHECK(manifest_specs(kw, h200) ==
        std::vector<KernelSpec>{lean_spec(8, 0, DType::bf16, false, Layout::thd_global, DType::bf16, false, 64, 2, false, false, true)});
  // one variant for every height
  CHECK(manifest_specs(parse_manifest("sq=8192 sk=8192 windows=1 family=lean\n", "m.txt"), h200) == manifest_specs(kw, h200));
  CHECK_THROWS_WITH(parse_manifest("layout=thd_local sq=8 sk=8 windows=1\n", "m.txt"), Contains("windows"));
  CHECK_THROWS_WITH(parse_manifest("sq=8 sk=8 windows=2\n", "m.txt"), Contains("0 or 1"));
  CHECK_FALSE(parse_manifest("sq=2048 sk=8192 columns=key\n", "m.txt")[0].window_start);
  CHECK_THROWS_WITH(parse_manifest("sq=8 sk=8 columns=start\n", "m.txt"), Contains("m.txt:1") && Contains("key or window_start"));
  CHECK_THROWS_WITH(parse_manifest("layout=thd_local sq=8 sk=8 columns=window_start\n", "m.txt"), Contains("columns"));
  CHECK_THROWS_WITH(parse_manifest("op=topk sq=8 sk=8 columns=window_start\n", "m.txt"), Contains("columns"));
  // a recorded call's line says so and implies exactly its variant
  Problem p = run(window_start_call(64, DType::e4m3));
  const KernelSpec spec = make_plan(p, h200, generic_family(), PlanPurpose::spec_only).spec;
  const std::string line = manifest_line(p, h200, spec, h200);
  CHECK_THAT(line, Contains(" columns=window_start") && Contains(" in=e4m3"));
  CHECK(manifest_specs(parse_manifest(line + "\n", "recorded"), h200) == std::vector<KernelSpec>{spec});
}

TEST_CASE("window_start: the host oracle's columns are the key columns' cells from ks", "[window_start][oracle]") {
  dsa_support::HostProblem p;
  p.batch = 2;
  p.s_q = 9;
  p.s_k = 30;
  p.heads = 16;
  p.window_width = 12;
  const int32_t ks[] = {-5, 0, 3, 20, 29, 31, INT32_MIN, 7, 7};
  const int32_t ke[] = {4, 12, 40, 25, INT32_MAX, 40, 10, 7, 30};
  for (int r = 0; r < 18; ++r) {
    p.ks.push_back(ks[r % 9]);
    p.ke.push_back(ke[r % 9]);
  }
  dsa_support::fill_random(p, 99);
  dsa_support::HostProblem key = p;
  key.window_width = 0;
  const auto a = dsa_support::oracle_scores(p), b = dsa_support::oracle_scores(key);
  REQUIRE(a.size() == 18u * 12u);
  int64_t finite = 0;
  for (int64_t r = 0; r < 18; ++r)
    for (int64_t c = 0; c < 12; ++c) {
      const int64_t k = p.ks[r] + c;
      const double want = (k >= 0 && k < 30) ? b[r * 30 + k] : -std::numeric_limits<double>::infinity();
      CHECK(a[r * 12 + c] == want);
      finite += std::isfinite(a[r * 12 + c]) ? 1 : 0;
    }
  // rows 0..8: 4 + 12 + 12 + 5 + 1 + 0 + 0 + 0 + 12 visible cells, twice
  CHECK(finite == 2 * (4 + 12 + 12 + 5 + 1 + 12));
  int64_t lo, hi;
  dsa_support::row_window(p, 2, &lo, &hi);
  CHECK((lo == 0 && hi == 12));
  dsa_support::row_window(p, 0, &lo, &hi);
  CHECK((lo == 5 && hi == 9));
  dsa_support::row_window(p, 6, &lo, &hi);
  CHECK(lo == hi);
}
