#pragma once
// What the planner knows of a device: filled from the driver (cuda/driver.cpp) for a real
// device, or one of the planning profiles below for planning without a GPU (tests, warmup).
#include <cstdint>
#include <string>

namespace dsa_indexer::detail {

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

}  // namespace dsa_indexer::detail
