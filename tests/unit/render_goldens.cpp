// Writes the codegen goldens (tests/golden/*.cu) from the current codegen. Run by hand after an
// intended change to the generated source, then review the diff.
#include <fmt/format.h>

#include <fstream>

#include "core/sha256.hpp"
#include "jit/codegen.hpp"
#include "golden_specs.hpp"

int main() {
  for (const auto& [name, spec] : dsa_test::golden_specs()) {
    const std::string path = fmt::format("{}/{}.cu", DSA_TEST_GOLDEN_DIR, name);
    std::ofstream(path) << dsa_indexer::detail::render(spec).text;
    fmt::print("wrote {}\n", path);
  }
  // The digests of many more variants than the goldens show whole (test_codegen.cpp).
  const std::string digests = fmt::format("{}/rendered_sources.sha256", DSA_TEST_GOLDEN_DIR);
  std::ofstream out(digests);
  for (const auto& spec : dsa_test::digest_specs())
    out << dsa_indexer::detail::sha256_hex(dsa_indexer::detail::render(spec).text) << "  " << spec.variant_key() << "\n";
  fmt::print("wrote {}\n", digests);
  return 0;
}
