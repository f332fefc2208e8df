#pragma once
// sm90_topk_select: exact, deterministic top-k of fp32 score rows (the unfused top-k path).
//
// Contract, per row r with visible columns [lo, hi):
// - The selected set is the k largest visible scores ranked by (score desc, column asc), so a
//   tie at the k-th place goes to the smaller column and the set is unique.
// - Ranking uses an order-preserving u32 key: positives get the sign bit set, negatives have
//   every bit flipped. Consequences, chosen on purpose and tested:
//   * every NaN (any sign, any payload) ranks above +inf and all NaNs are equal (then by
//     column); a selected NaN is returned as the canonical 0x7fffffff;
//   * +0.0 ranks above -0.0 (they are distinct keys, nothing is canonicalized);
//   * -inf cells are visible and selectable like any other value.
// - Output slots: ascending column (default) or (score desc, column asc); rows with fewer than
//   k visible cells are padded at the end with index -1, value -inf, softmax 0.
// - softmax over the selected values with m = the largest selected value: exp(v - m) / sum.
//   m NaN or +inf: every selected slot is NaN (0x7fffffff), as torch.softmax gives; m = -inf
//   (every selected cell is -inf): every slot 0. v - m is carried exactly (TwoSum) into the
//   exponent, and sums are in fp64 in a fixed order, so the result is within a few fp32 ulp of
//   the exact value and the same bits run to run.
// - lse = log(sum over all visible cells of exp(score)): NaN (0x7fffffff) if a NaN is visible,
//   +inf if +inf is, -inf for an empty or all -inf row; else m + log(sum exp(x - m)), fp64 sum
//   in a fixed order (BSHD with topk_lse_lanes: the fused sweep's lane order, sm90_topk_lse.cuh,
//   its own kernel, so that both paths give the same bits).
//
// Algorithm (one CTA per row, rows strided over the grid; details above the kernel):
//   fast path: rows of at most kTopkCandCap cells are the candidates; longer rows take a
//     threshold t from a strided sample of 1024 words (two 11-bit radix levels over the sample)
//     and one ordered pass keeps the keys >= t, in column order, as candidates. When
//     k <= candidates <= kTopkCandCap the selection is exact from them: 11/11/10-bit radix
//     levels find the threshold key T and the number of T-ties to take, and a compaction in
//     column order (block scan, ties to the smallest columns) writes the selection.
//   exact path (an unlucky sample, all-equal rows, heavy ties): an 11-bit histogram pass over
//     the row (kept in shared memory as keys where it fits), the same radix levels over the
//     threshold bin's candidates when they fit, else further histogram passes over the row,
//     then one ordered pass over the row.
//   Positions always come from block-wide scans in column order, never from atomics, so the
//   output is deterministic; then an optional bitonic sort for score order, and the outputs.
#include "sm90_topk_common.cuh"

namespace dsa {

struct TopkRowCtx {
  const float* base;  // 16-byte aligned: &row[lo - off]
  i32 n;              // visible cells
  i32 off;            // floats between base and column lo (0..3)
  i32 nw;             // 4-float words covering [lo, hi)
};

// Row `row` of the launch, visible columns rw.
__device__ __forceinline__ TopkRowCtx topk_row_ctx(const TopkSelectArgs& a, i64 row, const TopkRow& rw) {
  const i32 n = rw.hi > rw.lo ? rw.hi - rw.lo : 0;
  const float* p = a.scores + row * a.ld + rw.lo;
  TopkRowCtx rc;
  rc.off = static_cast<i32>((reinterpret_cast<u64>(p) >> 2) & 3u);
  rc.base = p - rc.off;
  rc.n = n;
  rc.nw = n > 0 ? static_cast<i32>((static_cast<i64>(rc.off) + n + 3) >> 2) : 0;
  return rc;
}

// Keys of word w: one float4 when the word lies inside [lo, hi), lane by lane at the edges.
__device__ __forceinline__ uint4 topk_load_word(const TopkRowCtx& rc, i32 w) {
  const i32 first = 4 * w - rc.off;
  uint4 k;
  if (first >= 0 && first + 4 <= rc.n) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(rc.base) + w);
    k.x = topk_key(v.x);
    k.y = topk_key(v.y);
    k.z = topk_key(v.z);
    k.w = topk_key(v.w);
  } else {
    const float* p = rc.base + 4 * w;
    k.x = (first + 0 >= 0 && first + 0 < rc.n) ? topk_key(__ldg(p + 0)) : kTopkNoKey;
    k.y = (first + 1 >= 0 && first + 1 < rc.n) ? topk_key(__ldg(p + 1)) : kTopkNoKey;
    k.z = (first + 2 >= 0 && first + 2 < rc.n) ? topk_key(__ldg(p + 2)) : kTopkNoKey;
    k.w = (first + 3 >= 0 && first + 3 < rc.n) ? topk_key(__ldg(p + 3)) : kTopkNoKey;
  }
  return k;
}

