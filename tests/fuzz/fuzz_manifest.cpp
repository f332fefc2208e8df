// libFuzzer target over the warmup manifest parser and the planner it feeds (docs/RELIABILITY.md,
// item 5), built with ASan + UBSan (-fno-sanitize-recover): any overflow in the parser's or the
// planner's arithmetic for a manifest the parser accepts is a crash. Invariants: the parser
// either accepts or throws InvalidArgument; every accepted problem plans on the H200 profile
// (UnsupportedConfig is allowed, any other exception is not), op=topk lines included, whose
// blocks' score problems (Family::inner_problems) are planned too.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dsa_indexer/errors.hpp"
#include "ops/warmup.hpp"

using namespace dsa_indexer::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<ManifestProblem> problems;
  try {
    problems = parse_manifest(text, "fuzz.txt");
  } catch (const dsa_indexer::InvalidArgument&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_manifest threw a non-InvalidArgument: %s\n", e.what());
    std::abort();
  }
  for (const auto& m : problems)
    if (m.sq < 1 || m.sk < 1 || m.ratio < 1 || m.sq > INT32_MAX || m.sk > INT32_MAX || m.ratio > INT32_MAX ||
        (m.heads != 16 && m.heads != 32 && m.heads != 64)) {
      std::fprintf(stderr, "parse_manifest accepted an out-of-range problem on line %d\n", m.line);
      std::abort();
    }
  for (const auto& m : problems)
    if (m.op == Operation::topk ? (m.k < 1 || m.k > dsa_indexer::kTopkMaxK || m.layout == Layout::thd_global)
                                : m.k != dsa_indexer::kTopkMaxK) {
      std::fprintf(stderr, "parse_manifest accepted a top-k key it should refuse on line %d\n", m.line);
      std::abort();
    }
  try {
    const auto specs = manifest_specs(problems, DeviceInfo::h200());
    (void)specs;
  } catch (const dsa_indexer::UnsupportedConfig&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "manifest_specs threw: %s\n", e.what());
    std::abort();
  }
  return 0;
}
