#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>

#include "dsa_indexer/errors.hpp"
#include "jit/runtime.hpp"
#include "test_support.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "call_cases.hpp"
#include "ops/topk.hpp"
#include "ops/warmup.hpp"
#include "jit/disk_cache.hpp"
#include "process_support.hpp"

using namespace dsa_indexer::detail;
using Catch::Contains;

TEST_CASE("manifest parsing", "[warmup]") {
  auto v = parse_manifest("# comment\n\nlayout=bshd heads=64 sq=8192 sk=4096 ratio=2 w=f32 # trailing\n"
                          "layout=thd_global heads=16 sq=100 sk=50 lse=1 family=reference\n",
                          "m.txt");
  REQUIRE(v.size() == 2);
  CHECK(v[0].line == 3);
  CHECK(v[0].w == dsa_indexer::DType::f32);
  CHECK(v[0].ratio == 2);
  CHECK(v[1].layout == Layout::thd_global);
  CHECK(v[1].lse);
  CHECK(v[1].family == dsa_indexer::KernelFamily::reference);
  CHECK_THROWS_WITH(parse_manifest("heads=48 sq=1 sk=1\n", "m.txt"), Contains("m.txt:1") && Contains("heads"));
  CHECK_THROWS_WITH(parse_manifest("layout=bshd sq=1\n", "m.txt"), Contains("sk="));
  CHECK_THROWS_WITH(parse_manifest("\nsize=3 sq=1 sk=1\n", "m.txt"), Contains("m.txt:2") && Contains("key"));
  CHECK_THROWS_AS(parse_manifest("sq=x sk=1\n", "m.txt"), dsa_indexer::InvalidArgument);
}

TEST_CASE("manifest specs are deduplicated", "[warmup]") {
  auto v = parse_manifest("sq=60 sk=32 ratio=2\nsq=124 sk=32 ratio=4\nsq=12 sk=8 w=f32\nsq=12 sk=8 family=reference\n", "m");
  auto specs = manifest_specs(v, DeviceInfo::h200());
  REQUIRE(specs.size() == 3);  // S_q no multiple of lean's q-tile: generic for every automatic line
  CHECK(specs[0] == generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd));
  CHECK(specs[1] == generic_spec(64, dsa_indexer::DType::f32, false, Layout::bshd));
  CHECK(specs[2] == reference_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd));
}

