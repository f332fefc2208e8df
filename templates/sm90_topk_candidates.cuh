#pragma once
// sm90_topk_candidates: exact, deterministic top-k of rows given as candidate lists (the fused
// top-k path: the score kernel keeps a bounded list of composites per row instead of writing
// the row), with the outputs of sm90_topk_select bit for bit.
//
// Contract, per row r (the list format is in sm90_topk_candidates_args.cuh):
// - The selected set is the min(n_r, k) largest composites of the list, n_r = min(count[r],
//   cand_ld). A composite orders as (key desc, column asc) and the list holds the row's top-k
//   cells, so this is the set sm90_topk_select takes from the row's scores (the same key, so
//   the same NaN, signed-zero and -inf rules).
// - Slots, padding, values and softmax are written by the same code as sm90_topk_select's
//   (topk_write_row): for the same row, k and T the two kernels write the same bits. No lse:
//   a list does not see every cell of its row.
//
// Algorithm (one CTA per row, rows strided over the grid): one load pass stages the list in
// shared memory (where it fits), takes the largest key and, when the list is longer than k,
// the histogram of the top radix digit. Radix levels over the 64-bit composite (bits 31..21,
// 20..10, 9..0 of the key, then the same digits of the inverted column) find the bin holding
// the k-th largest composite; the levels stop at the first bin that is taken whole, so the
// column levels run only when the k-th place falls inside a run of equal keys. A compaction
// (warp-aggregated atomic positions) puts the selected pairs in shared memory; a bitmap of their
// columns (when the launch bounds the columns, TopkCandArgs::width) or a bitonic sort orders
// them by column, a bitonic sort by score. Composites are unique, so the ordered slots depend
// only on the selected set: no atomic's order reaches an output.
#include "sm90_topk_candidates_args.cuh"
#include "sm90_topk_common.cuh"

namespace dsa {

// Lowest bit of radix level 0..5's digit of a composite: the key's levels first (bits 63..53,
// 52..42, 41..32), then the inverted column's (31..21, 20..10, 9..0); level 2 and 5 digits
// are 10 bits wide.
__device__ __forceinline__ int topk_cand_shift(int level) {
  const int l = level % 3;
  return (level < 3 ? 32 : 0) + (l == 0 ? 21 : l == 1 ? 10 : 0);
}

// grid: any number of CTAs (rows are strided over them); block: T threads; dynamic shared
// memory: kTopkCandFixedSmemBytes + staging room, kTopkCandSmemBytes to stage every list of
// cand_ld <= kTopkCandMaxLd. The second launch bound caps registers at 64, as for
// sm90_topk_select.
template <int T>
__global__ void __launch_bounds__(T, 1024 / T) sm90_topk_candidates(const __grid_constant__ TopkCandArgs a) {
  static_assert(T == 256 || T == 512, "sm90_topk_candidates: T must be 256 or 512");
  static_assert(kTopkCandMaxLd >= kTopkMaxK, "sm90_topk_candidates: a list must be able to hold a whole selection");
  static_assert(kTopkCandSmemBytes + static_cast<i32>(sizeof(TopkScratch)) <= 227 * 1024,
                "sm90_topk_candidates: the full staging area must fit an SM's shared memory");
  extern __shared__ __align__(16) u32 smem[];
  __shared__ TopkScratch s;
  __shared__ u32 slot_count[2];  // the compaction's positions: above the threshold bin, in it
  u32* const hist = smem;
  u32* const skey = smem + kTopkBins;
  i32* const scol = reinterpret_cast<i32*>(smem + kTopkBins + kTopkMaxK);
  u64* const stage = reinterpret_cast<u64*>(smem + kTopkCandFixedSmemBytes / 4);
  // Staging capacity in composites; the launch guarantees at least kTopkCandFixedSmemBytes.
  const u32 stage_cap = (topk_dynamic_smem_bytes() - static_cast<u32>(kTopkCandFixedSmemBytes)) / 8u;
  const u32 k = static_cast<u32>(a.k);
  const int tid = threadIdx.x;

  for (i64 row = blockIdx.x; row < a.n_rows; row += gridDim.x) {
    const i64 len = min(static_cast<i64>(a.count[row]), a.cand_ld);
    const u32 n = len > 0 ? static_cast<u32>(len) : 0u;
    const u64* const g = a.cand + row * a.cand_ld;
    const bool staged = n <= stage_cap;
    const bool refine = n > k;  // else every candidate is selected
    const u32 n_sel = min(n, k);

    // 1. load pass: staging, the largest key, the top digit's histogram.
    __syncthreads();  // the previous row's readers of shared memory
    if (tid == 0) {
      slot_count[0] = 0u;
      slot_count[1] = 0u;
    }
    if (refine)
      for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
    __syncthreads();
    u32 mx = 0u;
    {
      auto take = [&](u32 i, u64 c) {
        if (staged) stage[i] = c;
        mx = max(mx, static_cast<u32>(c >> 32));
        if (refine) atomicAdd(&hist[static_cast<u32>(c >> 53)], 1u);
      };
      u32 i = tid;
      for (; i + (kTopkUnroll - 1) * T < n; i += kTopkUnroll * T) {
        u64 c[kTopkUnroll];
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) c[u] = __ldg(g + i + u * T);
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) take(i + u * T, c[u]);
      }
      for (; i < n; i += T) take(i, __ldg(g + i));
    }
    const u32 max_key = topk_block_max<T>(s, mx);  // barrier: staging and histogram complete
    auto cand_at = [&](u32 i) { return staged ? stage[i] : __ldg(g + i); };

