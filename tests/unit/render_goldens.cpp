// Writes the codegen goldens (tests/golden/*.cu) from the current codegen. Run by hand after an
// intended change to the generated source, then review the diff.
#include <fmt/format.h>

#include <fstream>

#include "jit/codegen.hpp"
#include "golden_specs.hpp"

int main() {
  for (const auto& [name, spec] : dsa_test::golden_specs()) {
    const std::string path = fmt::format("{}/{}.cu", DSA_TEST_GOLDEN_DIR, name);
    std::ofstream(path) << dsa_indexer::detail::render(spec).text;
    fmt::print("wrote {}\n", path);
  }
  return 0;
}
