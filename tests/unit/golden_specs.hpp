#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "ops/warmup.hpp"

namespace dsa_test {

inline std::vector<std::pair<std::string, dsa_indexer::detail::KernelSpec>> golden_specs() {
  using namespace dsa_indexer::detail;
  using dsa_indexer::DType;
  return {{"generic_h64_wbf16_bshd", generic_spec(64, DType::bf16, false, Layout::bshd)},
          {"generic_h32_wf32_lse_thd_local", generic_spec(32, DType::f32, true, Layout::thd_local)},
          {"reference_h16_wbf16_lse_thd_global", reference_spec(16, DType::bf16, true, Layout::thd_global)},
          {"lean_sq2048_sk1024_wbf16_scale1", lean_spec(2048, 1024, DType::bf16, true)},
          {"generic_h64_wbf16_e4m3_bshd", generic_spec(64, DType::bf16, false, Layout::bshd, 5, DType::e4m3)}};
}

// One variant of a family whose parameters are H x W dtype x lse x layout, with those values.
struct SpecCase {
  dsa_indexer::detail::KernelSpec spec;
  int heads;
  dsa_indexer::DType w;
  bool lse;
  dsa_indexer::detail::Layout layout;
};

// Every variant of the reference or generic family: H x W dtype x lse x layout.
inline std::vector<SpecCase> grid_specs(const dsa_indexer::detail::Family& f) {
  using namespace dsa_indexer::detail;
  std::vector<SpecCase> v;
  for (int h : {16, 32, 64})
    for (auto w : {dsa_indexer::DType::bf16, dsa_indexer::DType::f32})
      for (bool lse : {false, true})
        for (auto l : {Layout::bshd, Layout::thd_local, Layout::thd_global})
          v.push_back({&f == &generic_family() ? generic_spec(h, w, lse, l) : reference_spec(h, w, lse, l), h, w, lse, l});
  return v;
}

// Every variant a family compiles: the whole grid for reference and generic; for lean (a
// variant per shape) every lean variant the default manifest warms.
inline std::vector<dsa_indexer::detail::KernelSpec> all_specs(const dsa_indexer::detail::Family& f) {
  using namespace dsa_indexer::detail;
  std::vector<KernelSpec> v;
  if (&f == &lean_family()) {
    std::ifstream in(DSA_TEST_DEFAULT_MANIFEST);
    std::stringstream text;
    text << in.rdbuf();
    for (const KernelSpec& s : manifest_specs(parse_manifest(text.str(), DSA_TEST_DEFAULT_MANIFEST), DeviceInfo::h200()))
      if (s.family == &f) v.push_back(s);
    return v;
  }
  for (const SpecCase& c : grid_specs(f)) v.push_back(c.spec);
  // generic's FP8 (e4m3) main loop, over the same grid
  if (&f == &generic_family())
    for (const SpecCase& c : grid_specs(f)) v.push_back(generic_spec(c.heads, c.w, c.lse, c.layout, 5, dsa_indexer::DType::e4m3));
  return v;
}

// The variants whose rendered source is pinned by digest (tests/golden/rendered_sources.sha256):
// every variant of the default manifest, plus lean BSHD shapes around the schedule's edges (one
// q-tile, one round of 132 CTAs and one more, odd tile counts, S_k past S_q and ratios 1 to 64,
// up to 65,536 q-tiles, the last the planner balances by evaluation), each with both weight
// dtypes and both scale variants; and the fused top-k path by name at the long rows the
// automatic policy gave it until session 28.
inline std::string digest_manifest_text() {
  std::ifstream in(DSA_TEST_DEFAULT_MANIFEST);
  std::stringstream text;
  text << in.rdbuf();
  text << "\n";
  // {S_q, S_k, B}: B only where S_q / 8 alone is under the gate's 132 q-tiles.
  const int64_t shapes[][3] = {{8, 8, 132},         {16, 64, 66},        {24, 2400, 44},      {1048, 524, 2},
                               {1056, 1056, 1},     {1064, 17, 1},       {2000, 2000, 1},     {8000, 125, 1},
                               {40000, 20000, 1},   {131072, 65536, 1},  {524288, 262144, 1}, {524288, 8192, 1},
                               {524280, 1, 1}};
  for (const auto& sh : shapes)
    for (const char* w : {"bf16", "f32"})
      text << "layout=bshd heads=64 family=lean scale=both w=" << w << " sq=" << sh[0] << " sk=" << sh[1]
           << " batch=" << sh[2] << "\n";
  text << "op=topk layout=bshd heads=64 sq=4096 sk=131072 ratio=1 w=bf16 k=2048 family=topk_fused\n"
       << "op=topk layout=bshd heads=64 sq=2048 sk=262144 ratio=1 w=bf16 k=2048 family=topk_fused\n";
  return text.str();
}

inline std::vector<dsa_indexer::detail::KernelSpec> digest_specs() {
  using namespace dsa_indexer::detail;
  return manifest_specs(parse_manifest(digest_manifest_text(), "digest_manifest_text()"), DeviceInfo::h200());
}

}  // namespace dsa_test