    // 2. the threshold bin: the selection is every composite whose bits from `res` up exceed
    // prefix's, plus take_eq of those equal to it. With unique composites (the contract) that is
    // the whole bin; a duplicated composite, which the contract rules out, can only leave out
    // copies equal to the ones taken, so even then the output does not depend on the atomics.
    u64 prefix = 0u;
    int res = 0;
    u32 take_eq = 0u;
    if (refine) {
      u32 need = k;
      for (int level = 0;; ++level) {
        const int shift = topk_cand_shift(level);
        if (level > 0) {
          const u64 match = prefix >> res;
          const u32 mask = level % 3 == 2 ? 0x3ffu : 0x7ffu;
          __syncthreads();  // the previous level's readers of hist[bin]
          for (int i = tid; i < kTopkBins; i += T) hist[i] = 0u;
          __syncthreads();
          for (u32 i = tid; i < n; i += T) {
            const u64 c = cand_at(i);
            if ((c >> res) == match) atomicAdd(&hist[static_cast<u32>(c >> shift) & mask], 1u);
          }
        }
        u32 bin, above;
        topk_find_bin<T>(s, hist, need, bin, above);
        prefix |= static_cast<u64>(bin) << shift;
        res = shift;
        need -= above;
        if (need == hist[bin] || level == 5) break;  // uniform: every thread reads the same
      }
      take_eq = need;
    }

    // 3. the selected pairs at positions [0, n_sel - take_eq) above the bin and the rest from
    // the bin; a warp takes its positions with one atomic per group, the order within a group
    // follows the atomics and the sort below removes it.
    const u64 pmatch = prefix >> res;
    const u32 n_gt = n_sel - take_eq;
    const int lane = tid & 31;
    const u32 lanes_below = (1u << lane) - 1u;
    for (u32 i0 = static_cast<u32>(tid - lane); i0 < n; i0 += T) {  // trip count uniform per warp (the ballots)
      const u32 i = i0 + static_cast<u32>(lane);
      const u64 c = i < n ? cand_at(i) : 0u;
      const bool gt = i < n && (!refine || (c >> res) > pmatch);
      const bool eq = i < n && refine && (c >> res) == pmatch;
      const u32 gt_lanes = __ballot_sync(0xffffffffu, gt);
      const u32 eq_lanes = __ballot_sync(0xffffffffu, eq);
      u32 gt_base = 0u, eq_base = 0u;
      if (lane == 0) {
        if (gt_lanes != 0u) gt_base = atomicAdd(&slot_count[0], static_cast<u32>(__popc(gt_lanes)));
        if (eq_lanes != 0u) eq_base = atomicAdd(&slot_count[1], static_cast<u32>(__popc(eq_lanes)));
      }
      gt_base = __shfl_sync(0xffffffffu, gt_base, 0);
      eq_base = __shfl_sync(0xffffffffu, eq_base, 0);
      u32 at = n_sel;  // not selected
      if (gt) {
        at = gt_base + static_cast<u32>(__popc(gt_lanes & lanes_below));
      } else if (eq) {
        const u32 e = eq_base + static_cast<u32>(__popc(eq_lanes & lanes_below));
        if (e < take_eq) at = n_gt + e;
      }
      if (at < n_sel) {
        skey[at] = static_cast<u32>(c >> 32);
        scol[at] = topk_composite_col(c);
      }
    }
    // Column order: by rank in a bitmap of the columns, kept in the staging area (free once the
    // compaction has read it) when the launch bounds the columns and the area holds the bitmap,
    // else by the sort (which starts with a barrier; its padding lies past every position the
    // compaction writes). Score order is the writer's own sort, from any starting order.
    if (!a.sort_by_score && n_sel > 1u) {
      if (a.width > 0 && (a.width + 31) / 32 <= static_cast<i64>(stage_cap))  // 2 words per bitmap word, 2 per composite
        topk_column_rank<T>(s, skey, scol, n_sel, reinterpret_cast<u32*>(stage), static_cast<u32>(a.width));
      else
        topk_sort_slots<T>(skey, scol, n_sel, TopkColumnOrder{});
    }

    // 4. optional score order, then the outputs in slot order (index = column + bias).
    topk_write_row<T>(s, a, row, k, skey, scol, n_sel, max_key, 0, a.rows[row].bias);
  }
}

}  // namespace dsa
