#include "core/device_info.hpp"

namespace dsa_indexer::detail {

DeviceInfo DeviceInfo::h100() { return DeviceInfo{0, 132, 9, 0, 232448, "NVIDIA H100 80GB HBM3 (planning profile)"}; }
DeviceInfo DeviceInfo::h200() { return DeviceInfo{0, 132, 9, 0, 232448, "NVIDIA H200 (planning profile)"}; }

}  // namespace dsa_indexer::detail