__device__ __forceinline__ u32 topk_lane(const uint4& k, int s) {
  return s == 0 ? k.x : s == 1 ? k.y : s == 2 ? k.z : k.w;
}

// f(w, keys) over every word of the row: the cached prefix from shared memory, the rest from
// global memory with kTopkUnroll loads in flight per thread.
template <int T, class F>
__device__ __forceinline__ void topk_for_each_word(const TopkRowCtx& rc, const uint4* cache, i32 cw, F&& f) {
  const i32 nc = min(cw, rc.nw);
  for (i32 w = threadIdx.x; w < nc; w += T) f(w, cache[w]);
  i32 w = nc + static_cast<i32>(threadIdx.x);
  for (; w + (kTopkUnroll - 1) * T < rc.nw; w += kTopkUnroll * T) {
    uint4 k[kTopkUnroll];
#pragma unroll
    for (int u = 0; u < kTopkUnroll; ++u) k[u] = topk_load_word(rc, w + u * T);
#pragma unroll
    for (int u = 0; u < kTopkUnroll; ++u) f(w + u * T, k[u]);
  }
  for (; w < rc.nw; w += T) f(w, topk_load_word(rc, w));
}


// Ordered pass over `nw` words of a key source in column order (keys(w, u): word w, the u-th of
// the thread's tile; a source in registers reads its u-th word): cells with key > tkey, and the
// first take_eq cells with key == tkey, go to dkey/dcol at their rank among the selected (a
// block-wide scan of per-thread counts, so no atomic decides a position). Ranks >= limit are
// not written; the pass stops once `stop_at` cells are selected. Returns the selected count
// (at least stop_at when it stopped early).
template <int T, class Keys, class Cols>
__device__ __forceinline__ u32 topk_ordered_pass(TopkScratch& s, i32 nw, Keys keys, Cols cols, u32 tkey, u32 take_eq,
                                                 u32 limit, u32 stop_at, u32* dkey, i32* dcol) {
  u32 gt_base = 0u, eq_base = 0u;
  for (i32 t0 = 0; t0 < nw; t0 += kTopkUnroll * T) {
    uint4 kk[kTopkUnroll];
    u32 v[kTopkUnroll], ex[kTopkUnroll];
#pragma unroll
    for (int u = 0; u < kTopkUnroll; ++u) {
      const i32 w = t0 + u * T + static_cast<i32>(threadIdx.x);
      kk[u] = w < nw ? keys(w, u) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kTopkUnroll; ++u) {
      u32 gt = 0u, eq = 0u;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const u32 key = topk_lane(kk[u], q);
        gt += key > tkey;
        eq += take_eq != 0u && key == tkey;
      }
      v[u] = gt | (eq << 16);
    }
    const u32 tot = topk_block_scan<T, kTopkUnroll>(s, v, ex);
#pragma unroll
    for (int u = 0; u < kTopkUnroll; ++u) {
      u32 g = gt_base + (ex[u] & 0xffffu), e = eq_base + (ex[u] >> 16);
      const i32 w = t0 + u * T + static_cast<i32>(threadIdx.x);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const u32 key = topk_lane(kk[u], q);
        if (key > tkey) {
          const u32 at = g + min(e, take_eq);
          if (at < limit) {
            dkey[at] = key;
            dcol[at] = cols(w, q);
          }
          ++g;
        } else if (take_eq != 0u && key == tkey) {
          if (e < take_eq && g + e < limit) {
            dkey[g + e] = key;
            dcol[g + e] = cols(w, q);
          }
          ++e;
        }
      }
    }
    gt_base += tot & 0xffffu;
    eq_base += tot >> 16;
    if (gt_base + min(eq_base, take_eq) >= stop_at) break;  // uniform
  }
  return gt_base + min(eq_base, take_eq);
}

