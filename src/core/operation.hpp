#pragma once
// What a call computes (docs/DESIGN.md, "Operations"). Every operation has its own public entry,
// validation, reference oracle and manifest keys (src/ops/); a kernel family implements exactly
// one operation, and the dispatcher offers it to no other.
#include <cstdint>

namespace dsa_indexer::detail {

enum class Operation : int32_t {
  scores = 0,  // the dense fp32 score matrix (indexer_forward)
  topk = 1,    // the k best keys of every query row, without the matrix (indexer_topk)
  // Internal (no public entry): the candidates of a block of top-k rows, the fused top-k path's
  // score sweep, dispatched and cached like any other problem.
  topk_sweep = 2,
};

inline const char* operation_name(Operation op) {
  switch (op) {
    case Operation::scores: return "scores";
    case Operation::topk: return "topk";
    case Operation::topk_sweep: return "topk_sweep";
  }
  return "?";
}

}  // namespace dsa_indexer::detail
