#pragma once
// sm90_topk_fused_sweep: the score sweep of the fused top-k. The lean kernel (sm90_indexer_lean.cuh)
// with another epilogue: the consumers compute every score exactly as the scores operation does
// (the same main loop, head sum and sm_scale, so the same bits), and instead of storing a row
// they append its candidates to a bounded per-row buffer in global memory (LeanTopkArgs). No
// score row reaches memory; the selection kernel (sm90_topk_candidates.cuh) then selects each
// row's top-k from its candidates.
//
// Per row (a token of a consumer; 4 per consumer, row w kept by warp w):
// - a threshold thr on the composite (key << 32 | ~column): a visible cell is appended when its
//   composite is > thr. thr only rises, and only to a value that at least k entries already in
//   the buffer reach, so every cell of the row's top-k is appended (the set is exact);
// - h1, a histogram of the top 8 key bits of every entry, and h2, of the next 8 bits of the
//   entries of one coarse bin b1 appended since b1 was chosen (16-bit counts: a buffer holds at
//   most kLeanTopkMaxLd entries). A refresh (every `refresh` appends, once the row holds k)
//   takes the lowest h1 bin whose suffix count reaches k as b1 and, while b1 stays, the lowest
//   h2 bin whose count with the entries above b1 reaches k: thr = that key prefix - 1.
//   Entries never counted (h2 started late) only make thr lower, never wrong;
// - when a row's buffer could overflow within the next tile, its warp compacts it: an exact
//   radix selection of the k-th largest composite (h1, then 8-bit digits over the buffer),
//   a stable in-place compaction to exactly the k entries >= it, and thr = the smallest kept
//   composite (so later cells, whose columns are larger, enter only by a larger score).
// With refresh 0 (compaction only) no histogram is kept while sweeping: no shared atomic per
// appended cell; the threshold rises only at compactions, which first count h1 over the buffer.
//
// Positions come from one shared atomic per row and warp (a leader adds the warp's count), so
// the order of a row's entries varies run to run; the selection does not depend on it.
#include "sm90_indexer_lean.cuh"
#include "sm90_topk_fused_args.cuh"
#include "sm90_topk_common.cuh"

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
constexpr u32 kLeanTopkNoBin = 0xffffffffu;
static_assert(sizeof(LeanTopkRow) == kLeanTopkRowBytes, "sm90_topk_fused_sweep: LeanTopkRow layout");
static_assert(kLeanTopkTileCols == kKvRows, "sm90_topk_fused_sweep: a row gains at most one KV tile of cells between checks");

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

template <class Cfg>
struct LeanTopkEpilogue {
  using T = LeanTraits<Cfg>;
  using Args = LeanTopkArgs;
  static constexpr int kRows = T::kTokensPerConsumer;
  static constexpr int kSmemBytes = T::kConsumers * kRows * kLeanTopkRowBytes;
  static constexpr bool kFillsScores = false;  // there is no score matrix
  static constexpr u32 kBarrier = 3;           // consumer cg's own: 3 + cg (the ping-pong takes 1, 2)
  static_assert(T::kConsumers == 2, "sm90_topk_fused_sweep: two consumers (its barriers follow the ping-pong's 1, 2)");
  static_assert(kRows == 4, "sm90_topk_fused_sweep: one row per consumer warp");

  LeanTopkRow* rows;  // this consumer's
  u64* cand;
  i32* count;
  i64 ld;
  u32 k, refresh, bar;
  bool hist;  // keep the histograms while sweeping (refresh > 0); else compaction only
  int warp, lane;

  __device__ __forceinline__ LeanTopkEpilogue(const Args& a, u8* smem, int cg, int warp_in_wg, int ln)
      : rows(reinterpret_cast<LeanTopkRow*>(smem) + cg * kRows),
        cand(reinterpret_cast<u64*>(a.cand)),
        count(reinterpret_cast<i32*>(a.count)),
        ld(a.cand_ld),
        k(static_cast<u32>(a.k)),
        refresh(static_cast<u32>(a.refresh)),
        bar(kBarrier + cg),
        hist(a.refresh > 0),
        warp(warp_in_wg),
        lane(ln) {
    reset(rows[warp]);  // ordered before the first appends by the first ping-pong barrier
  }

