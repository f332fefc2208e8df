#pragma once
// A plan: the variant to run, its launches and the workspace it needs. Produced by a family's
// plan (a pure function of the problem and a DeviceInfo), consumed by the same family's launch.
#include <cstdint>
#include <memory>

#include "core/kernel_spec.hpp"

namespace dsa_indexer::detail {

struct KernelLaunch {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t smem = 0;
};

// A workspace size or offset rounded up to the 256-byte alignment plans promise.
inline uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

struct Plan {
  KernelSpec spec;
  // One launch per kernel of the variant, in the order of its name expressions.
  static constexpr int kMaxLaunches = 8;
  KernelLaunch launches[kMaxLaunches];
  int n_launches = 0;
  // Persistent families: the static schedule runs num_tiles work items (q-tiles x batch) of
  // tokens_per_tile query rows; a family documents its order beside its plan.
  int64_t num_tiles = 0;
  int64_t tiles_per_batch = 0;
  int32_t tokens_per_tile = 0;
  bool empty = false;  // nothing to launch
  // Device memory the launches need besides the operands (bytes, 256-byte aligned): the caller
  // passes it (or the operation allocates it once and reuses it). Scores: lean split's lse partial
  // sums (launch_forward takes them from the stream-ordered pool); 0 otherwise.
  uint64_t workspace_bytes = 0;
  // A family's per-call schedule, when it is planned per call rather than compiled in (lean
  // THD: the order of the packing's q-tiles); read by the same family's launch.
  std::shared_ptr<const void> schedule;
  // Lean's split variant (BSHD calls whose q-tiles x B cannot fill the GPU): each q-tile's KV
  // tiles in kv_parts chunks of kv_chunk tiles, one work item per chunk (0: not split).
  int32_t kv_parts = 0, kv_chunk = 0;
};

// What a plan is for: a launch (everything, the per-call schedule included), or only the variant
// (warmup manifests, which must not pay for, say, the schedule of a 2^31-token packing).
enum class PlanPurpose { launch, spec_only };

}  // namespace dsa_indexer::detail
