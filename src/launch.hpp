#pragma once
// Launch: kernel arguments and TMA descriptors of a planned call, and the cuLaunchKernelEx
// calls on the caller's stream. No allocation, no synchronization.
#include "dsa_args.cuh"
#include "planner.hpp"
#include "problem.hpp"
#include "runtime.hpp"

namespace dsa_indexer::detail {

dsa::DsaArgs make_args(const Problem& p, const Plan& plan);

// The generic family's Q and K tensor-map geometry (innermost first), exposed for tests.
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
TmaGeometry q_tma_geometry(const Problem& p);
TmaGeometry k_tma_geometry(const Problem& p);

// One cuLaunchKernelEx on `stream`; `what` names the call in the DriverError.
void launch_one(CUfunction f, const uint32_t grid[3], const uint32_t block[3], uint32_t smem, CUstream stream,
                void** params, const char* what);

void launch_forward(const Problem& p, const Plan& plan, const LoadedKernel& k, CUstream stream);

}  // namespace dsa_indexer::detail