// The exact threshold from an 11-bit histogram of key bits 31..21 (already in `hist`) of a
// source holding at least k keys: then bits 20..10 and 9..0, each over the candidates when
// they are (or now fit) in ckey (`in_cands`), else by another pass over the row. Selected =
// keys > tkey, plus the first take_eq keys == tkey in column order.
template <int T>
__device__ __forceinline__ void topk_threshold(TopkScratch& s, u32* hist, u32* ckey, i32* ccol, bool in_cands,
                                               const TopkRowCtx& rc, const uint4* cache, i32 cw, u32 k, u32& tkey,
                                               u32& take_eq) {
  const int tid = threadIdx.x;
  u32 bin, above;
  topk_find_bin<T>(s, hist, k, bin, above);
  u32 prefix = bin << 21;
  int res_shift = 21;  // key bits >= res_shift are fixed to prefix's
  u32 need = k - above;
  u32 count = hist[bin];
  bool done = need == count;
  for (int level = 2; level <= 3 && !done; ++level) {
    const int dshift = level == 2 ? 10 : 0;
    const u32 dmask = level == 2 ? 0x7ffu : 0x3ffu;
    const u32 match = prefix >> res_shift;
    if (!in_cands && count <= static_cast<u32>(kTopkCandCap)) {
      // Collection order follows the atomics, but nothing below depends on it: the
      // histograms count, and ties are broken by the ordered pass in column order.
      __syncthreads();
      if (tid == 0) s.cand_count = 0u;
      __syncthreads();
      topk_for_each_word<T>(rc, cache, cw, [&](i32 w, const uint4& kk) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const u32 key = topk_lane(kk, q);
          if ((key >> res_shift) == match) {
            const u32 at = atomicAdd(&s.cand_count, 1u);
            ckey[at] = key;
            ccol[at] = 4 * w - rc.off + q;
          }
        }
      });
      in_cands = true;
    }
    __syncthreads();
    for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
    __syncthreads();
    if (in_cands) {
      const u32 nc = s.cand_count;
      for (u32 i = tid; i < nc; i += T) {
        const u32 key = ckey[i];
        if ((key >> res_shift) == match) atomicAdd(&hist[(key >> dshift) & dmask], 1u);
      }
    } else {
      topk_for_each_word<T>(rc, cache, cw, [&](i32, const uint4& kk) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const u32 key = topk_lane(kk, q);
          if ((key >> res_shift) == match) atomicAdd(&hist[(key >> dshift) & dmask], 1u);
        }
      });
    }
    u32 b2, above2;
    topk_find_bin<T>(s, hist, need, b2, above2);
    prefix |= b2 << dshift;
    res_shift = dshift;
    need -= above2;
    count = hist[b2];
    done = need == count;
  }
  if (done) {
    tkey = prefix - 1u;  // every key >= prefix (prefix >= 3 << 21, no wrap)
    take_eq = 0u;
  } else {
    tkey = prefix;
    take_eq = need;
  }
}

// The lse of a row of n visible cells whose largest key is max_key: log(sum of exp(x - m)) + m,
// the sum in fp64 in a fixed order (each thread adds its words by topk_lse_add in ascending word
// order, then topk_lse_finish). topk_lse_special gives the rows with no finite sum: empty, a NaN
// or +inf visible, every cell -inf.
__device__ __forceinline__ bool topk_lse_special(i32 n, u32 max_key, float& lse) {
  if (n == 0) lse = __uint_as_float(0xff800000u);
  else if (max_key == kTopkNanKey) lse = topk_canonical_nan();
  else if (max_key == kTopkPosInfKey || max_key == kTopkNegInfKey) lse = topk_key_value(max_key);
  else return false;
  return true;
}
__device__ __forceinline__ void topk_lse_add(double& acc, const uint4& kk, float m) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const u32 key = topk_lane(kk, q);
    if (key != kTopkNoKey) acc += static_cast<double>(topk_exp_diff(topk_key_value(key), m));
  }
}
template <int T>
__device__ __forceinline__ float topk_lse_finish(TopkScratch& s, double acc, float m) {
  const double sum = topk_block_sum<T>(s, acc);
  return static_cast<float>(static_cast<double>(m) + log(sum));
}

