#pragma once
// Launch machinery the families share: the problem as kernel arguments, TMA descriptor
// geometry and memo, and one cuLaunchKernelEx on the caller's stream. No allocation, no
// synchronization. Which kernels a family launches with which parameters is the family's
// (Family::launch).
#include "dsa_args.cuh"
#include "planner.hpp"
#include "problem.hpp"
#include "runtime.hpp"

namespace dsa_indexer::detail {

dsa::DsaArgs make_args(const Problem& p);

// Tensor-map geometry (innermost first), exposed for tests.
struct TmaGeometry {
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides_bytes[4] = {};
  uint32_t box[5] = {};
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
// Q as (D, H, tokens[, B]) with a box of 64 D x H heads x `tokens_per_box` tokens; K as
// (D, S_k[, B]) with a box of 64 D x 64 rows. Both 128-byte swizzled.
TmaGeometry q_tma_geometry(const Problem& p, int tokens_per_box);
TmaGeometry k_tma_geometry(const Problem& p);

// One cuLaunchKernelEx on `stream`; `what` names the call in the DriverError.
void launch_one(CUfunction f, const KernelLaunch& l, CUstream stream, void** params, const char* what);

// The plan's family launches its kernels (nothing when the plan is empty).
void launch_forward(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream);

}  // namespace dsa_indexer::detail
