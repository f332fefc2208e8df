#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsa_indexer/errors.hpp"
#include "jit/templates.hpp"

using namespace dsa_indexer::detail;

TEST_CASE("embedded templates are exactly the files under templates/", "[templates]") {
  const auto& emb = TemplateSet::embedded().files();
  std::size_t on_disk = 0;
  const std::filesystem::path root(DSA_TEST_TEMPLATE_DIR);
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".cuh") continue;
    ++on_disk;
    const std::string rel = std::filesystem::relative(e.path(), root).string();
    INFO(rel);
    auto it = emb.find(rel);
    REQUIRE(it != emb.end());
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    CHECK(it->second == ss.str());
  }
  CHECK(on_disk == emb.size());
}

TEST_CASE("every template include resolves to another template (no toolkit headers)", "[templates]") {
  const TemplateSet& ts = TemplateSet::embedded();
  for (const auto& [name, text] : ts.files()) {
    INFO(name);
    CHECK_NOTHROW(ts.include_closure(text));
    // dsa_types.cuh includes <cstdint> only in its host branch (#if !__CUDACC_RTC__); the NVRTC
    // tests compile every variant with no include path at all.
    if (name != "dsa_types.cuh") CHECK(text.find("#include <") == std::string::npos);
  }
}

TEST_CASE("include closure is transitive and rejects unknown headers", "[templates]") {
  TemplateSet ts({{"a.cuh", "#include \"b.cuh\"\n"}, {"b.cuh", "  #  include \"c/d.cuh\"\n"}, {"c/d.cuh", "int x;\n"}});
  CHECK(ts.include_closure("#include \"a.cuh\"\n") == std::vector<std::string>{"a.cuh", "b.cuh", "c/d.cuh"});
  CHECK_THROWS_AS(ts.include_closure("#include \"missing.cuh\"\n"), dsa_indexer::CompileError);
  CHECK(quoted_includes("// #include \"x\"\n#include \"y\"\n") == std::vector<std::string>{"y"});
}
