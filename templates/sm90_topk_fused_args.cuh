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
  u64 stats;     // optional (0), sampled launches: u32 [kLeanTopkStats] counters the sweep adds to
  u64 fail;      // u8 [rows]: the sampled launch writes whether row r failed (count < 0; 0 kept,
                 // kLeanTopkFailBelowK or kLeanTopkFailOther), the redo launch reads it to pick its
                 // q-tiles (not the counts, which its selectors rewrite while the other roles may not
                 // have reached the q-tile yet)
  u64 lse;       // kTopkLse: float, row r's lse at lse[r * lse_stride] (sm90_topk_lse.cuh's order)
  i64 lse_stride;
  // The split redo (BSHD blocks, kLeanTopkRedoSplit): the q-tiles with a failed row swept in
  // `parts` chunks of `chunk` KV tiles each, on as many CTAs, each chunk keeping its rows' own
  // exact candidates in a buffer of its own; sm90_topk_redo_merge then joins a row's chunks in its
  // buffer. (Appended: the fields above keep their offsets.)
  u64 slot_of;     // i32 [q-tiles] (redo launches of a block with the split redo, else 0): q-tile t's
                   // redo slot (>= 0: the split launch sweeps it), kLeanTopkRedoWhole (failed, no slot
                   // left: the whole-row redo launch sweeps it) or kLeanTopkNoRedo
  u64 part_cand;   // u64 [slots][parts][8 rows][part_ld]: the chunks' candidates
  u64 part_count;  // i32 [slots][parts][8 rows]: how many of each chunk's entries are written (<= k)
  i64 part_ld;     // entries per chunk buffer: >= k + kLeanTopkTileCols, <= kLeanTopkMaxLd
  i32 parts;       // chunks per q-tile (every exact launch: 1 but the split redo's)
  i32 chunk;       // KV tiles per chunk (the split redo's)
  u64 tile_of;     // i32 [slots] (the split redo by slots, else 0): the q-tile of each slot (-1:
                   // unused); the launch's items are then slots x parts, not q-tiles x parts
  // The redo pool (sm90_topk_fused_redo_pool; tile_of then lists every failed q-tile, its slots
  // the block's q-tiles): item p is chunk p % parts of tile_of's q-tile p / parts, a CTA's chunk
  // keeps its rows in the CTA's own buffer (part_cand [gridDim.x][8 rows][part_ld]), and the
  // chunk's end joins them to the rows' buffers (cand, count: a row's list cut to its k largest
  // when the chunk would not fit) under the row's lock, so no join kernel follows and no q-tile
  // is left to the whole-row redo.
  u64 pool;        // LeanTopkPoolRow [rows] (0: no pool; sm90_topk_redo_seed empties the rows of the
                   // failed q-tiles and gives each its floor)
};

// A row's state in the redo pool: its lock (0 free, 1 held) and its floor, a composite at or
// below the row's k-th largest (sm90_topk_redo_seed's from the sampled sweep's list, else 0; a
// join that cuts the row's list to its k largest raises it to their smallest), so that the
// chunks keep and the joins append only composites at or above it.
struct LeanTopkPoolRow {
  i32 lock;
  i32 pad;
  u64 floor;
};

// The split redo's two small kernels (sm90_topk_redo.cuh), one block's rows: the slots of the
// q-tiles with a failed row, then the join of each slot's rows' chunks.
struct TopkRedoArgs {
  u64 fail;        // u8 [rows]: the sampled sweep's failed rows
  u64 slot_of;     // i32 [tiles]: LeanTopkArgs::slot_of, written by sm90_topk_redo_slots
  u64 tile_of;     // i32 [slots]: the q-tile of each slot (-1: unused)
  u64 cand;        // u64 [rows][cand_ld], i32 [rows]: the rows' buffers and counts (LeanTopkArgs)
  u64 count;
  u64 part_cand;   // the chunks' buffers and counts (LeanTopkArgs::part_cand, part_count)
  u64 part_count;
  i64 cand_ld;
  i64 part_ld;
  i64 rows;        // the block's rows (its q-tiles: ceil(rows / 8))
  i32 slots;
  i32 parts;
  i32 k;           // the join cuts a row's list to its k largest when the next chunk would not fit
  i32 seed;        // sm90_topk_redo_seed: 1 floors from the sampled sweep's lists, 0 floors 0
  u64 pool;        // the redo pool (LeanTopkArgs::pool), else 0: sm90_topk_redo_slots gives every
                   // failed q-tile a slot (slots: the q-tiles), sm90_topk_redo_seed empties its rows
                   // and sets their floors
};

// The sampled sweep's row counters (LeanTopkArgs::stats; measurements, not the operation): rows
// with KV tiles by how they ended, and the entries their buffers kept.
enum LeanTopkStat : int {
  kLeanTopkStatCut = 0,        // cut at the sample's threshold, kept
  kLeanTopkStatUncut = 1,      // no cut (no sample, every visible cell in the top-k, ...), kept
  kLeanTopkStatOverflow = 2,   // failed: more entries than the buffer holds
  kLeanTopkStatBadSample = 3,  // failed: the sample did not fill [0, m) (or m > the buffer)
  kLeanTopkStatBelowK = 4,     // failed: fewer than k entries known above the threshold
  kLeanTopkStatEntries = 5,    // the entries kept, summed over the rows
  kLeanTopkStats = 8
};

