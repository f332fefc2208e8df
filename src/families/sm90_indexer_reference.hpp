#pragma once
// sm90_indexer_reference: plain CUDA cores, fp32, the whole contract; the GPU-side oracle.
#include "dispatch/family.hpp"

namespace dsa_indexer::detail {

const Family& reference_family();
KernelSpec reference_spec(int heads, DType w, bool lse, Layout layout, bool window_start = false);

}  // namespace dsa_indexer::detail
