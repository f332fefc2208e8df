#include "dispatch/planner.hpp"

#include "dispatch/family.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {

Plan make_plan(const Problem& p, const DeviceInfo& dev, const Family& family, PlanPurpose purpose) {
  if (dev.cc_major != 9)
    fail_param<UnsupportedConfig>("planner", "device compute capability", "9.x (Hopper, sm_90a)",
                                  fmt::format("{}.{} ({})", dev.cc_major, dev.cc_minor, dev.name));
  if (dev.sm_count < 1) fail_param<UnsupportedConfig>("planner", "device SM count", ">= 1", dev.sm_count);
  Plan plan = family.plan(p, dev, purpose);
  if (plan.spec.dynamic_smem > static_cast<uint32_t>(dev.max_smem_optin))
    fail_param<UnsupportedConfig>("planner", "device shared memory per block (opt-in)",
                                  fmt::format(">= {} bytes for {} {}", plan.spec.dynamic_smem, family.name(),
                                              plan.spec.shape_key()),
                                  dev.max_smem_optin);
  return plan;
}

}  // namespace dsa_indexer::detail
