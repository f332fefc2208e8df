#pragma once
// Per-row visibility windows, shared by every kernel family so that they agree on the contract
// (docs/DESIGN.md, "Contract"). Windows are expressed in "absolute K rows": the key row index inside the
// batch's K (BSHD) or inside the packed K (THD). A row's output column is kabs - base.
#include "dsa_args.cuh"

namespace dsa {

struct RowWindow {
  i64 lo, hi;      // visible absolute K rows [lo, hi); lo == hi when empty
  i64 base;        // absolute K row of output column 0
  i64 out_off;     // element offset of the row in the score matrix
  i64 lse_off;     // element offset in lse
  i32 batch;       // BSHD batch (the K TMA coordinate); THD segment
  i32 valid;       // the row exists (inside S_q / T_q)
  __device__ __forceinline__ bool empty() const { return hi <= lo; }
};

__device__ __forceinline__ i64 clamp64(i64 v, i64 lo, i64 hi) { return v < lo ? lo : (v > hi ? hi : v); }

__device__ __forceinline__ i32 load_i32(u64 base, i64 index) {
  return __ldg(reinterpret_cast<const i32*>(base) + index);
}

// Ratio-causal limit, int64: clamp(floor((offset + i + 1) / ratio), 0, s_k_b). A numerator
// <= 0 gives 0, so floor and truncation agree wherever the clamp lets either matter.
__device__ __forceinline__ i64 causal_limit(i64 offset, i64 i, i64 ratio, i64 s_k_b) {
  i64 num = offset + i + 1;
  if (num <= 0) return 0;
  i64 lim = num / ratio;
  return lim < s_k_b ? lim : s_k_b;
}

// Segment of packed row r: the largest b with cu_q[b] <= r (empty segments are skipped).
__device__ __forceinline__ i32 find_segment(u64 cu_q, i64 n_seg, i64 r) {
  i32 lo = 0, hi = static_cast<i32>(n_seg);  // answer in [0, n_seg - 1]
  while (hi - lo > 1) {
    i32 mid = (lo + hi) >> 1;
    if (load_i32(cu_q, mid) <= r) lo = mid; else hi = mid;
  }
  return lo;
}

// THD: packed row r (< T_q) as (segment b, row i inside it) and the segment's key rows
// [k0, k0 + s_k) of the packed K, clamped to [0, T_k).
struct ThdRow {
  i64 b, i, k0, s_k;
};
__device__ __forceinline__ ThdRow thd_row(u64 cu_q, u64 cu_k, i64 n_seg, i64 t_k, i64 r) {
  ThdRow t;
  t.b = find_segment(cu_q, n_seg, r);
  t.i = r - load_i32(cu_q, t.b);
  if (t.i < 0) t.i = 0;  // only reachable when device cu_seqlens differ from the validated host copy
  t.k0 = clamp64(load_i32(cu_k, t.b), 0, t_k);
  t.s_k = clamp64(static_cast<i64>(load_i32(cu_k, t.b + 1)) - t.k0, 0, t_k - t.k0);
  return t;
}

// The variant's kWindowStart (explicit windows' columns from the window start), rendered only
// when set.
DSA_CONFIG_OR(WindowStartOf, kWindowStart, bool, false)

// An explicit window [ks, ke) over s_k keys, clipped to them and, with columns counted from the
// window's start (n of them: window_start), to its first n keys; the caller empties hi <= lo.
// The generic family's rows (row_window) and lean's row windows (lean_thd_row) both use it.
__device__ __forceinline__ void clip_explicit_window(i64 ks, i64 ke, i64 s_k, bool from_start, i64 n, i64& lo, i64& hi) {
  lo = clamp64(ks, 0, s_k);
  hi = clamp64(ke, 0, s_k);
  if (from_start && hi > ks + n) hi = ks + n;
}

// kFromStart (BSHD explicit windows only): column c of a row is key ks + c (DeepGEMM's
// compressed logits), so base = ks and the window keeps its first out_cols keys.
template <int kLayout, bool kFromStart = false>
__device__ __forceinline__ RowWindow row_window(const DsaArgs& a, i64 b_or_row, i64 i_bshd) {
  static_assert(!kFromStart || kLayout == kLayoutBshd, "row_window: window-start columns are BSHD's");
  RowWindow w;
  w.lo = w.hi = 0;
  w.base = 0;
  w.out_off = 0;
  w.lse_off = 0;
  w.batch = 0;
  w.valid = 0;
  i64 b, i, seg_k0, s_k_b;
  if (kLayout == kLayoutBshd) {
    b = b_or_row;
    i = i_bshd;
    if (b >= a.batch || i >= a.s_q) return w;
    seg_k0 = 0;
    s_k_b = a.s_k;
    w.out_off = b * a.out_stride[0] + i * a.out_stride[1];
    w.lse_off = b * a.lse_stride[0] + i * a.lse_stride[1];
  } else {
    const i64 r = b_or_row;
    if (r >= a.t_q) return w;
    const ThdRow t = thd_row(a.cu_q, a.cu_k, a.batch, a.t_k, r);
    b = t.b;
    i = t.i;
    seg_k0 = t.k0;
    s_k_b = t.s_k;
    w.out_off = r * a.out_stride[1];
    w.lse_off = r * a.lse_stride[1];
  }
  w.valid = 1;
  w.batch = static_cast<i32>(b);
  // the window in the segment's local key index
  i64 lo = 0, hi, start = 0;
  if (a.has_windows) {
    const i64 wi = (kLayout == kLayoutBshd) ? (b * a.win_stride[0] + i * a.win_stride[1]) : (b_or_row * a.win_stride[1]);
    i64 ks = load_i32(a.ks, wi), ke = load_i32(a.ke, wi);
    if (kLayout == kLayoutThdGlobal) {  // explicit windows are in the output's column space
      ks -= seg_k0;
      ke -= seg_k0;
    }
    clip_explicit_window(ks, ke, s_k_b, kFromStart, a.out_cols, lo, hi);
    if (kFromStart) start = ks;
  } else {
    const i64 off = a.has_offsets ? static_cast<i64>(load_i32(a.offsets, b * a.offsets_stride)) : 0;
    hi = causal_limit(off, i, a.ratio, s_k_b);
  }
  if (kLayout == kLayoutThdLocal && hi > a.out_cols) hi = a.out_cols;
  if (hi <= lo) {
    lo = 0;
    hi = 0;
  }
  w.lo = seg_k0 + lo;
  w.hi = seg_k0 + hi;
  w.base = kFromStart ? start : ((kLayout == kLayoutThdLocal) ? seg_k0 : 0);
  return w;
}

}  // namespace dsa
