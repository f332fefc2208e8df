#pragma once
// CPU oracle of the top-k selection contract (templates/sm90_topk_select.cuh): a plain sort
// with the contract's comparator, softmax and lse accumulated in long double. Header-only; the
// unit tests check it on constructed rows, the GPU tests hold the kernel against it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace dsa_test {

inline uint32_t topk_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
inline float topk_from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}
inline float topk_canonical_nan() { return topk_from_bits(0x7fffffffu); }

// The contract's ranking key: every NaN is 0xffffffff (above +inf, all equal), +0.0 above -0.0.
inline uint32_t topk_key(float x) {
  const uint32_t b = topk_bits(x);
  if (std::isnan(x)) return 0xffffffffu;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
inline float topk_key_value(uint32_t k) { return topk_from_bits((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

struct TopkRefResult {
  std::vector<int32_t> indices;  // k slots, -1 padding
  std::vector<float> values;     // k slots, -inf padding; NaN as 0x7fffffff
  std::vector<float> softmax;    // k slots, 0 padding
  float lse = 0.0f;
};

// row[c] for c in [lo, hi) is visible; output index = c + bias.
inline TopkRefResult topk_reference(const float* row, int32_t lo, int32_t hi, int32_t bias, int k, bool sort_by_score) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<std::pair<uint32_t, int32_t>> cells;  // (key, column)
  for (int32_t c = lo; c < hi; ++c) cells.emplace_back(topk_key(row[c]), c);
  auto by_score = [](const std::pair<uint32_t, int32_t>& a, const std::pair<uint32_t, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::sort(cells.begin(), cells.end(), by_score);
  const size_t n_sel = std::min(cells.size(), static_cast<size_t>(k));
  std::vector<std::pair<uint32_t, int32_t>> sel(cells.begin(), cells.begin() + static_cast<std::ptrdiff_t>(n_sel));
  if (!sort_by_score)
    std::sort(sel.begin(), sel.end(), [](const auto& a, const auto& b) { return a.second < b.second; });

  TopkRefResult r;
  r.indices.assign(static_cast<size_t>(k), -1);
  r.values.assign(static_cast<size_t>(k), ninf);
  r.softmax.assign(static_cast<size_t>(k), 0.0f);
  for (size_t i = 0; i < n_sel; ++i) {
    r.indices[i] = sel[i].second + bias;
    r.values[i] = topk_key_value(sel[i].first);
  }

  // softmax over the selected values; m = the largest selected (the row's largest).
  if (n_sel > 0) {
    const float m = topk_key_value(cells[0].first);
    if (std::isnan(m) || m == std::numeric_limits<float>::infinity()) {
      for (size_t i = 0; i < n_sel; ++i) r.softmax[i] = topk_canonical_nan();
    } else if (m != ninf) {
      long double sum = 0.0L;
      for (size_t i = 0; i < n_sel; ++i) sum += std::exp(static_cast<long double>(r.values[i]) - m);
      for (size_t i = 0; i < n_sel; ++i)
        r.softmax[i] = static_cast<float>(std::exp(static_cast<long double>(r.values[i]) - m) / sum);
    }  // m = -inf: every selected value is -inf, softmax 0
  }

  // lse over every visible cell.
  if (cells.empty()) {
    r.lse = ninf;
  } else {
    const float m = topk_key_value(cells[0].first);
    if (std::isnan(m)) {
      r.lse = topk_canonical_nan();
    } else if (std::isinf(m)) {
      r.lse = m;
    } else {
      long double sum = 0.0L;
      for (const auto& c : cells) sum += std::exp(static_cast<long double>(topk_key_value(c.first)) - m);
      r.lse = static_cast<float>(static_cast<long double>(m) + std::log(sum));
    }
  }
  return r;
}

// |got - want| <= rel * |want| (+ a denormal floor); NaN only matches NaN, infinities exactly.
inline bool topk_close(float got, float want, double rel) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(static_cast<double>(got) - want) <= rel * std::fabs(static_cast<double>(want)) + 1e-40;
}

}  // namespace dsa_test
