// libFuzzer target over the warmup manifest parser, the planner it feeds and every family's
// renderer (docs/RELIABILITY.md, item 5 and round 3), built with ASan + UBSan
// (-fno-sanitize-recover): any overflow in the parser's, the planner's or a renderer's arithmetic
// for a manifest the parser accepts is a crash, and so is a renderer whose cost grows with the
// shape (libFuzzer's -rss_limit_mb and -timeout). Invariants: the parser either accepts or throws
// InvalidArgument; every accepted problem plans on the H200 profile (UnsupportedConfig is allowed,
// any other exception is not) and every variant it implies renders. Families of another operation
// than the manifest's (top-k) are planned and rendered for each line's shape as that operation;
// op=topk lines plan their blocks' score problems too (Family::inner_problems).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dispatch/family.hpp"
#include "dsa_indexer/errors.hpp"
#include "jit/codegen.hpp"
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
    for (const KernelSpec& s : manifest_specs(problems, DeviceInfo::h200())) (void)render(s);
  } catch (const dsa_indexer::UnsupportedConfig&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "manifest_specs or render threw: %s\n", e.what());
    std::abort();
  }
  // The families manifest lines do not name (another operation): each line's shape as their call.
  for (const auto& m : problems)
    for (const Family* f : families()) {
      if (f->operation() == Operation::scores) continue;
      Problem p;
      p.op = f->operation();
      p.layout = m.layout;
      p.heads = m.heads;
      p.head_dim = 128;
      p.w_dtype = m.w;
      p.ratio = m.ratio;
      p.batch = m.batch;
      p.s_q = p.t_q = m.sq;
      p.s_k = p.t_k = m.sk;
      p.rows = m.sq * m.batch;
      p.out_cols = m.sk;
      if (p.is_thd()) {
        p.cu_q_host = {0, static_cast<int32_t>(m.sq)};
        p.cu_k_host = {0, static_cast<int32_t>(m.sk)};
      }
      p.topk.k = 1;
      try {
        if (f->check(p, DeviceInfo::h200()).passed()) (void)render(make_plan(p, DeviceInfo::h200(), *f, PlanPurpose::spec_only).spec);
      } catch (const dsa_indexer::UnsupportedConfig&) {
      } catch (const std::exception& e) {
        std::fprintf(stderr, "family %s threw: %s\n", f->name(), e.what());
        std::abort();
      }
    }
  return 0;
}