TEST_CASE("manifest: lean lines warm their scale variants and the escape hatch's generic variant", "[warmup]") {
  using dsa_indexer::DType;
  auto specs = manifest_specs(parse_manifest("sq=8192 sk=4096 ratio=2 scale=both\nsq=2048 sk=512 ratio=4 w=f32\n"
                                             "sq=4096 sk=2048 family=lean scale=1\nsq=4096 sk=2048 family=generic\n", "m"),
                              DeviceInfo::h200());
  const std::vector<KernelSpec> want = {lean_spec(8192, 4096, DType::bf16, false), generic_spec(64, DType::bf16, false, Layout::bshd),
                                        lean_spec(8192, 4096, DType::bf16, true),  lean_spec(2048, 512, DType::f32, false),
                                        generic_spec(64, DType::f32, false, Layout::bshd), lean_spec(4096, 2048, DType::bf16, true)};
  REQUIRE(specs.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(specs[i].shape_key() == want[i].shape_key());
  CHECK(specs == want);
  CHECK_THROWS_WITH(parse_manifest("sq=8 sk=8 scale=2\n", "m"), Contains("scale") && Contains("any, 1 or both"));
  CHECK_THROWS_WITH(parse_manifest("sq=8 sk=8 family=fast\n", "m"), Contains("lean (3)"));
}

TEST_CASE("warmup into an empty directory, then every entry verifies", "[warmup]") {
  dsa_test::TempDir t;
  EnvConfig cfg;
  cfg.cache_dir = t.path();
  cfg.log_level = LogLevel::quiet;
  Runtime rt(cfg);
  auto specs = manifest_specs(parse_manifest("sq=64 sk=64 heads=16 family=reference\nsq=64 sk=64 heads=32 w=f32 lse=1\n", "m"),
                              DeviceInfo::h200());
  // the reference variant; the second line's lean variant (lse: the split variant with its combine,
  // 4 q-tiles) and the generic one the escape hatch would pick
  auto s1 = warmup(rt, specs, nullptr);
  CHECK(s1.compiled == 3);
  CHECK(s1.cached == 0);
  CHECK(s1.failed == 0);
  auto s2 = warmup(rt, specs, nullptr);
  CHECK(s2.compiled == 0);
  CHECK(s2.cached == 3);
  auto list = rt.disk().list();
  REQUIRE(list.size() == 3);
  for (const auto& e : list) CHECK(e.ok);
}

TEST_CASE("warmup into an unwritable directory reports failures", "[warmup]") {
  dsa_test::TempDir t;
  { std::ofstream(t.path() + "/f") << "x"; }
  EnvConfig cfg;
  cfg.cache_dir = t.path() + "/f/cache";
  cfg.log_level = LogLevel::quiet;
  Runtime rt(cfg);
  auto specs = manifest_specs(parse_manifest("sq=64 sk=64 heads=16 family=reference\n", "m"), DeviceInfo::h200());
  auto s = warmup(rt, specs, nullptr);
  CHECK(s.failed == 1);
  REQUIRE(s.failures.size() == 1);
  CHECK_THAT(s.failures[0], Contains("not stored"));
}

TEST_CASE("manifest values are range-checked as the public API checks them", "[warmup][manifest_ranges]") {
  const std::string ok = "layout=bshd heads=64 sq=8192 sk=4096 ratio=2 w=bf16";
  // Out of range, saturating, wrapping, signed, spaced or empty values: each an InvalidArgument
  // that names the key (never clamped into a plan the planner then overflows on).
  for (const std::string bad :
       {"sq=99999999999999999999 sk=1", "sq=2147483648 sk=1", "sq=1 sk=9223372036854775807", "heads=4294967312 sq=1 sk=1",
        "heads=-16 sq=1 sk=1", "sq=0 sk=1", "sq=+5 sk=1", "sq=1 sk=1 ratio=0", "sq=1 sk=1 ratio=2147483648",
        "sq=1 sk=1 ratio=", "sq=0x10 sk=1", "sq=1e3 sk=1"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_manifest(bad + "\n", "m.txt"), dsa_indexer::InvalidArgument);
  }
  CHECK_THROWS_WITH(parse_manifest("heads=4294967312 sq=1 sk=1\n", "m.txt"), Contains("heads") && Contains("4294967312"));
  CHECK_THROWS_WITH(parse_manifest("sq=99999999999999999999 sk=1\n", "m.txt"), Contains("[1, 2147483647]"));
  // A key given twice is an error, whichever value would have won.
  CHECK_THROWS_WITH(parse_manifest(ok + " heads=16\n", "m.txt"), Contains("heads") && Contains("once"));
  CHECK_THROWS_WITH(parse_manifest("sq=1 sk=1 sq=1\n", "m.txt"), Contains("once"));
  // The largest values the API accepts plan without overflow (this test runs under UBSan in
  // tests/fuzz/run_fuzz.sh's manifest target as well).
  auto v = parse_manifest("layout=bshd heads=16 sq=2147483647 sk=2147483647 ratio=2147483647\n"
                          "layout=thd_global heads=64 sq=2147483647 sk=1 ratio=1 family=reference\n", "m.txt");
  REQUIRE(v.size() == 2);
  CHECK(v[0].sq == 2147483647);
  auto specs = manifest_specs(v, DeviceInfo::h200());
  CHECK(specs.size() == 2);
  // A lean THD line of nearly 2^31 tokens names a variant without planning the packing's
  // per-call q-tile order (the manifest fuzzer found that this allocated gigabytes).
  const auto t0 = std::chrono::steady_clock::now();
  specs = manifest_specs(parse_manifest("layout=thd_global heads=64 sq=2147483447 sk=2147483646 w=f32 lse=0\n", "m.txt"),
                         DeviceInfo::h200());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  REQUIRE(specs.size() == 2);  // lean, and generic for the escape hatch
  CHECK(specs[0].shape_key() == "thd_global.sq8.sk0.wf32.scaleany.s5");
}

TEST_CASE("manifest: batch= and sms= are what a gate reads besides the shape", "[warmup]") {
  using dsa_indexer::DType;
  auto v = parse_manifest("sq=1024 sk=512 batch=2 family=lean\nsq=1024 sk=512 sms=114 family=lean\nsq=1024 sk=512\n", "m");
  REQUIRE(v.size() == 3);
  CHECK(v[0].batch == 2);
  CHECK(v[1].sms == 114);
  CHECK(v[2].batch == 1);
  CHECK(v[2].sms == 0);
  const auto specs = manifest_specs(v, DeviceInfo::h200());
  // 128 q-tiles: lean where B or the SM count makes the grid saturated, else its split variant.
  CHECK(specs == std::vector<KernelSpec>{lean_spec(1024, 512, DType::bf16, false),
                                         lean_spec(1024, 512, DType::bf16, false, Layout::bshd, DType::bf16, true),
                                         generic_spec(64, DType::bf16, false, Layout::bshd)});
  // named, an unsaturated shape is lean's split variant (automatic calls take it once validated)
  CHECK(manifest_specs(parse_manifest("sq=1024 sk=512 family=lean\n", "m"), DeviceInfo::h200()) ==
        std::vector<KernelSpec>{lean_spec(1024, 512, DType::bf16, false, Layout::bshd, DType::bf16, true)});
  CHECK_THROWS_WITH(parse_manifest("layout=thd_local sq=64 sk=64 batch=2\n", "m"), Contains("batch") && Contains("THD"));
  CHECK_THROWS_WITH(parse_manifest("sq=64 sk=64 sms=0\n", "m"), Contains("sms") && Contains("[1, 65535]"));
  CHECK_THROWS_AS(parse_manifest("sq=64 sk=64 batch=0\n", "m"), dsa_indexer::InvalidArgument);
  CHECK_THROWS_AS(parse_manifest("sq=64 sk=64 sms=70000\n", "m"), dsa_indexer::InvalidArgument);
}

TEST_CASE("manifest_line maps back to exactly the variant a call used, for every family", "[warmup][record]") {
  for (const auto& c : dsa_test::every_family_calls()) {
    const std::string line = manifest_line(c.p, c.dev, c.spec, DeviceInfo::h200());
    INFO(c.what << ": " << c.spec.variant_key() << " -> '" << line << "'");
    REQUIRE_FALSE(line.empty());
    CHECK(line.find('\n') == std::string::npos);
    CHECK_THAT(line, Contains(std::string("family=") + family_of(c.spec).option()) && Contains("# " + c.spec.variant_key()));
    CHECK(manifest_specs(parse_manifest(line + "\n", "recorded"), DeviceInfo::h200()) == std::vector<KernelSpec>{c.spec});
  }
  // The fields a gate reads are written only where they differ from a line's defaults.
  const auto cases = dsa_test::every_family_calls();
  auto line_of = [&](const std::string& what) {
    for (const auto& c : cases)
      if (c.what == what) return manifest_line(c.p, c.dev, c.spec, DeviceInfo::h200());
    FAIL("no case " << what);
    return std::string();
  };
  CHECK_THAT(line_of("lean saturated by B 2 only"), Contains(" batch=2 ") && !Contains("sms="));
  CHECK_THAT(line_of("lean on a 114-SM device, unsaturated on the profile"), Contains(" sms=114 ") && !Contains("batch="));
  CHECK_THAT(line_of("lean scale 1"), Contains(" scale=1 "));
  CHECK_THAT(line_of("lean bshd 8192x4096"), !Contains("scale=") && !Contains("batch=") && !Contains("sms="));
}

TEST_CASE("manifest_line is empty where no line says the variant", "[warmup][record]") {
  const auto cases = dsa_test::every_family_calls();
  // A lean variant paired with a problem its gate refuses on the profile (H 32): no line of
  // that problem implies it, and nothing approximate is written instead.
  const auto& lean = cases.front();
  const auto& h32 = cases[8];
  REQUIRE(h32.p.heads == 32);
  CHECK(manifest_line(h32.p, h32.dev, lean.spec, DeviceInfo::h200()).empty());
  CHECK(manifest_line(lean.p, lean.dev, KernelSpec{}, DeviceInfo::h200()).empty());
}

using dsa_test::topk_case;
using dsa_test::TopkCallCase;

TEST_CASE("manifest: op=topk lines and their keys", "[warmup][topk]") {
  auto v = parse_manifest("op=topk sq=8192 sk=65536 ratio=1 k=512\nop=scores sq=64 sk=64\n"
                          "op=topk layout=thd_local sq=100 sk=50 family=topk_unfused\nsq=64 sk=64\n", "m.txt");
  REQUIRE(v.size() == 4);
  CHECK(v[0].op == Operation::topk);
  CHECK(v[0].k == 512);
  CHECK(v[1].op == Operation::scores);
  CHECK(v[2].k == dsa_indexer::kTopkMaxK);  // the default
  CHECK(v[2].family == dsa_indexer::KernelFamily::topk_unfused);
  CHECK(v[3].op == Operation::scores);
  CHECK_THROWS_WITH(parse_manifest("op=backward sq=1 sk=1\n", "m.txt"), Contains("m.txt:1") && Contains("scores or topk"));
  CHECK_THROWS_WITH(parse_manifest("op=topk sq=1 sk=1 k=0\n", "m.txt"), Contains("k") && Contains("[1, 2048]"));
  CHECK_THROWS_WITH(parse_manifest("op=topk sq=1 sk=1 k=2049\n", "m.txt"), Contains("[1, 2048]"));
  CHECK_THROWS_WITH(parse_manifest("sq=1 sk=1 k=64\n", "m.txt"), Contains("only on an op=topk line"));
  CHECK_THROWS_WITH(parse_manifest("op=topk layout=thd_global sq=1 sk=1\n", "m.txt"), Contains("bshd or thd_local"));
  // A family serves one operation: the line says which and is refused when they disagree.
  CHECK_THROWS_WITH(parse_manifest("op=topk sq=1 sk=1 family=generic\n", "m.txt"),
                    Contains("family=generic") && Contains("a family of operation topk (topk_unfused, topk_fused)"));
  CHECK_THROWS_WITH(parse_manifest("sq=1 sk=1 family=topk_unfused\n", "m.txt"), Contains("a family of operation scores"));
  CHECK_THROWS_WITH(parse_manifest("op=topk op=topk sq=1 sk=1\n", "m.txt"), Contains("once"));
}

TEST_CASE("manifest: a top-k line implies the top-k variant and the score variants of its blocks", "[warmup][topk]") {
  using dsa_indexer::DType;
  const DeviceInfo h200 = DeviceInfo::h200();
  const KernelSpec gen_bf16 = generic_spec(64, DType::bf16, false, Layout::bshd);
  // BSHD blocks are causal problems of their own: the 256 MiB budget's 1024-row blocks (128
  // q-tiles, fewer than the SMs) go lean's split variant, the escape hatch generic.
  CHECK(manifest_specs(parse_manifest("op=topk sq=8192 sk=65536 ratio=1\n", "m"), h200) ==
        std::vector<KernelSpec>{topk_unfused_spec(Layout::bshd), lean_spec(1024, 65536, DType::bf16, false, Layout::bshd, DType::bf16, true),
                                gen_bf16});
  // 16384 keys: 4096-row blocks, lean
  CHECK(manifest_specs(parse_manifest("op=topk sq=8192 sk=16384 ratio=1\n", "m"), h200) ==
        std::vector<KernelSpec>{topk_unfused_spec(Layout::bshd), lean_spec(4096, 16384, DType::bf16, false), gen_bf16});
  // THD blocks have explicit windows: with topk_lean_window_blocks off generic, whichever the
  // hatch; on (the default), at H 64 lean's row-windows variant, one for every block height (2
  // blocks of 8192 rows here), and generic for the hatch (at H 32 generic: lean's row windows
  // are H 64).
  const std::string thd32 = "op=topk layout=thd_local heads=32 sq=16384 sk=16384 w=f32 lse=1 family=topk_unfused\n";
  const std::string thd64 = "op=topk layout=thd_local sq=16384 sk=16384 w=f32 family=topk_unfused\n";
  const std::vector<KernelSpec> gen32{topk_unfused_spec(Layout::thd_local), generic_spec(32, DType::f32, false, Layout::bshd)};
  const std::vector<KernelSpec> gen64{topk_unfused_spec(Layout::thd_local), generic_spec(64, DType::f32, false, Layout::bshd)};
  set_topk_lean_window_blocks(false);
  CHECK(manifest_specs(parse_manifest(thd32, "m"), h200) == gen32);
  CHECK(manifest_specs(parse_manifest(thd64, "m"), h200) == gen64);
  set_topk_lean_window_blocks(std::nullopt);
  CHECK(manifest_specs(parse_manifest(thd32, "m"), h200) == gen32);
  CHECK(manifest_specs(parse_manifest(thd64, "m"), h200) ==
        std::vector<KernelSpec>{topk_unfused_spec(Layout::thd_local),
                                lean_spec(8, 0, DType::f32, false, Layout::thd_global, DType::bf16, false, 64, 2, false, false, true),
                                generic_spec(64, DType::f32, false, Layout::bshd)});
  set_topk_lean_window_blocks(std::nullopt);
  // The same variants as planning the line's problem through the family's own inner problems.
  const auto lines = parse_manifest("op=topk sq=16384 sk=4096 ratio=4 scale=both\n", "m");
  const auto specs = manifest_specs(lines, h200);
  // one block of all 16384 rows (the 256 MiB budget holds them), lean in both scale variants
  CHECK(specs == std::vector<KernelSpec>{topk_unfused_spec(Layout::bshd), lean_spec(16384, 4096, DType::bf16, false), gen_bf16,
                                         lean_spec(16384, 4096, DType::bf16, true)});
  // A scores line keeps its meaning whether or not it says op=scores.
  CHECK(manifest_specs(parse_manifest("op=scores sq=8192 sk=4096 ratio=2 scale=both\n", "m"), h200) ==
        manifest_specs(parse_manifest("sq=8192 sk=4096 ratio=2 scale=both\n", "m"), h200));
}


TEST_CASE("manifest: a family=topk_fused line implies the fused variant and its blocks' sweeps", "[warmup][topk]") {
  const DeviceInfo h200 = DeviceInfo::h200();
  for (const char* line : {"op=topk sq=8192 sk=65536 ratio=1 family=topk_fused\n",
                           "op=topk sq=16384 sk=4096 ratio=4 scale=both family=topk_fused\n"}) {
    INFO(line);
    const auto ml = parse_manifest(line, "m");
    std::vector<KernelSpec> want;
    auto add = [&](const KernelSpec& s) {
      if (std::find(want.begin(), want.end(), s) == want.end()) want.push_back(s);
    };
    for (float scale : {0.125f, 1.0f}) {
      if (scale == 1.0f && ml[0].scale == ManifestScale::any) continue;
      const Problem p = manifest_problem(ml[0], scale);
      add(make_plan(p, h200, topk_fused_family(), PlanPurpose::spec_only).spec);
      const auto inner = topk_fused_family().inner_problems(p, h200);
      CHECK(!inner.empty());
      CHECK(inner.size() <= 2);  // one block, or blocks of about equal size: two shapes at most
      for (const Problem& s : inner) {
        CHECK(s.op == Operation::topk_sweep);
        add(make_plan(s, h200, topk_fused_sweep_family(), PlanPurpose::spec_only).spec);
      }
    }
    CHECK(manifest_specs(ml, h200) == want);
  }
}

TEST_CASE("manifest: a top-k line's blocks are planned per distinct shape, not per block", "[warmup][topk][manifest_ranges]") {
  const DeviceInfo h200 = DeviceInfo::h200();
  // sms=1: blocks of 8 rows of 2^31 keys, 2^28 blocks; BSHD with a huge B; THD of one segment.
  const auto t0 = std::chrono::steady_clock::now();
  // (the top-k family's variant and generic's; with topk_lean_window_blocks, THD blocks at H 64
  // also lean's row-windows variant, one for every block height)
  for (bool lean_windows : {false, true}) {
    set_topk_lean_window_blocks(lean_windows);
    for (const auto& [line, n] : std::vector<std::pair<const char*, std::size_t>>{
             {"op=topk sq=2147483647 sk=2147483647 ratio=2147483647 sms=1 batch=2147483647 heads=16\n", 2},
             {"op=topk layout=thd_local sq=2147483647 sk=2147483647 sms=1 w=f32\n", lean_windows ? 3 : 2},
             {"op=topk layout=thd_local sq=2147483647 sk=1 k=1\n", lean_windows ? 3 : 2}}) {
      INFO(line << " lean windows " << lean_windows);
      const auto specs = manifest_specs(parse_manifest(line, "m"), h200);
      CHECK(specs.size() == n);
    }
  }
  set_topk_lean_window_blocks(std::nullopt);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  // The distinct shapes themselves: a full block and the tail, once each whatever B.
  const auto& fam = topk_unfused_family();
  dsa_test::Call c = dsa_test::bshd_call(3, 2500, 65536);
  c.opt.ratio = 1;
  const TopkCallCase tc = topk_case("bshd B3", c, 2048);
  const auto inner = fam.inner_problems(tc.p, h200);
  // blocks within 256 MiB (1024 rows of 65536 keys), three of about equal size: 840 and
  // 2500 - 2 * 840 = 820
  REQUIRE(inner.size() == 2);
  CHECK(inner[0].s_q == 840);
  CHECK(inner[1].s_q == 820);
  for (const Problem& s : inner) {
    CHECK(s.op == Operation::scores);
    CHECK(s.has_offsets);  // a causal problem of its own (S_k * ratio <= 2^31)
    CHECK_FALSE(s.has_windows);
    CHECK(s.batch == 1);
    CHECK(s.s_k == 65536);
  }
}

TEST_CASE("manifest_line round-trips top-k calls: the line implies the call's variants", "[warmup][record][topk]") {
  using dsa_indexer::DType;
  std::vector<TopkCallCase> cases;
  dsa_test::Call a = dsa_test::bshd_call(1, 8192, 16384);
  a.opt.ratio = 1;
  cases.push_back(topk_case("bshd 8192x16384", a, 2048));
  dsa_test::Call b = dsa_test::bshd_call(2, 300, 77, 32, DType::f32);
  b.opt.sm_scale = 1.0f;
  cases.push_back(topk_case("bshd B2 H32 f32 W scale 1", b, 64));
  DeviceInfo small = DeviceInfo::h200();
  small.sm_count = 114;
  dsa_test::Call d = dsa_test::bshd_call(1, 4096, 2048);
  cases.push_back(topk_case("bshd on a 114-SM device", d, 512, small));
  dsa_test::PackedCall packed({3000, 1, 0, 5190}, {3000, 1, 7, 5190});
  packed.opt.ratio = 1;
  cases.push_back(topk_case("thd 4 segments", packed, 2048));
  for (const auto& c : cases) {
    const std::string line = manifest_line(c.p, c.dev, c.spec, DeviceInfo::h200());
    INFO(c.what << ": '" << line << "'");
    REQUIRE_FALSE(line.empty());
    CHECK(line.rfind("op=topk ", 0) == 0);
    // The family that served the call (the fused path where its gates hold) and its inner
    // variants: the scores of the unfused path's blocks, the sweeps of the fused path's.
    const bool fused = std::string(family_of(c.spec).option()) == "topk_fused";
    CHECK_THAT(line, Contains(fused ? " family=topk_fused k=" : " family=topk_unfused k=") && Contains("# " + c.spec.variant_key()));
    const std::vector<KernelSpec> want = call_specs(c.p, c.dev, c.spec);
    REQUIRE(want.size() >= 2);
    CHECK(want[0] == c.spec);
    for (std::size_t i = 1; i < want.size(); ++i)
      CHECK(family_of(want[i]).operation() == (fused ? Operation::topk_sweep : Operation::scores));
    CHECK(manifest_specs(parse_manifest(line + "\n", "recorded"), DeviceInfo::h200()) == want);
  }
  CHECK_THAT(manifest_line(cases[1].p, cases[1].dev, cases[1].spec, DeviceInfo::h200()), Contains(" scale=1 ") && Contains(" batch=2 ") && Contains(" k=64"));
  CHECK_THAT(manifest_line(cases[2].p, cases[2].dev, cases[2].spec, DeviceInfo::h200()), Contains(" sms=114 "));
  CHECK_THAT(manifest_line(cases[3].p, cases[3].dev, cases[3].spec, DeviceInfo::h200()), Contains("layout=thd_local") && Contains(" sq=8191 sk=8198 "));
  // A scores family's calls still map to exactly their one variant.
  for (const auto& c : dsa_test::every_family_calls()) CHECK(call_specs(c.p, c.dev, c.spec) == std::vector<KernelSpec>{c.spec});
}

TEST_CASE("manifest: the default manifest's scores lines keep their variants, its top-k lines add the top-k ones", "[warmup][topk]") {
  std::ifstream in(DSA_TEST_DEFAULT_MANIFEST);
  std::stringstream text;
  text << in.rdbuf();
  std::string scores_only;
  int topk_lines = 0;
  std::istringstream lines(text.str());
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("op=topk", 0) == 0) ++topk_lines;
    else scores_only += l + "\n";
  }
  CHECK(topk_lines >= 5);
  const auto all = manifest_specs(parse_manifest(text.str(), "default"), DeviceInfo::h200());
  const auto before = manifest_specs(parse_manifest(scores_only, "default"), DeviceInfo::h200());
  // The top-k lines come last: the scores lines' variants first, in their order, then the top-k
  // families' variants (the unfused path's two, BSHD and THD, and the fused path's BSHD one:
  // automatic calls at k 2048 past about 127k keys take it since session 33) and the lean and
  // sweep variants of their BSHD blocks' shapes (the blocks' generic variants are among the
  // scores lines' ones).
  REQUIRE(all.size() > before.size() + 2);
  CHECK(std::vector<KernelSpec>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(before.size())) == before);
  int topk_specs = 0;
  for (std::size_t i = before.size(); i < all.size(); ++i) {
    if (family_of(all[i]).operation() == Operation::topk) ++topk_specs;
    else CHECK_THAT(std::string(family_of(all[i]).option()), Catch::Matchers::Equals("lean") || Catch::Matchers::Equals("topk_fused_sweep"));
  }
  CHECK(topk_specs == 3);
}

