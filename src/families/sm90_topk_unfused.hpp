#pragma once
// sm90_topk_unfused: the top-k operation as scores of a bounded block of rows into the workspace
// (by the score family the dispatcher picks for the block) followed by an exact radix selection
// (templates/sm90_topk_unfused.cuh, sm90_topk_select.cuh). Serves every top-k call; the
// reference the fused families must equal bit for bit.
#include "dispatch/family.hpp"
#include "sm90_topk_select_args.cuh"

namespace dsa_indexer::detail {

const Family& topk_unfused_family();
KernelSpec topk_unfused_spec(Layout layout);

// The selection kernel of a loaded top-k variant (`plan` its plan) over a.n_rows score rows of at
// most `width` visible columns: what launch() runs after each block's scores, exposed so that a
// tool can time the selection alone on score rows it holds (dsa-indexer bench --op topk).
void launch_topk_select(const Plan& plan, const LoadedKernel& k, const dsa::TopkSelectArgs& a, int64_t width, CUstream stream);

// The workspace plan of one call, a pure function of the shapes and the device (exposed for tests).
struct TopkBlocking {
  int64_t rows = 0;             // rows per block (at most)
  int64_t width = 0;            // key columns per block (at most): the workspace row length
  uint64_t scores_bytes = 0;    // rows x width fp32
  uint64_t ks_offset = 0, ke_offset = 0, rows_offset = 0;  // byte offsets of the per-row arrays
  uint64_t offset_offset = 0;   // byte offset of the block's q_causal_offsets (one int32)
  uint64_t total_bytes = 0;
};
// budget: the bytes of block scores the planner aims for (the workspace may exceed it when one
// wave of the device's SMs needs more rows); 0 takes the default.
TopkBlocking topk_blocking(const Problem& p, const DeviceInfo& dev, uint64_t budget = 0);
inline constexpr uint64_t kTopkDefaultBudget = uint64_t(256) << 20;

}  // namespace dsa_indexer::detail
