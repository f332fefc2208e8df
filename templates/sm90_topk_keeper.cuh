#pragma once
// The exact upkeep of a row's candidate buffer by the warp that owns it (the fused top-k's exact
// and redo sweeps, sm90_topk_fused_sweep.cuh, and the split redo's join, sm90_topk_redo.cuh):
// the row's state in shared memory (LeanTopkRow: threshold, count, the 8-bit histograms of the
// composites' top key bits) and LeanTopkKeeper: appends above the threshold, its refresh from the
// histograms, and the compaction of a buffer to exactly its `keep` largest composites (a radix
// selection by 8-bit digits, then a stable in-place pass). The protocol is described at the top of
// sm90_topk_fused_sweep.cuh.
#include "dsa_types.cuh"
#include "ptx/mbarrier.cuh"
#include "sm90_topk_fused_args.cuh"

namespace dsa {

struct LeanTopkRow {
  u64 thr;        // append when composite > thr (0: every visible cell)
  u32 count;      // entries in the row's buffer
  u32 refreshed;  // count at the last refresh
  u32 b1;         // the coarse bin h2 refines (kLeanTopkNoBin: none yet)
  u32 pad[3];
  u32 h1[128];    // bin b of key bits 31..24 counts in half (b & 1) of word b >> 1
  u32 h2[128];    // bins of key bits 23..16 (entries of coarse bin b1); scratch while compacting
};
static_assert(sizeof(LeanTopkRow) == kLeanTopkRowBytes, "sm90_topk_keeper: LeanTopkRow layout");
constexpr u32 kLeanTopkNoBin = 0xffffffffu;

// Lane L holds bins 8L..8L+7 of a 256-bin packed histogram. The lowest bin b whose suffix count
// (bins >= b) reaches `need`, the count above it and its own count, on every lane; false when
// the whole histogram holds fewer than `need`.
__device__ __forceinline__ bool lean_topk_suffix_bin(const u32* h, u32 need, int lane, u32& bin, u32& above, u32& cnt) {
  u32 c[8], tot = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const u32 w = h[4 * lane + i];
    c[2 * i] = w & 0xffffu;
    c[2 * i + 1] = w >> 16;
    tot += c[2 * i] + c[2 * i + 1];
  }
  u32 suf = tot;  // lanes >= L
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const u32 x = __shfl_down_sync(0xffffffffu, suf, d);
    if (lane + d < 32) suf += x;
  }
  if (__shfl_sync(0xffffffffu, suf, 0) < need) return false;
  u32 acc = suf - tot, fb = 0, fa = 0, fc = 0;
  bool found = false;
#pragma unroll
  for (int i = 7; i >= 0; --i) {
    if (acc < need && acc + c[i] >= need) {
      found = true;
      fb = 8 * lane + i;
      fa = acc;
      fc = c[i];
    }
    acc += c[i];
  }
  const int src = __ffs(__ballot_sync(0xffffffffu, found)) - 1;
  bin = __shfl_sync(0xffffffffu, fb, src);
  above = __shfl_sync(0xffffffffu, fa, src);
  cnt = __shfl_sync(0xffffffffu, fc, src);
  return true;
}

__device__ __forceinline__ void lean_topk_count(u32* h, u32 bin) { atomicAdd(&h[bin >> 1], 1u << ((bin & 1u) * 16u)); }

// The whole warp counts one bin per active lane, one atomic per distinct bin (the lanes of a
// bin agree through match_any; the lowest adds their number). `active` must be warp-uniformly
// evaluated by every lane (all 32 call it).
__device__ __forceinline__ void lean_topk_count_warp(u32* h, u32 bin, bool active, int lane) {
  const u32 act = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const u32 same = __match_any_sync(act, bin);
  if (lane == __ffs(same) - 1) atomicAdd(&h[bin >> 1], static_cast<u32>(__popc(same)) << ((bin & 1u) * 16u));
}

// Zeroes a 256-bin packed histogram (lane L its words 4L..4L+3; the caller syncs the warp).
__device__ __forceinline__ void lean_topk_clear(u32* h, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) h[4 * lane + i] = 0u;
}

// Counts one buffer entry (composite c) in a row's histograms: h1 by key bits 31..24, h2 by bits
// 23..16 when it is in coarse bin b1.
__device__ __forceinline__ void lean_topk_count_entry(LeanTopkRow& R, u64 c, u32 b1) {
  const u32 key = static_cast<u32>(c >> 32);
  lean_topk_count(R.h1, key >> 24);
  if ((key >> 24) == b1) lean_topk_count(R.h2, (key >> 16) & 0xffu);
}

