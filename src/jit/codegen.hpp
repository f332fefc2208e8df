#pragma once
// Codegen: spec -> CUDA source text. The source is small and readable: one config struct whose
// members name every template parameter (rendered from the family's ParamDesc list), an include
// of the family's template, then the family's own part (asserts, tables) and the name
// expressions NVRTC resolves to the lowered kernel names.
#include <string>
#include <vector>

#include "core/kernel_spec.hpp"

namespace dsa_indexer::detail {

// Throws InvalidArgument for a spec without a family or with a value outside a choice.
GeneratedSource render(const KernelSpec& spec);

// A float as a C++ hex-float literal ("0x1.8p+1f"): exact, locale-free, round-trips.
std::string hex_float(float v);

}  // namespace dsa_indexer::detail