// Issue 24, class 5: messages that name the cause and, for manifests, the file and line.
TEST_CASE("messages: a manifest line the planner refuses names the file and line, not indexer_forward", "[messages]") {
  const std::string text = "# shapes\nlayout=bshd heads=64 sq=8192 sk=4096\n\nlayout=thd_local sq=64 sk=64 family=lean\n";
  try {
    manifest_specs(parse_manifest(text, "shapes.txt"), DeviceInfo::h200());
    FAIL("the lean gate should refuse line 4");
  } catch (const dsa_indexer::UnsupportedConfig& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Contains("manifest shapes.txt:4:") && Contains("family lean") && Contains("grid saturation"));
    CHECK_THAT(m, !Contains("indexer_forward"));
  }
}

TEST_CASE("messages: a huge manifest token is shown truncated, a byte order mark named", "[messages]") {
  const std::string huge = "sq=" + std::string(1 << 20, '9');
  try {
    parse_manifest(huge + " sk=64\n", "m.txt");
    FAIL("refused");
  } catch (const dsa_indexer::InvalidArgument& e) {
    const std::string m = e.what();
    CHECK(m.size() < 400);
    CHECK_THAT(m, Contains("m.txt:1: sq") && Contains("...") && Contains("(1048579 bytes)"));
  }
  try {
    parse_manifest("\xEF\xBB\xBFsq=64 sk=64\n", "bom.txt");
    FAIL("refused");
  } catch (const dsa_indexer::InvalidArgument& e) {
    CHECK_THAT(std::string(e.what()), Contains("bom.txt:1:") && Contains("UTF-8 byte order mark") && Contains("'sq=64'"));
  }
}