// p (in the dynamic shared memory) re-derived from the extern array, so that the compiler knows
// the space: ld/st/atom.shared, 32-bit addresses (the kernel's aligned base is an integer cast,
// through which every access would be generic).
__device__ __forceinline__ u8* lean_topk_shared(u8* p) {
  extern __shared__ u8 lean_topk_dyn_smem[];
  return lean_topk_dyn_smem + (smem_addr(p) - smem_addr(lean_topk_dyn_smem));
}

// One row's upkeep, by the warp that owns the row (every lane calls): the threshold from the
// histograms, and the compaction of a buffer that could overflow within the next tile.
struct LeanTopkKeeper {
  u32 k, refresh;
  i64 ld;
  bool hist;  // keep the histograms while sweeping (refresh > 0); else compaction only
  int lane;

  __device__ __forceinline__ void reset(LeanTopkRow& R) const {
    lean_topk_clear(R.h1, lane);
    lean_topk_clear(R.h2, lane);
    if (lane == 0) {
      R.thr = 0ull;
      R.count = 0u;
      R.refreshed = 0u;
      R.b1 = kLeanTopkNoBin;
    }
    __syncwarp();
  }

  // Appends the tile's cells of the row whose composites exceed its threshold (c[j] of lane
  // L is the cell of column 32 j + L of the tile; take[j] whether it is visible and above).
  __device__ __forceinline__ void append(LeanTopkRow& R, u64* buf, const u64 (&c)[2], const bool (&take)[2]) const {
    const u32 m0 = __ballot_sync(0xffffffffu, take[0]), m1 = __ballot_sync(0xffffffffu, take[1]);
    if ((m0 | m1) == 0u) return;  // warp-uniform: the common case once the threshold settles
    const u32 lt = (1u << lane) - 1u;
    const u32 n = R.count;
    const u32 b1 = R.b1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (!take[j]) continue;
      buf[n + (j ? __popc(m0) : 0u) + __popc((j ? m1 : m0) & lt)] = c[j];
      if (hist) lean_topk_count_entry(R, c[j], b1);
    }
    __syncwarp();  // every lane has read count and b1 (and counted) before lane 0 moves count
    if (lane == 0) R.count = n + __popc(m0) + __popc(m1);
    __syncwarp();
  }

  // After a tile's appends: compact when the next tile could overflow the buffer, else raise
  // the threshold every `refresh` appends once the row holds k.
  __device__ __forceinline__ void after_tile(LeanTopkRow& R, u64* buf) const {
    const u32 n = R.count;
    if (n + static_cast<u32>(kLeanTopkTileCols) > static_cast<u32>(ld)) compact(R, buf, n, k);
    else if (hist && n >= k && n - R.refreshed >= refresh) raise(R, n);
  }

  // The threshold from the histograms (the row holds n >= k entries).
  __device__ __forceinline__ void raise(LeanTopkRow& R, u32 n) const {
    u32 b, above, cnt;
    if (!lean_topk_suffix_bin(R.h1, k, lane, b, above, cnt)) return;
    u32 prefix = b << 24;
    const u32 b1 = R.b1;  // every lane reads it before lane 0 may write it
    __syncwarp();
    if (b != b1) {
      // A new coarse bin (they only rise): its entries so far are not in h2; it counts the next.
      lean_topk_clear(R.h2, lane);
      if (lane == 0) R.b1 = b;
    } else {
      u32 d, a2, c2;
      if (lean_topk_suffix_bin(R.h2, k - above, lane, d, a2, c2)) prefix |= d << 16;
    }
    const u64 t = prefix == 0u ? 0ull : (static_cast<u64>(prefix) << 32) - 1ull;
    if (lane == 0) {
      if (t > R.thr) R.thr = t;
      R.refreshed = n;
    }
    __syncwarp();
  }

  // Frees the row's buffer (n > keep entries). With the histograms, first one pass keeping the
  // entries above the threshold they give (at least k, often about k): enough when it leaves
  // room for two tiles. Else (and in compaction-only mode) the exact selection: exactly the
  // `keep` (k) largest stay, and the threshold becomes the smallest of them. Either keeps the
  // order.
  __device__ __forceinline__ void compact(LeanTopkRow& R, u64* buf, u32 n, u32 keep) const {
    if (hist) {
      raise(R, n);
      const u64 thr = R.thr;
      if (thr != 0ull && thr != ~0ull) {
        const u32 out = keep_from(R, buf, n, thr + 1ull, R.b1, nullptr);
        if (lane == 0) {
          R.count = out;
          R.refreshed = out;
        }
        __syncwarp();
        if (out + 2u * static_cast<u32>(kLeanTopkTileCols) <= static_cast<u32>(ld)) return;
        n = out;
      }
    } else {
      count_h1(R, buf, n);  // compaction only: h1 over the buffer first
    }
    u32 b;
    const u64 prefix = rank_prefix(R, buf, n, keep, b);
    // `keep` entries are >= prefix (those of the bins above, and all of its own that match it).
    u64 mn = ~0ull;
    const u32 out = keep_from(R, buf, n, prefix, b, &mn);
    if (lane == 0) {
      R.count = out;
      R.refreshed = out;
      R.thr = mn;
      R.b1 = b;
    }
    __syncwarp();
  }

  // h1 over buf[0, n): every entry's key bits 31..24.
  __device__ __forceinline__ void count_h1(LeanTopkRow& R, const u64* buf, u32 n) const {
    lean_topk_clear(R.h1, lane);
    __syncwarp();
    for (u32 i0 = 0; i0 < n; i0 += 32 * kBatch) {
      u64 c[kBatch];
      load_batch(buf, n, i0, c);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) lean_topk_count_warp(R.h1, static_cast<u32>(c[u] >> 56), i0 + 32 * u + lane < n, lane);
    }
    __syncwarp();
  }

  // The composite prefix at or above which exactly `keep` (1..n) of buf[0, n) lie, and its
  // coarse bin b (h1 holds every entry on entry; h2 is scratch): radix levels of 8 bits, from
  // h1's bin down, until the prefix's own bin holds exactly the entries still needed.
  __device__ __forceinline__ u64 rank_prefix(LeanTopkRow& R, const u64* buf, u32 n, u32 keep, u32& b) const {
    u32 above, cnt;
    lean_topk_suffix_bin(R.h1, keep, lane, b, above, cnt);
    u64 prefix = static_cast<u64>(b) << 56;
    u32 need = keep - above;
    for (int shift = 48; shift >= 0 && cnt != need; shift -= 8) {
      lean_topk_clear(R.h2, lane);
      __syncwarp();
      const u64 hi = ~((static_cast<u64>(1) << (shift + 8)) - 1ull);
      // kBatch entries per lane in flight (the buffer is in L2: latency, not bandwidth, bounds it)
      for (u32 i0 = 0; i0 < n; i0 += 32 * kBatch) {
        u64 c[kBatch];
        load_batch(buf, n, i0, c);
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (i0 + 32 * u + lane < n && (c[u] & hi) == prefix) lean_topk_count(R.h2, static_cast<u32>(c[u] >> shift) & 0xffu);
      }
      __syncwarp();
      u32 d, a2, c2;
      lean_topk_suffix_bin(R.h2, need, lane, d, a2, c2);
      prefix |= static_cast<u64>(d) << shift;
      need -= a2;
      cnt = c2;
      __syncwarp();
    }
    return prefix;
  }

  static constexpr int kBatch = 4;

  // kBatch entries per lane, buf[i0 + 32 u + lane] (0 past n), all loads in flight together
  // (the reading warp wrote them itself).
  __device__ __forceinline__ void load_batch(const u64* buf, u32 n, u32 i0, u64 (&c)[kBatch]) const {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const u32 i = i0 + 32 * u + lane;
      c[u] = i < n ? buf[i] : 0ull;
    }
  }

  // Keeps the entries >= lo of buf[0, n), in their order, and rebuilds the histograms over them
  // (h2: those of coarse bin b1); returns how many stayed (on every lane), and their smallest in
  // *mn when asked.
  __device__ __forceinline__ u32 keep_from(LeanTopkRow& R, u64* buf, u32 n, u64 lo, u32 b1, u64* mn) const {
    lean_topk_clear(R.h1, lane);
    lean_topk_clear(R.h2, lane);
    __syncwarp();
    const u32 lt = (1u << lane) - 1u;
    u32 out = 0;
    u64 low = ~0ull;
    for (u32 i0 = 0; i0 < n; i0 += 32 * kBatch) {
      // the batch is read before any of it is written: writes go to positions at or below the
      // entry written, so only entries already read are overwritten
      u64 c[kBatch];
      load_batch(buf, n, i0, c);
      __syncwarp();
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const bool keep = i0 + 32 * u + lane < n && c[u] >= lo;
        const u32 m = __ballot_sync(0xffffffffu, keep);
        if (keep) {
          buf[out + __popc(m & lt)] = c[u];
          low = c[u] < low ? c[u] : low;
          if (hist) lean_topk_count_entry(R, c[u], b1);
        }
        out += __popc(m);
      }
    }
    if (mn != nullptr) {
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) {
        const u64 x = __shfl_xor_sync(0xffffffffu, low, d);
        low = x < low ? x : low;
      }
      *mn = low;
    }
    __syncwarp();
    return out;
  }
};

