#pragma once
// The stages of one forward call, exposed so that `dsa-indexer jitcost` can time each of them
// (validate -> context -> pointer checks -> plan -> kernel-cache lookup -> launch), and the
// operations' entries.
#include "cuda/driver.hpp"
#include "core/problem.hpp"
#include "ops/validate.hpp"

namespace dsa_indexer::detail {

// Throws InvalidArgument unless `ptr` (when non-null) is device or managed memory of `device`.
void check_pointer(const void* ptr, const char* name, int device);
// Throws InvalidArgument unless `stream` (when non-null) belongs to `device`'s primary context.
void check_stream(CUstream stream, int device);
// check_pointer over every pointer of the validated problem.
void check_problem_pointers(const Problem& p);

// Reads device cu_seqlens on `stream` (a synchronizing copy) for validate() when the caller gave
// no host mirrors.
MetadataReader device_reader(int device, CUstream stream);

// The scores operation (indexer_forward).
void forward(const TensorDesc& q, const TensorDesc& k, const TensorDesc& w, const TensorDesc& scores,
             const IndexerOptions& opt, CUstream stream);

}  // namespace dsa_indexer::detail
