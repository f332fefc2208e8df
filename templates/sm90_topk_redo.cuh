#pragma once
// The fused top-k's split redo (LeanTopkArgs, kLeanTopkRedoSplit): the q-tiles of a block with a
// row that the sampled sweep could not show exact are swept again, exactly, in chunks of their KV
// tiles on several CTAs (a failed row costs about a chunk, not a whole sweep on one CTA).
// sm90_topk_redo_slots gives each such q-tile a slot of the chunk buffers (in row order, as long
// as slots last; the rest keep the whole-row redo; the redo pool: every one, the split sweep then
// joining each chunk itself, LeanTopkArgs::pool, its rows first seeded by sm90_topk_redo_seed),
// sm90_topk_redo_merge joins each slot's rows'
// chunks (at most k entries each) into the rows' own buffers for the candidates kernel (with the
// join that cuts, a row's list cut to its k largest whenever the next chunk would not fit). Which
// rows are redone, and where, never reaches the outputs: the candidates kernel selects exactly
// from a row's set.
#include "dsa_types.cuh"
#include "sm90_topk_fused_args.cuh"
#include "sm90_topk_keeper.cuh"

namespace dsa {

// Whether a row of q-tile t (rows 8t..8t+7 of the block's `rows`) failed in the sampled sweep.
__device__ __forceinline__ bool lean_topk_tile_failed(const u8* fail, i64 t, i64 rows) {
  bool f = false;
  for (i64 i = t * 8; i < t * 8 + 8 && i < rows; ++i) f |= fail[i] != 0;
  return f;
}

// One CTA: thread i takes a run of consecutive q-tiles, counts its failed ones, and the runs'
// counts are scanned in shared memory so that slots follow the q-tiles' order.
__global__ void __launch_bounds__(kLeanTopkRedoThreads, 1) sm90_topk_redo_slots(const TopkRedoArgs r) {
  __shared__ i32 sums[kLeanTopkRedoThreads];
  const u8* fail = reinterpret_cast<const u8*>(r.fail);
  i32* slot_of = reinterpret_cast<i32*>(r.slot_of);
  i32* tile_of = reinterpret_cast<i32*>(r.tile_of);
  const i64 tiles = (r.rows + 7) / 8;
  const i64 per = (tiles + kLeanTopkRedoThreads - 1) / kLeanTopkRedoThreads;
  const i64 t0 = static_cast<i64>(threadIdx.x) * per;
  const i64 t1 = t0 + per < tiles ? t0 + per : tiles;
  auto failed = [&](i64 t) { return lean_topk_tile_failed(fail, t, r.rows); };
  i32 n = 0;
  for (i64 t = t0; t < t1; ++t) n += failed(t) ? 1 : 0;
  sums[threadIdx.x] = n;
  __syncthreads();
  // inclusive scan (Hillis-Steele)
  for (int d = 1; d < kLeanTopkRedoThreads; d *= 2) {
    const i32 v = threadIdx.x >= static_cast<unsigned>(d) ? sums[threadIdx.x - d] : 0;
    __syncthreads();
    sums[threadIdx.x] += v;
    __syncthreads();
  }
  i32 base = sums[threadIdx.x] - n;
  for (i64 t = t0; t < t1; ++t) {
    i32 v = kLeanTopkNoRedo;
    if (failed(t)) {
      v = base < r.slots ? base : kLeanTopkRedoWhole;
      if (base < r.slots) tile_of[base] = static_cast<i32>(t);
      ++base;
    }
    slot_of[t] = v;
  }
  const i32 total = sums[kLeanTopkRedoThreads - 1];
  for (i32 j = total + static_cast<i32>(threadIdx.x); j < r.slots; j += kLeanTopkRedoThreads) tile_of[j] = -1;
}

// The redo pool's rows (LeanTopkArgs::pool), a CTA per q-tile of the block, a warp per row: the
// rows of each failed q-tile start empty and unlocked, with a floor taken from the list the
// sampled sweep left (the prefix at or above which k of its entries lie: k of the row's cells are
// at or above it, so its top-k is), which the chunks of the pool's launch start their threshold
// from and its joins filter by. Only lists whose entries were all written count: rows that kept
// theirs (fail 0) and rows that failed with fewer than k entries above the sample's cut
// (kLeanTopkFailBelowK); the others, and lists of fewer than k, start without a floor (0), as
// every row did before (session 32: a chunk from an empty row took about 2.2 ms at S_k 262144
// k 2048, the selectors keeping up with every cell). Independent of sm90_topk_redo_slots (it
// reads the failed flags, not the slots).
__global__ void __launch_bounds__(kLeanTopkRedoThreads, 1) sm90_topk_redo_seed(const TopkRedoArgs r) {
  static_assert(kLeanTopkRedoThreads == 8 * 32, "sm90_topk_redo_seed: a warp per row of a q-tile");
  __shared__ LeanTopkRow rows[8];
  const u8* fail = reinterpret_cast<const u8*>(r.fail);
  const i64 t = blockIdx.x, row0 = t * 8;
  if (!lean_topk_tile_failed(fail, t, r.rows)) return;
  const int w = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const i64 row = row0 + w;
  if (row >= r.rows) return;
  i32* count = reinterpret_cast<i32*>(r.count);
  const i32 c = count[row];
  const u8 f = fail[row];
  const i64 n = f == 0 ? c : f == kLeanTopkFailBelowK ? -1 - static_cast<i64>(c) : 0;
  u64 floor = 0ull;
  if (r.seed != 0 && n >= r.k && n <= r.cand_ld) {
    const LeanTopkKeeper cut{static_cast<u32>(r.k), 0u, r.cand_ld, false, lane};
    const u64* buf = reinterpret_cast<const u64*>(r.cand) + row * r.cand_ld;
    cut.count_h1(rows[w], buf, static_cast<u32>(n));
    u32 b;
    floor = cut.rank_prefix(rows[w], buf, static_cast<u32>(n), static_cast<u32>(r.k), b);
  }
  if (lane == 0) {
    count[row] = 0;
    reinterpret_cast<LeanTopkPoolRow*>(r.pool)[row] = LeanTopkPoolRow{0, 0, floor};
  }
}

// A CTA per slot, a warp per row of its q-tile: the row's chunks (at most k entries each), in
// chunk order, into its buffer. kCut (the join that cuts, session 31, off until a GPU checks it:
// kTopkFusedRedoJoinCut): when the next chunk would not fit (parts x k > cand_ld), the entries so
// far are first cut to their k largest (the keeper's exact compaction, as at a chunk's end in the
// split sweep), so that any number of chunks joins in a buffer of 2k or more; the list holds the
// row's top-k either way (of each chunk's k largest, their union's k largest). Without it the
// host keeps parts x k <= cand_ld.
template <bool kCut>
__global__ void __launch_bounds__(kLeanTopkRedoThreads, 1) sm90_topk_redo_merge(const TopkRedoArgs r) {
  static_assert(kLeanTopkRedoThreads == 8 * 32, "sm90_topk_redo_merge: a warp per row of a q-tile");
  __shared__ LeanTopkRow rows[kCut ? 8 : 1];  // (kCut: each warp's row state for the compaction)
  const i32 slot = static_cast<i32>(blockIdx.x);
  const i32 tile = reinterpret_cast<const i32*>(r.tile_of)[slot];
  const int w = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const i64 row = static_cast<i64>(tile) * 8 + w;
  if (tile < 0 || row >= r.rows) return;
  u64* dst = reinterpret_cast<u64*>(r.cand) + row * r.cand_ld;
  i64 n = 0;
  for (i32 p = 0; p < r.parts; ++p) {
    const i64 at = (static_cast<i64>(slot) * r.parts + p) * 8 + w;  // [slot][chunk][row]
    const i32 c = reinterpret_cast<const i32*>(r.part_count)[at];
    if constexpr (kCut) {
      if (n + c > r.cand_ld) {  // (n > cand_ld - k >= k: the host's cand_ld >= 2k)
        const LeanTopkKeeper cut{static_cast<u32>(r.k), 0u, r.cand_ld, false, lane};
        cut.compact(rows[w], dst, static_cast<u32>(n), static_cast<u32>(r.k));
        n = rows[w].count;
      }
    }
    const u64* src = reinterpret_cast<const u64*>(r.part_cand) + at * r.part_ld;
    for (i32 i = lane; i < c; i += 32) dst[n + i] = src[i];
    n += c;
    if constexpr (kCut) __syncwarp();  // the chunk's entries are in place before a compaction reads them
  }
  if (lane == 0) reinterpret_cast<i32*>(r.count)[row] = static_cast<i32>(n);
}

}  // namespace dsa