// The redo pool's join (LeanTopkArgs::pool): a chunk's row, its c = R.count <= k entries at
// part_cand row `chunk` (the CTA's buffer, written by this warp), appended to row `own`'s list
// (cand, count: n entries of at most cand_ld) under the row's lock. When they would not fit
// (cand_ld >= 2k), the list is first cut to its k largest (cut's exact compaction, R its
// scratch), whose smallest becomes the row's floor: no composite below it is in the row's top-k
// (k of the row's cells are at or above it), so this and every later join appends only those at
// or above it. Chunks join in any order: the list holds the row's top-k among the chunks joined so
// far either way, and the candidates kernel selects exactly. Every lane calls; a row's lock is
// held only over this join, which waits on nothing else. (The pointers come from the launch's
// parameters, and c waits in R.pad[0] over the compaction: the selectors' registers are few.)
__device__ __forceinline__ void lean_topk_pool_join(const LeanTopkKeeper& cut, LeanTopkRow& R, const LeanTopkArgs& ta,
                                                    i64 chunk, i64 own, int lane) {
  const u32 c = R.count;
  __syncwarp();  // every lane has read it before lane 0 may rewrite R (the caller's reset, the compaction)
  if (c == 0u) return;  // (warp-uniform)
  LeanTopkPoolRow* const row = reinterpret_cast<LeanTopkPoolRow*>(ta.pool) + own;
  if (lane == 0) {
    R.pad[0] = c;
    while (atomicCAS(&row->lock, 0, 1) != 0) __nanosleep(64);
  }
  __syncwarp();
  // acquire: the previous holder's entries, count and floor (sm_90: MEMBAR.SC.GPU, then
  // CCTL.IVALL, so no stale line of the list stays in this SM's L1)
  __threadfence();
  u32 n = static_cast<u32>(*reinterpret_cast<volatile const i32*>(reinterpret_cast<const i32*>(ta.count) + own));
  u64 floor = *reinterpret_cast<volatile const u64*>(&row->floor);
  if (static_cast<i64>(n) + c > ta.cand_ld) {
    cut.compact(R, reinterpret_cast<u64*>(ta.cand) + own * ta.cand_ld, n, cut.k);
    n = R.count;
    floor = R.thr;  // the smallest of the k kept
    if (lane == 0) *reinterpret_cast<volatile u64*>(&row->floor) = floor;
  }
  const u32 m = R.pad[0];
  const u64* src = reinterpret_cast<const u64*>(ta.part_cand) + chunk * ta.part_ld;
  u64* dst = reinterpret_cast<u64*>(ta.cand) + own * ta.cand_ld;
  const u32 lt = (1u << lane) - 1u;
  for (u32 i0 = 0; i0 < m; i0 += 32u * LeanTopkKeeper::kBatch) {
    u64 v[LeanTopkKeeper::kBatch];
    cut.load_batch(src, m, i0, v);  // (0 past m: below any floor but 0, and not taken)
#pragma unroll
    for (int u = 0; u < LeanTopkKeeper::kBatch; ++u) {
      const bool take = i0 + 32u * u + static_cast<u32>(lane) < m && v[u] >= floor;
      const u32 mask = __ballot_sync(0xffffffffu, take);
      if (take) dst[n + __popc(mask & lt)] = v[u];
      n += __popc(mask);
    }
  }
  if (lane == 0) *reinterpret_cast<volatile i32*>(reinterpret_cast<i32*>(ta.count) + own) = static_cast<i32>(n);
  __threadfence();  // release: this join's entries, count and floor before the lock
  __syncwarp();
  if (lane == 0) atomicExch(&row->lock, 0);
}

}  // namespace dsa