// The lse of a row read from its words (topk_for_each_word).
template <int T>
__device__ __forceinline__ float topk_row_lse(TopkScratch& s, const TopkRowCtx& rc, const uint4* cache, i32 cw, u32 max_key) {
  const float m = topk_key_value(max_key);
  float lse;
  if (topk_lse_special(rc.n, max_key, lse)) return lse;
  double acc = 0.0;
  topk_for_each_word<T>(rc, cache, cw, [&](i32, const uint4& kk) { topk_lse_add(acc, kk, m); });
  return topk_lse_finish<T>(s, acc, m);
}

// One row of at most W * T words (the alignment offset included) selected from registers: the
// same outputs bit for bit as sm90_topk_select<T> (the selected set is unique, it is compacted in
// column order, and both end in topk_write_row<T>; the lse adds the same words in the same order:
// thread t's words t + u * T, u ascending, then the block sum).
//
// Where sm90_topk_select copies a short row into shared candidates and refines them there, here
// each thread keeps its W words (4 W keys) in registers, words tid + u * T in column order:
// - rows of at most k cells select every visible cell, with no radix level;
// - longer rows take the radix levels (11/11/10 bits) over the registers, each into its own
//   histogram, so no barrier separates a level from the next; the used histograms are cleared
//   after the compaction, which every thread reaches past its last read of them (so they are
//   zero again for the next row: the caller zeroes them before the first);
// - one compaction (topk_ordered_pass over the registers) writes the selection;
// - the row max is a warp max per warp (warp_max: T / 32 words), read after the compaction's
//   barriers (racecheck found the read of an empty row, which has no barrier, in session 27;
//   such a row needs no max).
template <int T, int W>
__device__ __forceinline__ void topk_select_row_regs(TopkScratch& s, const TopkSelectArgs& a, i64 row, const TopkRow& rw,
                                                     const TopkRowCtx& rc, u32* hist1, u32* hist2, u32* hist3, u32* skey,
                                                     i32* scol, u32* warp_max) {
  static_assert(W == kTopkUnroll || W == 2 * kTopkUnroll, "topk_select_row_regs: one or two tiles of the ordered pass");
  constexpr int kW = W;  // words a thread
  constexpr int kWarps = T / 32;
  const u32 k = static_cast<u32>(a.k);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const u32 n = static_cast<u32>(rc.n);
  uint4 kk[kW];
#pragma unroll
  for (int u = 0; u < kW; ++u) {
    const i32 w = u * T + tid;
    kk[u] = w < rc.nw ? topk_load_word(rc, w) : make_uint4(0u, 0u, 0u, 0u);
  }
  u32 mx = 0u;
#pragma unroll
  for (int u = 0; u < kW; ++u) mx = max(mx, max(max(kk[u].x, kk[u].y), max(kk[u].z, kk[u].w)));
  mx = __reduce_max_sync(0xffffffffu, mx);
  if (lane == 0) warp_max[warp] = mx;

  // The threshold: keys > tkey, and the first take_eq keys == tkey in column order.
  u32 tkey = 0u, take_eq = 0u;  // n <= k: every visible cell (keys > 0)
  int levels = 0;
  if (n > k) {
    u32* const hists[3] = {hist1, hist2, hist3};
    u32 prefix = 0u, need = k, count = n;
    int res_shift = 32;  // key bits >= res_shift are fixed to prefix's
    bool done = false;
#pragma unroll
    for (int level = 0; level < 3; ++level) {
      if (done) break;  // uniform
      u32* const h = hists[level];
      const int dshift = level == 0 ? 21 : level == 1 ? 10 : 0;
      const u32 dmask = level == 0 ? 0x7ffu : level == 1 ? 0x7ffu : 0x3ffu;
#pragma unroll
      for (int u = 0; u < kW; ++u)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const u32 key = topk_lane(kk[u], q);
          // level 0: every visible key (kTopkNoKey, bin 0, below them all, is not counted)
          const bool in = level == 0 ? key != kTopkNoKey : (key >> res_shift) == (prefix >> res_shift);
          if (in) atomicAdd(&h[(key >> dshift) & dmask], 1u);
        }
      u32 b, above;
      topk_find_bin<T>(s, h, need, b, above);  // its barriers: h complete before, read after
      count = h[b];
      prefix |= b << dshift;
      res_shift = dshift;
      need -= above;
      done = need == count;
      levels = level + 1;
    }
    if (done) {
      tkey = prefix - 1u;  // every key >= prefix (prefix >= 3 << 21: a visible key's bin)
    } else {
      tkey = prefix;
      take_eq = need;
    }
  }
  const u32 n_sel = min(n, k);
  auto cols = [&](i32 w, int q) { return 4 * w - rc.off + q; };
  if constexpr (W == kTopkUnroll) {
    topk_ordered_pass<T>(s, rc.nw, [&](i32, int u) { return kk[u]; }, cols, tkey, take_eq, n_sel, n_sel, skey, scol);
  } else {  // the second tile's words are kk[kTopkUnroll + u]: word w = (tile * 4 + u) * T + tid
    topk_ordered_pass<T>(s, rc.nw, [&](i32 w, int u) { return w < kTopkUnroll * T ? kk[u] : kk[kTopkUnroll + u]; }, cols,
                         tkey, take_eq, n_sel, n_sel, skey, scol);
  }
  // Past the pass's barriers (a row of no words has none, and no max to read): every histogram
  // read is done, warp_max is complete.
  u32 max_key = 0u;
  if (rc.nw > 0)
