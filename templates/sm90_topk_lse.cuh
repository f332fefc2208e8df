#pragma once
// The top-k operation's lse on BSHD calls, in one order that both paths follow (the fused
// path cannot hold a row, so the unfused path adopts the fused sweep's order):
//   - lane slot (w, i), w 0..3, i 0..7, of a row keeps a running (max, sum of exp) over the row's
//     visible cells at columns 64 kt + 16 w + i + 8 j, j = 0 then 1, for the KV tiles kt of the
//     row's q-tile in the sweep's order (lean_tile_at with the sample stride of the call's S_k,
//     over the q-tile's n_kv = ceil(hi of its last row / 64));
//   - the 8 slots of a w merge by butterfly (i ^ 1, then i ^ 2, then i ^ 4: a symmetric merge, so
//     both partners hold the same state), then w 0..3 merge in order;
//   - lse = m + log(s).
// The fused sweep's consumer lanes are those slots (lane 4 i + c of consumer warp w holds token
// token_quarter(lane)'s columns, its butterfly xors 4, 8, 16); sm90_topk_lse replays the order
// over the unfused path's block scores, one warp per row (lane 8 w + i, xors 1, 2, 4). Every
// rounding is explicit (__fsub_rn, __fma_rn, __dadd_rn, __dmul_rn), so the two kernels cannot
// contract differently. The sum is fp64 (the terms are fp32 expf), so the result stays within a
// few fp32 ulp of the exact value (as the unfused path's former fp64 two-pass sum).
// Special cells, as the contract asks: a visible NaN makes the lse NaN (0x7fffffff), else a +inf
// makes it +inf, -inf cells add nothing, and a row without a finite or +inf cell gives -inf.
#include "dsa_types.cuh"
#include "ptx/sync.cuh"
#include "sm90_indexer_lean_args.cuh"
#include "sm90_topk_select_args.cuh"

namespace dsa {

struct TopkLaneLse {
  float m;   // the largest finite cell pushed (-inf: none), or +inf once a +inf cell was
  double s;  // sum of exp(x - m) over the finite cells; NaN once a NaN cell was (sticky)

  __device__ __forceinline__ void reset() {
    m = neg_inf();
    s = 0.0;
  }
  __device__ __forceinline__ bool has_nan() const { return s != s; }
  __device__ __forceinline__ void push(float x) {
    if (x != x) {
      s = __longlong_as_double(0x7ff8000000000000ll);
    } else if (has_nan() || x == neg_inf() || m == pos_inf()) {
      // nothing changes: NaN is sticky, -inf adds 0, a +inf already dominates
    } else if (x == pos_inf()) {
      m = x;
      s = 1.0;
    } else if (x > m) {
      s = __fma_rn(s, static_cast<double>(expf(__fsub_rn(m, x))), 1.0);  // m = -inf: 0 * 0 + 1
      m = x;
    } else {
      s = __dadd_rn(s, static_cast<double>(expf(__fsub_rn(x, m))));
    }
  }
  // push(x) for x finite or -inf while no NaN or +inf has been pushed (the replay's batches
  // without special values), written without branches so that only the max and the fp64 sum
  // carry from one push to the next: the same operations as push(), so the same bits (x = -inf
  // adds exactly 0.0 to s >= +0, and leaves m).
  __device__ __forceinline__ void push_plain(float x) {
    const bool gt = x > m;
    const float e32 = expf(gt ? __fsub_rn(m, x) : __fsub_rn(x, m));  // (NaN for x = m = -inf: unused)
    const double e = x == neg_inf() ? 0.0 : static_cast<double>(e32);
    s = gt ? __fma_rn(s, e, 1.0) : __dadd_rn(s, e);
    m = gt ? x : m;
  }
  // Symmetric: a.merge(b) and b.merge(a) give the same bits (each term is computed from its own
  // state and the common max; the two terms add commutatively).
  __device__ __forceinline__ void merge(float m2, double s2) {
    if (has_nan() || s2 != s2) {
      s = __longlong_as_double(0x7ff8000000000000ll);
    } else if (m == pos_inf() || m2 == pos_inf()) {
      m = pos_inf();
      s = 1.0;
    } else {
      const float mx = fmaxf(m, m2);
      double r = 0.0;
      if (m != neg_inf()) r = __dadd_rn(r, __dmul_rn(s, static_cast<double>(expf(__fsub_rn(m, mx)))));
      if (m2 != neg_inf()) r = __dadd_rn(r, __dmul_rn(s2, static_cast<double>(expf(__fsub_rn(m2, mx)))));
      m = mx;
      s = r;
    }
  }
  // Merges with the lane `lane ^ x` of the warp (every lane calls it).
  __device__ __forceinline__ void merge_xor(int x) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, x);
    const double s2 = __shfl_xor_sync(0xffffffffu, s, x);
    merge(m2, s2);
  }
  __device__ __forceinline__ float value() const {
    if (has_nan()) return __uint_as_float(0x7fffffffu);
    if (m == pos_inf() || m == neg_inf()) return m;
    return static_cast<float>(__dadd_rn(static_cast<double>(m), log(s)));
  }
};