// How a sweep launch selects (LeanTopkEpilogue in sm90_topk_fused_sweep.cuh):
// - exact: the consumers hand every tile's keys to the selector warps, whose threshold starts at
//   0 (every visible cell) and rises with the histograms (refresh > 0) or at compactions;
// - sampled: the sample tiles come first (lean_topk_sample_stride) and append every visible cell;
//   each consumer then cuts its rows at the key of the sample's r-th largest cell (r: the expected
//   number of the sample's cells in the row's top-k plus `margin` standard deviations) and
//   appends only cells with a key at least that. A row whose set may miss part of its top-k is
//   written as count -1 - n;
// - redo: exact, over the q-tiles with such a row only (the others are skipped by every role);
//   it rewrites all 8 rows of those q-tiles.
constexpr i32 kLeanTopkExact = 0;
// LeanTopkArgs::fail of a failed row: fewer than k entries known above the cut (its list, every
// entry written, then seeds the redo pool's floor), or another cause (a bad sample, an overflow).
constexpr u8 kLeanTopkFailOther = 1;
constexpr u8 kLeanTopkFailBelowK = 2;
constexpr i32 kLeanTopkSampled = 1;
constexpr i32 kLeanTopkRedo = 2;
// - redo split: exact, over the q-tiles whose LeanTopkArgs::slot_of is a slot (>= 0), each in
//   `parts` chunks of its KV tiles (lean's split work), a chunk's rows kept to at most k entries in
//   their own buffers (part_cand); the whole-row redo launch (kLeanTopkRedo) then takes the
//   q-tiles for which no slot was left (kLeanTopkRedoWhole).
constexpr i32 kLeanTopkRedoSplit = 3;
constexpr i32 kLeanTopkNoRedo = -1;     // slot_of: no row of the q-tile failed
constexpr i32 kLeanTopkRedoWhole = -2;  // slot_of: a row failed, no slot left
constexpr int kLeanTopkRedoThreads = 256;  // sm90_topk_redo_slots and sm90_topk_redo_merge
// The sweep's tile order (lean's kSampleStride): tiles s/2, s/2 + s, s/2 + 2s, ... of a q-tile's
// KV tiles first, s the stride of a sample of at most about 1024 cells per row (16 up to S_k
// 16384, then S_k / 1024): the consumers' cut holds a row's sample keys in registers (32 per
// lane), and every sample cell is appended, so a longer sample costs registers and appends
// (session 14: S_k 32768 ran at 2.7x the scores time with about 2048 cells, at 1.7x with about
// 1024 in a run that also differed otherwise: PERF_NOTES).
// Tile 0 (the first keys, often unlike the rest in trained models) is never a sample.
DSA_HOST_DEVICE constexpr int lean_topk_sample_stride(i64 s_k) {
  int s = 16;
  while (static_cast<i64>(s) * 1024 < s_k && s < (1 << 20)) s *= 2;
  return s;
}

constexpr i32 kLeanTopkTileCols = 64;     // one KV tile: the most a row gains between checks
constexpr i64 kLeanTopkMaxLd = 16384;     // counts stay in 16 bits (packed histograms)
// Shared memory of one row's state (LeanTopkRow in sm90_topk_fused_sweep.cuh, which asserts it).
constexpr int kLeanTopkRowBytes = 1056;
// Stage slots per consumer between the consumers and the selector warps (a slot: one KV tile's
// keys of the consumer's 4 tokens), and the sweep epilogue's whole shared memory: 8 rows' state,
// 2 consumers' slots, their full and empty barriers (the exact protocol; the sampled protocol's
// state lies over the slots) (LeanTopkEpilogue asserts it).
constexpr int kLeanTopkSlots = 4;
constexpr int kLeanTopkSweepSmemBytes = 8 * kLeanTopkRowBytes + 2 * kLeanTopkSlots * (4 * kLeanTopkTileCols * 4 + 16);
// kTopkLse adds the consumers' lane states at an item's end: [consumer][warp][token] {m, s}.
constexpr int kLeanTopkLseBytes = 2 * 4 * 4 * 16;

// The visible cells of a row's window [0, hi) in the sample tiles (s/2 + s j) of stride kS (the
// unit tests check it on the CPU against a count).
DSA_HOST_DEVICE constexpr u32 lean_topk_sample_cells_at(i64 hi, int s) {
  const i64 span = static_cast<i64>(s) * kLeanTopkTileCols;
  const i64 rem = hi % span - static_cast<i64>(s / 2) * kLeanTopkTileCols;
  return static_cast<u32>(hi / span * kLeanTopkTileCols + (rem < 0 ? 0 : rem > kLeanTopkTileCols ? kLeanTopkTileCols : rem));
}
template <int kS>
DSA_HOST_DEVICE constexpr u32 lean_topk_sample_cells(i64 hi) {
  return lean_topk_sample_cells_at(hi, kS);
}
// The same over a window [lo, hi) (0 <= lo <= hi, relative to the item's first KV row): a THD
// row's window starts inside its q-tile's span, on the span's tile grid (the count up to hi
// is cumulative, so the difference is the window's).
DSA_HOST_DEVICE constexpr u32 lean_topk_sample_cells_in(i64 lo, i64 hi, int s) {
  return lean_topk_sample_cells_at(hi, s) - lean_topk_sample_cells_at(lo, s);
}

}  // namespace dsa
