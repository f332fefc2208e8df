#pragma once
// Launch machinery every family shares: TMA descriptor geometry and memo, and one
// cuLaunchKernelEx on the caller's stream. No allocation, no synchronization. Which kernels a
// family launches with which parameters is the family's (Family::launch).
#include "core/plan.hpp"
#include "cuda/driver.hpp"

namespace dsa_indexer::detail {

// Tensor-map geometry (innermost first), exposed for tests.
struct TmaGeometry {
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides_bytes[4] = {};
  uint32_t box[5] = {};
  int elem_bytes = 2;  // 2: bf16 elements; 1: FP8 (encoded as bytes: the kernel reads them as e4m3)
  bool operator==(const TmaGeometry& o) const;
};

// The last tensor map encoded for one operand: re-encodes only when the base address or the
// geometry differs from the previous call's. One per operand per thread.
class TmaMemo {
 public:
  const TmaDescBytes& get(const void* base, const TmaGeometry& g);

 private:
  bool valid_ = false;
  const void* base_ = nullptr;
  TmaGeometry geometry_;
  TmaDescBytes map_;
};

// One cuLaunchKernelEx on `stream`; `what` names the call in the DriverError.
void launch_one(CUfunction f, const KernelLaunch& l, CUstream stream, void** params, const char* what);

}  // namespace dsa_indexer::detail