TEST_CASE("messages: manifest de-duplication is linear (100,000 lines)", "[messages][warmup]") {
  std::string text;
  // 100,000 distinct lean variants (S_q is in the key), then each of them again.
  for (int i = 0; i < 200000; ++i) text += "layout=bshd heads=64 sq=" + std::to_string(1056 + 8 * (i % 100000)) + " sk=64 family=lean\n";
  const auto problems = parse_manifest(text, "big.txt");
  const auto t0 = std::chrono::steady_clock::now();
  const auto specs = manifest_specs(problems, DeviceInfo::h200());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("manifest_specs of 200,000 lines (100,000 variants): %.2f s\n", s);
  CHECK(specs.size() == 100000);
  CHECK(specs[99999].values == manifest_specs(parse_manifest("sq=801048 sk=64 family=lean", "m"), DeviceInfo::h200())[0].values);
  CHECK(s < 10.0);  // a find() per variant over those seen: about 35 s for the first 100,000
}

TEST_CASE("messages: a missing prebuilt directory is reported once", "[messages]") {
  dsa_test::TempDir t;
  const auto r = dsa_test::run_in_child([&] {
    DiskCache d(t.path() + "/cache", t.path() + "/no/such/prebuilt", "13.0");
    for (int i = 0; i < 3; ++i)
      if (d.load(std::string(64, 'a'))) return 1;
    return 0;
  });
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(dsa_test::count_of(r.output, "does not exist") == 1);
  CHECK_THAT(r.output, Contains("DSA_INDEXER_PREBUILT_DIR") && Contains("/no/such/prebuilt"));
}