  __device__ __forceinline__ void reset(LeanTopkRow& R) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      R.h1[4 * lane + i] = 0u;
      R.h2[4 * lane + i] = 0u;
    }
    if (lane == 0) {
      R.thr = 0ull;
      R.count = 0u;
      R.refreshed = 0u;
      R.b1 = kLeanTopkNoBin;
    }
    __syncwarp();
  }

  __device__ __forceinline__ void tile(const float* part, i32 it, const LeanLane& ln, int warp_in_wg, int ln_lane,
                                       float sm_scale) const {
    const i32 rel0 = it * kKvRows;
    const bool masked = !(rel0 >= ln.f_lo && rel0 + kKvRows <= ln.f_hi);
    const i32 rr = rel0 + 16 * warp_in_wg + (ln_lane >> 2);
    const int t = token_quarter(ln_lane);
    LeanTopkRow& R = rows[t];
    const u64 thr = R.thr;
    u64 c[2];
    bool take[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const i32 rel = rr + 8 * j;
      const float v = Cfg::kUnitScale ? part[j] : part[j] * sm_scale;
      const bool vis = !masked || (rel >= ln.w_lo[0] && rel < ln.w_hi[0]);
      c[j] = (static_cast<u64>(topk_key(v)) << 32) | static_cast<u64>(0xffffffffu - static_cast<u32>(rel));
      take[j] = vis && c[j] > thr;
    }
    const u32 m0 = __ballot_sync(0xffffffffu, take[0]), m1 = __ballot_sync(0xffffffffu, take[1]);
    if ((m0 | m1) == 0u) return;  // warp-uniform: the common case once the thresholds settle
    // The 8 lanes of one token are those with equal lane & 3; lane (lane & 3) leads them.
    const u32 rowmask = 0x11111111u << (ln_lane & 3);
    const u32 lt = (1u << ln_lane) - 1u;
    const u32 n0 = __popc(m0 & rowmask), n = n0 + __popc(m1 & rowmask);
    u32 base = 0;
    if (ln_lane < 4 && n > 0u) base = atomicAdd(&R.count, n);
    base = __shfl_sync(0xffffffffu, base, ln_lane & 3);
    u64* dst = cand + (ln.q_row0 + t) * ld;
    const u32 b1 = R.b1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (!take[j]) continue;
      const u32 pos = base + (j ? n0 : 0u) + __popc((j ? m1 : m0) & rowmask & lt);
      dst[pos] = c[j];
      if (!hist) continue;
      const u32 key = static_cast<u32>(c[j] >> 32);
      lean_topk_count(R.h1, key >> 24);
      if ((key >> 24) == b1) lean_topk_count(R.h2, (key >> 16) & 0xffu);
    }
  }

  // Every append of the tile is done (the consumer's barrier); warp w then keeps row w.
  __device__ __forceinline__ void after_tile(const LeanLane& ln) const {
    named_barrier_sync(bar, 128);
    LeanTopkRow& R = rows[warp];
    const u32 n = R.count;
    if (n + static_cast<u32>(kLeanTopkTileCols) > static_cast<u32>(ld)) compact(R, cand + (ln.q_row0 + warp) * ld, n);
    else if (hist && n >= k && n - R.refreshed >= refresh) raise(R, n);
  }

  __device__ __forceinline__ void end_item(const LeanLane& ln) const {
    LeanTopkRow& R = rows[warp];
    if (lane == 0) count[ln.q_row0 + warp] = static_cast<i32>(R.count);
    __syncwarp();
    reset(R);
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
#pragma unroll
      for (int i = 0; i < 4; ++i) R.h2[4 * lane + i] = 0u;
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

  // Exactly the k largest of the row's n > k entries stay, in their order.
  __device__ __forceinline__ void compact(LeanTopkRow& R, u64* buf, u32 n) const {
    if (!hist) {
      // compaction only: h1 over the buffer first
#pragma unroll
      for (int i = 0; i < 4; ++i) R.h1[4 * lane + i] = 0u;
      __syncwarp();
      for (u32 i0 = 0; i0 < n; i0 += 32) {
        const u32 i = i0 + lane;
        const u64 c = i < n ? buf[i] : 0ull;
        lean_topk_count_warp(R.h1, static_cast<u32>(c >> 56), i < n, lane);
      }
      __syncwarp();
    }
    u32 b, above, cnt;
    lean_topk_suffix_bin(R.h1, k, lane, b, above, cnt);  // h1 counts every entry: exact
    u64 prefix = static_cast<u64>(b) << 56;
    u32 need = k - above;
    for (int shift = 48; shift >= 0 && cnt != need; shift -= 8) {
#pragma unroll
      for (int i = 0; i < 4; ++i) R.h2[4 * lane + i] = 0u;
      __syncwarp();
      const u64 hi = ~((static_cast<u64>(1) << (shift + 8)) - 1ull);
      for (u32 i = lane; i < n; i += 32) {
        const u64 c = buf[i];
        if ((c & hi) == prefix) lean_topk_count(R.h2, static_cast<u32>(c >> shift) & 0xffu);
      }
      __syncwarp();
      u32 d, a2, c2;
      lean_topk_suffix_bin(R.h2, need, lane, d, a2, c2);
      prefix |= static_cast<u64>(d) << shift;
      need -= a2;
      cnt = c2;
      __syncwarp();
    }
    // k entries are >= prefix (those of the bins above, and all `cnt` == `need` of its own).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      R.h1[4 * lane + i] = 0u;
      R.h2[4 * lane + i] = 0u;
    }
    __syncwarp();
    const u32 lt = (1u << lane) - 1u;
    u32 out = 0;
    u64 mn = ~0ull;
    for (u32 i0 = 0; i0 < n; i0 += 32) {
      const u32 i = i0 + lane;
      const u64 c = i < n ? buf[i] : 0ull;
      const bool keep = i < n && c >= prefix;
      const u32 m = __ballot_sync(0xffffffffu, keep);
      if (keep) {
        buf[out + __popc(m & lt)] = c;  // at or below i: every lane of the chunk has read
        mn = c < mn ? c : mn;
      }
      if (keep && hist) {
        const u32 key = static_cast<u32>(c >> 32);
        lean_topk_count(R.h1, key >> 24);
        if ((key >> 24) == b) lean_topk_count(R.h2, (key >> 16) & 0xffu);
      }
      out += __popc(m);
    }
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
      const u64 x = __shfl_xor_sync(0xffffffffu, mn, d);
      mn = x < mn ? x : mn;
    }
    __syncwarp();
    if (lane == 0) {
      R.count = out;
      R.refreshed = out;
      R.thr = mn;
      R.b1 = b;
    }
    __syncwarp();
  }
};

// BSHD: the planner's schedule is compiled in, as for the scores kernel of the same key.
template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_topk_fused_sweep(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                          const LeanTopkArgs t) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_topk_fused_sweep: BSHD only");
  static_assert(!LeanTraits<Cfg>::kFp8, "sm90_topk_fused_sweep: bf16 inputs only (the top-k operation's)");
  lean_body<Cfg, LeanTopkEpilogue<Cfg>>(q_map, k_map, a, DsaScales{}, t, LeanStaticRuns<Sched>{});
}

}  // namespace dsa
