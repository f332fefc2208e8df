#pragma once
// The fused top-k's split redo (LeanTopkArgs, kLeanTopkRedoSplit): the q-tiles of a block with a
// row that the sampled sweep could not show exact are swept again, exactly, in chunks of their KV
// tiles on several CTAs (a failed row costs about a chunk, not a whole sweep on one CTA).
// sm90_topk_redo_slots gives each such q-tile a slot of the chunk buffers (in row order, as long
// as slots last; the rest keep the whole-row redo; the redo pool: every one, the split sweep then
// joining each chunk itself, LeanTopkArgs::pool), sm90_topk_redo_merge joins each slot's rows'
// chunks (at most k entries each) into the rows' own buffers for the candidates kernel (with the
// join that cuts, a row's list cut to its k largest whenever the next chunk would not fit). Which
// rows are redone, and where, never reaches the outputs: the candidates kernel selects exactly
// from a row's set.
#include "dsa_types.cuh"
#include "sm90_topk_fused_args.cuh"
#include "sm90_topk_keeper.cuh"

namespace dsa {

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
  auto failed = [&](i64 t) {
    bool f = false;
    for (i64 i = t * 8; i < t * 8 + 8 && i < r.rows; ++i) f |= fail[i] != 0;
    return f;
  };
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
  // the redo pool: the failed q-tiles' rows start empty, unlocked, without a floor (their chunks
  // join them)
  i32* count = r.pool != 0 ? reinterpret_cast<i32*>(r.count) : nullptr;
  LeanTopkPoolRow* pool = reinterpret_cast<LeanTopkPoolRow*>(r.pool);
  for (i64 t = t0; t < t1; ++t) {
    i32 v = kLeanTopkNoRedo;
    if (failed(t)) {
      v = base < r.slots ? base : kLeanTopkRedoWhole;
      if (base < r.slots) tile_of[base] = static_cast<i32>(t);
      ++base;
      if (count != nullptr)
        for (i64 i = t * 8; i < t * 8 + 8 && i < r.rows; ++i) {
          count[i] = 0;
          pool[i] = LeanTopkPoolRow{0, 0, 0ull};
        }
    }
    slot_of[t] = v;
  }
  const i32 total = sums[kLeanTopkRedoThreads - 1];
  for (i32 j = total + static_cast<i32>(threadIdx.x); j < r.slots; j += kLeanTopkRedoThreads) tile_of[j] = -1;
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
