#pragma once
// Statistics the timing tools share.
#include <algorithm>
#include <vector>

namespace dsa_support {

// The upper median (0 for no samples).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace dsa_support
