#pragma once
#include <string>
#include <utility>
#include <vector>

#include "planner.hpp"

namespace dsa_test {

inline std::vector<std::pair<std::string, dsa_indexer::detail::KernelSpec>> golden_specs() {
  using namespace dsa_indexer::detail;
  std::vector<std::pair<std::string, KernelSpec>> v;
  KernelSpec g;
  g.family = Family::generic;
  g.heads = 64;
  g.w_dtype = dsa_indexer::DType::bf16;
  g.kv_stages = 5;
  v.emplace_back("generic_h64_wbf16_bshd", g);
  g.heads = 32;
  g.w_dtype = dsa_indexer::DType::f32;
  g.lse = true;
  g.layout = Layout::thd_local;
  v.emplace_back("generic_h32_wf32_lse_thd_local", g);
  KernelSpec r;
  r.family = Family::reference;
  r.heads = 16;
  r.lse = true;
  r.layout = Layout::thd_global;
  v.emplace_back("reference_h16_wbf16_lse_thd_global", r);
  return v;
}

// Every variant of a family: H x W dtype x lse x layout (the generic family at 5 KV stages).
inline std::vector<dsa_indexer::detail::KernelSpec> all_specs(dsa_indexer::detail::Family f) {
  using namespace dsa_indexer::detail;
  std::vector<KernelSpec> v;
  for (int h : {16, 32, 64})
    for (auto w : {dsa_indexer::DType::bf16, dsa_indexer::DType::f32})
      for (bool lse : {false, true})
        for (auto l : {Layout::bshd, Layout::thd_local, Layout::thd_global}) {
          KernelSpec s;
          s.family = f;
          s.heads = h;
          s.w_dtype = w;
          s.lse = lse;
          s.layout = l;
          s.kv_stages = f == Family::generic ? 5 : 0;
          v.push_back(s);
        }
  return v;
}

}  // namespace dsa_test