#pragma unroll
    for (int i = 0; i < kWarps; ++i) max_key = max(max_key, warp_max[i]);
  if (levels >= 1)
    for (int i = tid; i < kTopkBins; i += T) hist1[i] = 0u;
  if (levels >= 2)
    for (int i = tid; i < kTopkBins; i += T) hist2[i] = 0u;
  if (levels >= 3)  // the last level's digit has 10 bits
    for (int i = tid; i < kTopkBins / 2; i += T) hist3[i] = 0u;
  if (a.lse != nullptr) {
    float lse;
    if (!topk_lse_special(rc.n, max_key, lse)) {  // uniform
      const float m = topk_key_value(max_key);
      double acc = 0.0;
#pragma unroll
      for (int u = 0; u < kW; ++u)
        if (u * T + tid < rc.nw) topk_lse_add(acc, kk[u], m);
      lse = topk_lse_finish<T>(s, acc, m);
    }
    if (tid == 0) a.lse[row * a.lse_stride] = lse;
  }
  topk_write_row<T>(s, a, row, k, skey, scol, n_sel, max_key, rw.lo, rw.bias);
}

// grid: any number of CTAs (rows are strided over them); block: T threads; dynamic shared
// memory: kTopkFixedSmemBytes + a multiple of 16 bytes of row cache.
// The second launch bound caps registers at 64 for every T: with T = 256 alone ptxas took 80
// registers and spilled; 64 fit without spills (the 1024-thread variant needs exactly that).
//
// Fast path (almost every row): a threshold t estimated from a strided sample of the row (the
// key at rank ~(k + cap) / 2 scaled to the sample), then ONE ordered pass over the row keeps
// the keys >= t in column order as candidates. When k <= candidates <= kTopkCandCap the set
// is exact from the candidates alone (every key >= the k-th largest is among them), refined
// by radix levels over <= cap keys, so the row is read once with no per-cell atomics (the
// row-wide histogram's shared atomics, contended on the few bins that hold most scores, were
// the cost of the exact path). Otherwise (an unlucky sample, heavy ties) the exact path:
// a histogram pass over the row (cached in shared memory where it fits), radix levels and an
// ordered pass over the row.
//
// R (session 28): rows of at most kTopkUnroll * T words (4096 cells at T 256, 8192 at 512) are
// skipped: the launch before it, sm90_topk_select_short<T> over the same rows, selected them
// from registers with the same bits. So a launch whose rows are mostly short, but whose width
// passes the short-row kernel's (BSHD ratio rows, THD: the width is max_seqlen_k), keeps its
// block size, so its softmax bits, and takes the general path only for its longer rows. (One
// kernel holding both paths spilled at 64 registers; each alone fits.)
template <int T, bool R = false>
__global__ void __launch_bounds__(T, 1024 / T) sm90_topk_select(const __grid_constant__ TopkSelectArgs a) {
  static_assert(T == 256 || T == 512 || T == 1024, "sm90_topk_select: T must be 256, 512 or 1024");
  static_assert(kTopkCandCap >= kTopkMaxK, "sm90_topk_select: candidates must hold a whole selection");
  static_assert(4 * kTopkUnroll * T < 65536, "sm90_topk_select: the per-tile counts of the ordered pass are packed in 16 bits");
  static_assert(kTopkSampleWords * 4 <= kTopkCandCap, "sm90_topk_select: the sample is staged in the candidate buffer");
  extern __shared__ __align__(16) u32 smem[];
  __shared__ TopkScratch s;
  u32* const hist = smem;
  u32* const ckey = smem + kTopkBins;
  i32* const ccol = reinterpret_cast<i32*>(smem + kTopkBins + kTopkCandCap);
  u32* const skey = smem + kTopkBins + 2 * kTopkCandCap;
  i32* const scol = reinterpret_cast<i32*>(smem + kTopkBins + 2 * kTopkCandCap + kTopkMaxK);
  const uint4* const cache = reinterpret_cast<const uint4*>(smem + kTopkFixedSmemBytes / 4);
  uint4* const cache_w = reinterpret_cast<uint4*>(smem + kTopkFixedSmemBytes / 4);
  // Row cache capacity in words; the launch guarantees at least kTopkFixedSmemBytes.
  const i32 cw = static_cast<i32>((topk_dynamic_smem_bytes() - static_cast<u32>(kTopkFixedSmemBytes)) / 16u);
  const u32 k = static_cast<u32>(a.k);
  const u32 cap = static_cast<u32>(kTopkCandCap);
  const int tid = threadIdx.x;

  for (i64 row = blockIdx.x; row < a.n_rows; row += gridDim.x) {
    const TopkRow rw = a.rows[row];
    // topk_row_ctx's arithmetic, written out: the call compiles to other code (session 27)
    const i32 n = rw.hi > rw.lo ? rw.hi - rw.lo : 0;
    const float* p = a.scores + row * a.ld + rw.lo;
    TopkRowCtx rc;
    rc.off = static_cast<i32>((reinterpret_cast<u64>(p) >> 2) & 3u);
    rc.base = p - rc.off;
    rc.n = n;
    rc.nw = n > 0 ? static_cast<i32>((static_cast<i64>(rc.off) + n + 3) >> 2) : 0;
    if constexpr (R) {
      if (rc.nw <= kTopkUnroll * T) continue;  // uniform: sm90_topk_select_short<T> selects it
    }
    auto row_keys = [&](i32 w, int) { return topk_load_word(rc, w); };
    auto row_cols = [&](i32 w, int q) { return 4 * w - rc.off + q; };

    // 1. candidates in column order: the whole row when it fits, else the keys >= a sampled t.
    u32 t_minus_1 = 0u;  // keys > 0: every visible cell
    if (static_cast<u32>(n) > cap) {
      __syncthreads();  // the previous row's readers of shared memory
      for (int i = tid; i < kTopkSampleWords; i += T) {
        const uint4 kk = topk_load_word(rc, static_cast<i32>(static_cast<i64>(i) * rc.nw / kTopkSampleWords));
        ckey[4 * i + 0] = kk.x;
        ckey[4 * i + 1] = kk.y;
        ckey[4 * i + 2] = kk.z;
        ckey[4 * i + 3] = kk.w;
      }
      for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
      __syncthreads();
      // The sample rank whose key should have about (k + cap) / 2 row keys at or above it.
      const u64 want = (static_cast<u64>(k + cap) / 2u) * (4u * kTopkSampleWords) / static_cast<u64>(n);
      const u32 j = static_cast<u32>(want < 1u ? 1u : want);
      for (int i = tid; i < 4 * kTopkSampleWords; i += T) atomicAdd(&hist[ckey[i] >> 21], 1u);
      u32 b1, above1;
      topk_find_bin<T>(s, hist, j, b1, above1);
      for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
      __syncthreads();
      for (int i = tid; i < 4 * kTopkSampleWords; i += T) {
        const u32 key = ckey[i];
        if ((key >> 21) == b1) atomicAdd(&hist[(key >> 10) & 0x7ffu], 1u);
      }
      u32 b2, above2;
      topk_find_bin<T>(s, hist, j - above1, b2, above2);
      // b1 holds only visible keys (j <= sample keys in bins >= b1, and bin 0 holds only the
      // empty lanes, below every visible key), so t >= 3 << 21.
      t_minus_1 = ((b1 << 21) | (b2 << 10)) - 1u;
    }
    const u32 n_cand = topk_ordered_pass<T>(s, rc.nw, row_keys, row_cols, t_minus_1, 0u, cap,
                                            static_cast<u32>(n) > cap ? cap + 1u : cap, ckey, ccol);
    const bool fast = static_cast<u32>(n) <= cap || (n_cand >= k && n_cand <= cap);

    u32 max_key = 0u, tkey = 0u, take_eq = 0u;
    u32 n_sel = 0u;
    if (fast) {
      // 2. the exact threshold among the candidates (they hold every key >= the k-th largest).
      __syncthreads();
      u32 mx = 0u;
      for (u32 i = tid; i < n_cand; i += T) mx = max(mx, ckey[i]);
      max_key = topk_block_max<T>(s, mx);
      n_sel = min(n_cand, k);
      if (n_cand > k) {
        for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
        __syncthreads();
        for (u32 i = tid; i < n_cand; i += T) atomicAdd(&hist[ckey[i] >> 21], 1u);
        __syncthreads();
        if (tid == 0) s.cand_count = n_cand;
        topk_threshold<T>(s, hist, ckey, ccol, true, rc, cache, 0, k, tkey, take_eq);
      }
      // 3. the selected candidates, still in column order.
      auto cand_keys = [&](i32 w, int) {
        const u32 i = 4u * static_cast<u32>(w);
        return make_uint4(i + 0 < n_cand ? ckey[i + 0] : 0u, i + 1 < n_cand ? ckey[i + 1] : 0u,
                          i + 2 < n_cand ? ckey[i + 2] : 0u, i + 3 < n_cand ? ckey[i + 3] : 0u);
      };
      auto cand_cols = [&](i32 w, int q) { return ccol[4 * w + q]; };
      topk_ordered_pass<T>(s, static_cast<i32>((n_cand + 3u) / 4u), cand_keys, cand_cols, tkey, take_eq, n_sel, n_sel, skey,
                           scol);
      if (a.lse != nullptr) {
        const float lse = topk_row_lse<T>(s, rc, cache, 0, max_key);
        if (tid == 0) a.lse[row * a.lse_stride] = lse;
      }
    } else {
      // The exact path. Load pass: histogram of bits 31..21, the max key, the row cache.
      __syncthreads();
      for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
      __syncthreads();
      u32 mx = 0u;
      {
        auto take = [&](i32 w, const uint4& kk) {
          if (w < cw) cache_w[w] = kk;
          mx = max(mx, max(max(kk.x, kk.y), max(kk.z, kk.w)));
          atomicAdd(&hist[kk.x >> 21], 1u);
          atomicAdd(&hist[kk.y >> 21], 1u);
          atomicAdd(&hist[kk.z >> 21], 1u);
          atomicAdd(&hist[kk.w >> 21], 1u);
        };
        i32 w = tid;
        for (; w + (kTopkUnroll - 1) * T < rc.nw; w += kTopkUnroll * T) {
          uint4 kk[kTopkUnroll];
#pragma unroll
          for (int u = 0; u < kTopkUnroll; ++u) kk[u] = topk_load_word(rc, w + u * T);
#pragma unroll
          for (int u = 0; u < kTopkUnroll; ++u) take(w + u * T, kk[u]);
        }
        for (; w < rc.nw; w += T) take(w, topk_load_word(rc, w));
      }
      max_key = topk_block_max<T>(s, mx);  // barrier: cache and histogram complete
      if (a.lse != nullptr) {
        const float lse = topk_row_lse<T>(s, rc, cache, cw, max_key);
        if (tid == 0) a.lse[row * a.lse_stride] = lse;
      }
      topk_threshold<T>(s, hist, ckey, ccol, false, rc, cache, cw, k, tkey, take_eq);
      n_sel = k;  // n > cap >= k
      auto cached_keys = [&](i32 w, int) { return w < cw ? cache[w] : topk_load_word(rc, w); };
      topk_ordered_pass<T>(s, rc.nw, cached_keys, row_cols, tkey, take_eq, n_sel, n_sel, skey, scol);
    }

    // 4. optional score order, then the outputs in slot order.
    topk_write_row<T>(s, a, row, k, skey, scol, n_sel, max_key, rw.lo, rw.bias);
  }
}


