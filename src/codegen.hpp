#pragma once
// Codegen: plan -> CUDA source text. The source is small and readable: one config struct whose
// members name every template parameter, an include of the family's template, and the name
// expressions NVRTC resolves to the lowered kernel names.
#include <string>
#include <vector>

#include "planner.hpp"

namespace dsa_indexer::detail {

struct GeneratedSource {
  std::string name;                       // "<family>.<shape key>.cu", for logs and dumps
  std::string text;
  std::vector<std::string> kernels;       // name expressions, in launch order
};

GeneratedSource render(const KernelSpec& spec);

// A float as a C++ hex-float literal ("0x1.8p+1f"): exact, locale-free, round-trips.
std::string hex_float(float v);

}  // namespace dsa_indexer::detail
