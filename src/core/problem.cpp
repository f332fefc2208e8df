#include "core/problem.hpp"

#include <algorithm>

namespace dsa_indexer::detail {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::bshd: return "bshd";
    case Layout::thd_local: return "thd_local";
    case Layout::thd_global: return "thd_global";
  }
  return "unknown-layout";
}

int64_t Problem::causal_limit(int64_t offset, int64_t i, int64_t ratio, int64_t s_k_b) {
  int64_t num = offset + i + 1;
  int64_t lim = num >= 0 ? num / ratio : -((-num + ratio - 1) / ratio);  // floor division
  return std::clamp<int64_t>(lim, 0, s_k_b);
}

int64_t Problem::visible_pairs() const {
  // Ratio-causal windows with zero offsets; calls with offsets or explicit windows count their
  // pairs from the host copies they own (the benchmark does).
  int64_t total = 0;
  auto seg = [&](int64_t sq, int64_t sk) {
    for (int64_t i = 0; i < sq; ++i) total += causal_limit(0, i, ratio, sk);
  };
  if (layout == Layout::bshd) {
    int64_t one = 0;
    std::swap(total, one);
    seg(s_q, s_k);
    total *= batch;
  } else {
    for (int64_t b = 0; b + 1 < static_cast<int64_t>(cu_q_host.size()); ++b)
      seg(cu_q_host[b + 1] - cu_q_host[b], cu_k_host[b + 1] - cu_k_host[b]);
  }
  return total;
}

}  // namespace dsa_indexer::detail