// The unfused path's replay (BSHD blocks; TopkLseArgs): one warp per workspace row of the
// block's scores. Its 32 chains (one per lane slot) are strictly sequential, and a block of the
// unfused path holds few rows (few warps per SM), so the loads run kLseBatch tiles ahead: a
// batch's 2 kLseBatch cells per lane are loaded while the previous batch is pushed. A cell
// outside the row's window is loaded as -inf, which push() skips like a visible -inf. A batch
// without NaN or +inf (almost all) takes push_plain, whose chains carry only the max and the sum.
// kWarps rows per CTA (a template, so that only the modules that name it compile it).
constexpr int kLseBatch = 16;

__device__ __forceinline__ void topk_lse_load_batch(float (&v)[2 * kLseBatch], const float* p, const TopkRow& r, i32 b,
                                                    i32 n, i32 stride, i32 col) {
#pragma unroll
  for (int t = 0; t < kLseBatch; ++t) {
    const i32 it = b * kLseBatch + t;
    const i32 c0 = it < n ? lean_tile_at_rt(it, n, stride) * 64 + col : -1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const i32 c = c0 + 8 * j;
      v[2 * t + j] = it < n && c >= r.lo && c < r.hi ? __ldg(p + c) : neg_inf();
    }
  }
}

template <int kWarps>
__global__ void __launch_bounds__(32 * kWarps) sm90_topk_lse(const __grid_constant__ TopkLseArgs a) {
  const i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= a.n_rows) return;
  const int lane = threadIdx.x % 32, w = lane / 8, i = lane % 8;
  const TopkRow r = a.rows[row];
  const i64 last = (row | 7) < a.n_rows ? (row | 7) : a.n_rows - 1;  // the q-tile's last row
  const i32 n = (a.rows[last].hi + 63) / 64;                          // its KV tiles
  const float* p = a.scores + row * a.ld;
  const i32 col = 16 * w + i;
  const i32 nb = (n + kLseBatch - 1) / kLseBatch;
  TopkLaneLse st;
  st.reset();
  float cur[2 * kLseBatch], nxt[2 * kLseBatch];
  if (nb > 0) topk_lse_load_batch(cur, p, r, 0, n, a.sample_stride, col);
#pragma unroll 1
  for (i32 b = 0; b < nb; ++b) {
    if (b + 1 < nb) topk_lse_load_batch(nxt, p, r, b + 1, n, a.sample_stride, col);
    // NaN or +inf in the batch, or pushed before: the branchy push (the contract's special cells)
    bool special = st.m == pos_inf() || st.has_nan();
#pragma unroll
    for (int q = 0; q < 2 * kLseBatch; ++q) special |= !(cur[q] <= __uint_as_float(0x7f7fffffu));
    if (!special) {
#pragma unroll
      for (int q = 0; q < 2 * kLseBatch; ++q) st.push_plain(cur[q]);
    } else {
#pragma unroll
      for (int q = 0; q < 2 * kLseBatch; ++q) st.push(cur[q]);
    }
#pragma unroll
    for (int q = 0; q < 2 * kLseBatch; ++q) cur[q] = nxt[q];
  }
  st.merge_xor(1);
  st.merge_xor(2);
  st.merge_xor(4);
  // w 0..3 in order: lanes 0, 8, 16, 24
  const float m1 = __shfl_sync(0xffffffffu, st.m, 8), m2 = __shfl_sync(0xffffffffu, st.m, 16), m3 = __shfl_sync(0xffffffffu, st.m, 24);
  const double s1 = __shfl_sync(0xffffffffu, st.s, 8), s2 = __shfl_sync(0xffffffffu, st.s, 16), s3 = __shfl_sync(0xffffffffu, st.s, 24);
  if (lane == 0) {
    st.merge(m1, s1);
    st.merge(m2, s2);
    st.merge(m3, s3);
    a.lse[row * a.lse_stride] = st.value();
  }
}

}  // namespace dsa
