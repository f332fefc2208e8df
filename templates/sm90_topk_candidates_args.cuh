#pragma once
// Launch arguments of the candidate-list top-k kernel (sm90_topk_candidates.cuh). Host and
// device see the same layout (fixed-width scalars and plain pointers only), so the host side
// fills this struct and passes it by value.
#include "sm90_topk_select_args.cuh"

namespace dsa {

// The longest candidate list the host lets a row have (cand_ld <= kTopkCandMaxLd): a launch
// with kTopkCandSmemBytes of dynamic shared memory stages every list in shared memory. The
// kernel itself is correct for any list length and any dynamic size >= kTopkCandFixedSmemBytes:
// a list that does not fit the staging area is read from global memory on every pass instead.
constexpr i32 kTopkCandMaxLd = 8192;

// Dynamic shared memory: [histogram kTopkBins u32][selected keys kTopkMaxK u32][selected
// columns kTopkMaxK i32][staged candidates: the rest, u64]. The kernel reads
// %dynamic_smem_size and stages a row's list when (size - fixed) / 8 composites hold it.
constexpr i32 kTopkCandFixedSmemBytes = (kTopkBins + 2 * kTopkMaxK) * 4;
constexpr i32 kTopkCandSmemBytes = kTopkCandFixedSmemBytes + kTopkCandMaxLd * 8;

// Row r's candidates are cand[r * cand_ld + i] for i < min(count[r], cand_ld) (count <= 0: an
// empty row), in no particular order, each the composite
//   (u64(topk_key(score)) << 32) | u64(0xffffffff - u32(col))
// of one cell of the row (col >= 0: its workspace column, output index col + rows[r].bias).
// Composites are unique within a row, and the list holds at least the row's top-k cells, so the
// k largest composites are the row's top-k by (score desc, column asc).
struct TopkCandArgs {
  const u64* cand; i64 cand_ld;     // 8-byte aligned; lists past the staging area are read from global memory
  const i32* count;                 // n_rows
  const TopkRow* rows; i64 n_rows;  // only .bias is read
  i32 k;                            // 1..kTopkMaxK
  i32 sort_by_score;                // 0: indices ascending within a row; 1: by (score desc, index asc)
  i32* indices; i64 indices_ld;     // out: n_rows x k
  float* values; i64 values_ld;     // optional (nullptr): the selected scores, same order as indices
  float* softmax; i64 softmax_ld;   // optional: softmax over the selected logits (padding slots 0)
  // 0, or a bound on every list's columns (col < width): column order then comes from a bitmap
  // of the selected columns in the staging area (8 * ceil(width / 32) bytes of it; a launch
  // with less staging room sorts instead, as with 0). The output is the same either way.
  i64 width;
};

}  // namespace dsa
