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

// The checks of every operation's call: the inputs q, k, w and the options, for the entry named
// `where`; `out` (named `out_name`) is the operation's first output, checked for presence and
// device with the inputs, and `outputs` checks the operation's outputs after w, in the order the
// scores operation always has (its messages do not change with the operation layer).
Problem validate_call(const char* where, const TensorDesc& q, const TensorDesc& k, const TensorDesc& w,
                      const TensorDesc& out, const char* out_name, const IndexerOptions& opt, const MetadataReader& read,
                      const std::function<void(Problem&)>& outputs);

// One output of shape (B, S_q, last_dim) / (T_q, last_dim) of dtype `dt` on the call's device;
// its element strides (outermost first) go to strides_out.
void check_output(const TensorDesc& t, const char* name, DType dt, const Problem& p, int64_t last_dim, const char* last_what,
                  int64_t* strides_out);

}  // namespace dsa_indexer::detail
