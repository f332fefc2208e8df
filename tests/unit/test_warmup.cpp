#include <catch2/catch.hpp>

#include <chrono>
#include <fstream>

#include "dsa_indexer/errors.hpp"
#include "jit/runtime.hpp"
#include "test_support.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "call_cases.hpp"
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
  auto v = parse_manifest("sq=64 sk=32 ratio=2\nsq=128 sk=32 ratio=4\nsq=8 sk=8 w=f32\nsq=8 sk=8 family=reference\n", "m");
  auto specs = manifest_specs(v, DeviceInfo::h200());
  REQUIRE(specs.size() == 3);  // too small for lean: generic for every automatic line
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
  auto s1 = warmup(rt, specs, nullptr);
  CHECK(s1.compiled == 2);
  CHECK(s1.cached == 0);
  CHECK(s1.failed == 0);
  auto s2 = warmup(rt, specs, nullptr);
  CHECK(s2.compiled == 0);
  CHECK(s2.cached == 2);
  auto list = rt.disk().list();
  REQUIRE(list.size() == 2);
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
  for (const std::string& bad :
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
  CHECK(specs[0].shape_key() == "thd_global.sq2147483448.sk0.wf32.scaleany.s5");
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
  // 128 q-tiles: lean only where B or the SM count makes the grid saturated.
  CHECK(specs == std::vector<KernelSpec>{lean_spec(1024, 512, DType::bf16, false), generic_spec(64, DType::bf16, false, Layout::bshd)});
  CHECK_THROWS_WITH(manifest_specs(parse_manifest("sq=1024 sk=512 family=lean\n", "m"), DeviceInfo::h200()), Contains("saturation"));
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

// Issue 24, class 5: messages that name the cause and, for manifests, the file and line.
TEST_CASE("messages: a manifest line the planner refuses names the file and line, not indexer_forward", "[messages]") {
  const std::string text = "# shapes\nlayout=bshd heads=64 sq=8192 sk=4096\n\nsq=64 sk=64 family=lean\n";
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
