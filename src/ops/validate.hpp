#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "dsa_indexer/indexer.hpp"
#include "core/problem.hpp"

namespace dsa_indexer::detail {

// Copies n int32 values from device memory to the host (the cu_seqlens contents when the
// caller gave no host mirror). Production: a driver copy on the call's stream.
using MetadataReader = std::function<void(const void* device_ptr, int32_t* host, std::size_t n)>;

// Checks every argument of a forward call; throws InvalidArgument / UnsupportedConfig naming
// the parameter with the expected and the actual value. Launches nothing.
Problem validate(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w,
                 const TensorDesc& scores, const IndexerOptions& opt, const MetadataReader& read);

}  // namespace dsa_indexer::detail
