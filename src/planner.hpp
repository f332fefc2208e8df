#pragma once
// The planner: a pure function of a validated problem and a device description (no CUDA
// calls), so that it is unit-tested with fake devices. The family plans its own variant,
// launch geometry and schedule (Family::plan); this is the shared driver around it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel_spec.hpp"
#include "problem.hpp"

namespace dsa_indexer::detail {

class Family;

struct DeviceInfo {
  int32_t ordinal = 0;
  int32_t sm_count = 0;
  int32_t cc_major = 0;
  int32_t cc_minor = 0;
  int32_t max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  std::string name;

  static DeviceInfo h100();    // fake devices for planning without a GPU (tests, warmup)
  static DeviceInfo h200();
};

struct KernelLaunch {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t smem = 0;
};

struct Plan {
  KernelSpec spec;
  // One launch per kernel of the variant, in the order of its name expressions.
  static constexpr int kMaxLaunches = 2;
  KernelLaunch launches[kMaxLaunches];
  int n_launches = 0;
  // Persistent families: the static schedule runs num_tiles work items (q-tiles x batch) of
  // tokens_per_tile query rows; a family documents its order beside its plan.
  int64_t num_tiles = 0;
  int64_t tiles_per_batch = 0;
  int32_t tokens_per_tile = 0;
  bool empty = false;  // nothing to launch
  // A family's per-call schedule, when it is planned per call rather than compiled in (lean
  // THD: the order of the packing's q-tiles); read by the same family's launch.
  std::shared_ptr<const void> schedule;
};

// What a plan is for: a launch (everything, the per-call schedule included), or only the variant
// (warmup manifests, which must not pay for, say, the schedule of a 2^31-token packing).
enum class PlanPurpose { launch, spec_only };

// Checks what every family needs of the device (Hopper), then asks the family for its plan.
// Throws UnsupportedConfig naming the device property when the device cannot run the plan.
Plan make_plan(const Problem& p, const DeviceInfo& dev, const Family& family, PlanPurpose purpose = PlanPurpose::launch);

// The dispatcher (dispatch.cpp). A family asked for by name serves the call or raises
// UnsupportedConfig naming its failed gate; `automatic` takes the first family, by priority,
// whose gate holds. `fast_paths_disabled` is the escape hatch (DSA_INDEXER_DISABLE_LEAN).
const Family& choose_family(const Problem& p, const DeviceInfo& dev, KernelFamily requested,
                            bool fast_paths_disabled);

struct DispatchStats {
  uint64_t verdict_hits = 0, verdict_misses = 0, entries = 0;
};
DispatchStats dispatch_stats();

}  // namespace dsa_indexer::detail
