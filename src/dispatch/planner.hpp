#pragma once
// The planner: a pure function of a validated problem and a device description (no CUDA
// calls), so that it is unit-tested with fake devices. The family plans its own variant,
// launch geometry and schedule (Family::plan); this is the shared driver around it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device_info.hpp"
#include "core/plan.hpp"
#include "core/problem.hpp"

namespace dsa_indexer::detail {

class Family;

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