// The short-row selection: each row of at most W * T words, the alignment offset included, by
// topk_select_row_regs<T, W>, the same outputs bit for bit as sm90_topk_select<T>; the next
// row's window is loaded while this row is selected. Longer rows are skipped: the host launches
// the kernel alone only where every row fits (topk_select_short_fits), else before
// sm90_topk_select<T, true>, which selects the others (the register rows, session 28; T 512 only
// there). With a.skip_words > 0 it also skips the rows of at most that many words, which a launch
// before it (sm90_topk_select_short<256>, the narrow register rows: calls without softmax and lse,
// whose outputs do not depend on the block size) selected. Shared memory: kTopkShortSmemBytes
// (40 KB against 56 KB), so more CTAs share an SM:
// three full histograms (topk_find_bin scans kTopkBins bins) and the selection.
//
// W = 8 (rows of at most 8192 cells, `kTopkMediumCells`; built in session 27, measured slower
// in session 28, off: kTopkSelectMedium): 8 words a thread, two tiles of the ordered pass, 2
// CTAs of 256 threads per SM so that the 32 keys fit in registers; the same bits as
// sm90_topk_select<256>, which serves rows of up to 8192 cells.
template <int T, int W = kTopkUnroll>
__global__ void __launch_bounds__(T, W == kTopkUnroll && T == 256 ? 4 : 2) sm90_topk_select_short(const __grid_constant__ TopkSelectArgs a) {
  static_assert(T == 256 || (T == 512 && W == kTopkUnroll), "sm90_topk_select_short: T 256, or 512 with 4 words");
  static_assert(kTopkUnroll * 256 * 4 == kTopkShortCells && 2 * kTopkShortCells == kTopkMediumCells,
                "sm90_topk_select_short: a tile of the ordered pass is kTopkShortCells at T 256");
  extern __shared__ __align__(16) u32 smem[];
  __shared__ TopkScratch s;
  __shared__ u32 warp_max[T / 32];
  u32* const skey = smem + 3 * kTopkBins;
  i32* const scol = reinterpret_cast<i32*>(skey + kTopkMaxK);
  const int tid = threadIdx.x;
  for (int i = tid; i < 3 * kTopkBins; i += T) smem[i] = 0u;
  __syncthreads();

  TopkRow next = blockIdx.x < a.n_rows ? a.rows[blockIdx.x] : TopkRow{};
  for (i64 row = blockIdx.x; row < a.n_rows; row += gridDim.x) {
    const TopkRow rw = next;
    if (row + gridDim.x < a.n_rows) next = a.rows[row + gridDim.x];
    const TopkRowCtx rc = topk_row_ctx(a, row, rw);
    if (rc.nw > W * T) continue;  // uniform: sm90_topk_select<T, true> selects it, in the next launch
    if (a.skip_words > 0 && rc.nw <= a.skip_words) continue;  // uniform: the launch before selected it
    topk_select_row_regs<T, W>(s, a, row, rw, rc, smem, smem + kTopkBins, smem + 2 * kTopkBins, skey,
                               scol, warp_max);
  }
}

}  // namespace dsa