TEST_CASE("manifest: in=e4m3 lines warm the FP8 variants of the family they name", "[warmup][fp8]") {
  using dsa_indexer::DType;
  const DeviceInfo h200 = DeviceInfo::h200();
  auto v = parse_manifest("sq=8192 sk=4096 ratio=2 in=e4m3 family=generic\nsq=8192 sk=4096 ratio=2 in=e4m3 family=lean\n", "m.txt");
  REQUIRE(v.size() == 2);
  CHECK(v[0].qk == DType::e4m3);
  const auto specs = manifest_specs(v, h200);
  REQUIRE(specs.size() == 2);
  CHECK(specs[0] == generic_spec(64, DType::bf16, false, Layout::bshd, 5, DType::e4m3));
  CHECK(specs[1] == lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3));
  CHECK_THROWS_WITH(parse_manifest("sq=1 sk=1 in=e5m2\n", "m.txt"), Contains("m.txt:1") && Contains("bf16 or e4m3"));
  // an automatic FP8 line warms lean FP8 and the escape hatch's generic FP8
  CHECK(manifest_specs(parse_manifest("sq=8192 sk=4096 ratio=2 in=e4m3\n", "m.txt"), h200) ==
          std::vector<KernelSpec>{lean_spec(8192, 4096, DType::bf16, false, Layout::bshd, DType::e4m3),
                                  generic_spec(64, DType::bf16, false, Layout::bshd, 5, DType::e4m3)});
  // a recorded FP8 call's line says in=e4m3 and implies exactly its variant
  Problem p = manifest_problem(v[1], 0.125f);
  const KernelSpec spec = make_plan(p, h200, lean_family(), PlanPurpose::spec_only).spec;
  const std::string line = manifest_line(p, h200, spec, h200);
  CHECK_THAT(line, Contains(" in=e4m3") && Contains(" family=lean"));
  CHECK(manifest_specs(parse_manifest(line + "\n", "recorded"), h200) == std::vector<KernelSpec>{spec});
}
