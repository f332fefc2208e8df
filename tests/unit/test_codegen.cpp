#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "core/sha256.hpp"
#include "dispatch/family.hpp"
#include "jit/codegen.hpp"
#include "golden_specs.hpp"
#include "core/util.hpp"

using namespace dsa_indexer::detail;

TEST_CASE("codegen matches the golden files", "[codegen]") {
  for (const auto& [name, spec] : dsa_test::golden_specs()) {
    INFO(name << " (regenerate with dsa_render_goldens after an intended change)");
    std::ifstream f(std::string(DSA_TEST_GOLDEN_DIR) + "/" + name + ".cu");
    REQUIRE(f.good());
    std::stringstream ss;
    ss << f.rdbuf();
    CHECK(render(spec).text == ss.str());
  }
}

// Every variant of the default manifest and lean shapes around the schedule's edges, byte for
// byte (by digest): the lean schedule is computed without tables since issue 24 (class 3) and
// must emit what the sorted tables did.
TEST_CASE("codegen: the rendered source of every pinned variant is unchanged", "[codegen]") {
  std::ifstream f(std::string(DSA_TEST_GOLDEN_DIR) + "/rendered_sources.sha256");
  REQUIRE(f.good());
  std::map<std::string, std::string> pinned;
  for (std::string digest, key; f >> digest >> key;) pinned[key] = digest;
  const auto specs = dsa_test::digest_specs();
  CHECK(specs.size() == pinned.size());
  int lean = 0;
  for (const KernelSpec& spec : specs) {
    INFO(spec.variant_key() << " (regenerate with dsa_render_goldens after an intended change)");
    REQUIRE(pinned.count(spec.variant_key()) == 1);
    CHECK(sha256_hex(render(spec).text) == pinned[spec.variant_key()]);
    lean += spec.family == &lean_family();
  }
  CHECK(lean >= 60);
}

TEST_CASE("codegen names every template parameter", "[codegen]") {
  const GeneratedSource g = render(generic_spec(32, dsa_indexer::DType::f32, false, Layout::bshd, 4));
  const std::string& t = g.text;
  CHECK_THAT(t, Catch::Contains("static constexpr int kHeads = 32;"));
  CHECK_THAT(t, Catch::Contains("static constexpr bool kWeightsF32 = true;"));
  CHECK_THAT(t, Catch::Contains("static constexpr bool kWithLse = false;"));
  CHECK_THAT(t, Catch::Contains("static constexpr int kLayout = dsa::kLayoutBshd;"));
  CHECK_THAT(t, Catch::Contains("static constexpr int kKvStages = 4;"));
  CHECK_THAT(t, Catch::Contains(fmt::format("static constexpr int kSmemBytes = {};", GenericGeometry::smem_bytes(32, 4))));
  CHECK(g.kernels == std::vector<std::string>{"dsa::sm90_indexer_generic<DsaKernelConfig>"});
  CHECK(render(reference_spec(64, dsa_indexer::DType::bf16, true, Layout::bshd)).kernels.size() == 2);
  CHECK(render(reference_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd)).kernels.size() == 1);
  const GeneratedSource l = render(lean_spec(4096, 999, dsa_indexer::DType::bf16, false));
  CHECK_THAT(l.text, Catch::Contains("static constexpr long long kSeqQ = 4096;"));
  CHECK_THAT(l.text, Catch::Contains("static constexpr long long kSeqK = 999;"));
  CHECK_THAT(l.text, Catch::Contains("static constexpr bool kUnitScale = false;"));
  CHECK_THAT(l.text, Catch::Contains("kDsaLeanRuns[1] = {{511, -1, 512, 0}};"));
  CHECK_THAT(l.text, Catch::Contains("kPolicy = dsa::kLeanSnake;"));
  CHECK(l.kernels == std::vector<std::string>{"dsa::sm90_indexer_lean<DsaKernelConfig, DsaLeanSchedule>"});
  CHECK(l.name == "sm90_indexer_lean.bshd.sq4096.sk999.wbf16.scaleany.s5.cu");
}

TEST_CASE("codegen refuses a spec without a family or with a value outside a choice", "[codegen]") {
  CHECK_THROWS_AS(render(KernelSpec{}), dsa_indexer::InvalidArgument);
  KernelSpec s = generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd);
  s.values[3] = 7;  // kLayout
  CHECK_THROWS_WITH(render(s), Catch::Contains("kLayout"));
}

TEST_CASE("hex_float literals round-trip exactly", "[codegen]") {
  CHECK(hex_float(1.0f) == "0x1p+0f");
  CHECK(hex_float(0.125f) == "0x1p-3f");
  CHECK(hex_float(-3.0f) == "-0x1.8p+1f");
  for (float v : {0.1f, 1.0f / 3.0f, 1e-30f, 6.5e4f, 0.08838834764831845f}) {
    std::string s = hex_float(v);
    s.pop_back();  // drop the f suffix
    CHECK(std::strtof(s.c_str(), nullptr) == v);
  }
  CHECK(hex_float(-INFINITY) == "__int_as_float(0xff800000)");
}

TEST_CASE("codegen: every family's parameters fit a KernelSpec", "[codegen]") {
  for (const dsa_indexer::detail::Family* f : dsa_indexer::detail::families()) {
    INFO(f->name());
    CHECK(f->params().size() <= static_cast<std::size_t>(dsa_indexer::detail::kMaxSpecParams));
  }
}
