#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "codegen.hpp"
#include "golden_specs.hpp"

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

TEST_CASE("codegen names every template parameter", "[codegen]") {
  KernelSpec g;
  g.family = Family::generic;
  g.kv_stages = 4;
  g.heads = 32;
  g.w_dtype = dsa_indexer::DType::f32;
  const std::string t = render(g).text;
  CHECK_THAT(t, Catch::Contains("static constexpr int kHeads = 32;"));
  CHECK_THAT(t, Catch::Contains("static constexpr bool kWeightsF32 = true;"));
  CHECK_THAT(t, Catch::Contains("static constexpr bool kWithLse = false;"));
  CHECK_THAT(t, Catch::Contains("static constexpr int kLayout = dsa::kLayoutBshd;"));
  CHECK_THAT(t, Catch::Contains("static constexpr int kKvStages = 4;"));
  CHECK(render(g).kernels == std::vector<std::string>{"dsa::sm90_indexer_generic<DsaKernelConfig>"});
  KernelSpec r;
  r.family = Family::reference;
  r.lse = true;
  CHECK(render(r).kernels.size() == 2);
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
