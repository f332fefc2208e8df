#pragma once
// Launch arguments of the fused top-k's score sweep (sm90_topk_fused.cuh): the lean kernel with
// a selection epilogue. Host and device see the same layout (fixed-width scalars only).
#include "dsa_types.cuh"

namespace dsa {

// A row's candidates are composites (key << 32) | (0xffffffff - column): key the
// order-preserving u32 of the score (topk_key), column the row's column (>= 0). Composites of
// one row are distinct, and the k largest are the row's top-k by (score desc, column asc).
struct LeanTopkArgs {
  u64 cand;      // u64 [rows][cand_ld]: row r's candidates, in no particular order
  u64 count;     // i32 [rows]: how many of row r's entries are written (<= cand_ld)
  i64 cand_ld;   // entries per row: >= k + kLeanTopkTileCols, <= kLeanTopkMaxLd
  i32 k;         // 1..kTopkMaxK
  i32 refresh;   // appends to a row between refreshes of its threshold (0: compactions only)
  i32 mode;      // kLeanTopkExact, kLeanTopkSampled or kLeanTopkRedo
  float margin;   // kLeanTopkSampled: the cut's margin in standard deviations (z)
};

// How a sweep launch selects (LeanTopkEpilogue::select):
// - exact: the threshold starts at 0 (every visible cell) and rises with the histograms
//   (refresh > 0) or at compactions;
// - sampled: the sample tiles come first (kLeanTopkSampleStride); every visible cell of them is
//   appended, then each row's buffer is cut to its r largest (r: the expected number of the
//   sample's cells in the row's top-k plus `margin` standard deviations), which sets the
//   threshold for the rest of the sweep (no histograms). A row whose buffer ends with fewer than
//   k entries after a cut has no exact candidate set: its count is written as -1 - count;
// - redo: exact, over the q-tiles with such a row only (the others are skipped by every role);
//   it rewrites all 8 rows of those q-tiles.
constexpr i32 kLeanTopkExact = 0;
constexpr i32 kLeanTopkSampled = 1;
constexpr i32 kLeanTopkRedo = 2;
// The sweep's tile order (lean's kSampleStride): tiles 8, 24, 40, ... of a q-tile's KV tiles
// first. Tile 0 (the first keys, often unlike the rest in trained models) is never a sample.
constexpr int kLeanTopkSampleStride = 16;

constexpr i32 kLeanTopkTileCols = 64;     // one KV tile: the most a row gains between checks
constexpr i64 kLeanTopkMaxLd = 16384;     // counts stay in 16 bits (packed histograms)
// Shared memory of one row's state (LeanTopkRow in sm90_topk_fused_sweep.cuh, which asserts it).
constexpr int kLeanTopkRowBytes = 1056;
// Stage slots per consumer between the consumers and the selector warps (a slot: one KV tile's
// keys of the consumer's 4 tokens), and the sweep epilogue's whole shared memory: 8 rows' state,
// 2 consumers' slots, their full and empty barriers (LeanTopkEpilogue asserts it).
constexpr int kLeanTopkSlots = 4;
constexpr int kLeanTopkSweepSmemBytes = 8 * kLeanTopkRowBytes + 2 * kLeanTopkSlots * (4 * kLeanTopkTileCols * 4 + 16);

}  // namespace dsa
