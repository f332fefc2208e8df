#pragma once
// sm90_indexer_reference: the plain-CUDA oracle. One thread block per (row, 128 columns), one
// thread per output cell, fp32 math on bf16 inputs in a fixed order (d ascending inside each
// head, heads ascending). It implements the whole contract (every layout, offsets, explicit
// windows, sm_scale, LSE) and is the GPU-side oracle for large shapes; it has no speed target.
//
// Config (emitted by codegen): kHeads, kHeadDim, kWeightsF32, kWithLse, kLayout.
#include "dsa_args.cuh"
#include "dsa_window.cuh"
#include "ptx/sync.cuh"

namespace dsa {

constexpr int kRefThreads = 128;
constexpr int kRefLseThreads = 256;

template <class Cfg>
__device__ __forceinline__ RowWindow reference_row(const DsaArgs& a, i64 row) {
  if (Cfg::kLayout == kLayoutBshd) return row_window<kLayoutBshd, WindowStartOf<Cfg>::value>(a, row / a.s_q, row % a.s_q);
  return row_window<Cfg::kLayout>(a, row, 0);
}

template <class Cfg>
__device__ __forceinline__ float load_weight(const DsaArgs& a, i64 off) {
  if (Cfg::kWeightsF32) return __ldg(reinterpret_cast<const float*>(a.w) + off);
  return bf16_bits_to_float(__ldg(reinterpret_cast<const u16*>(a.w) + off));
}

// grid = (rows, ceil(out_cols / 128)), block = 128.
template <class Cfg>
__global__ void __launch_bounds__(kRefThreads) sm90_indexer_reference_scores(const DsaArgs a) {
  static_assert(Cfg::kHeadDim == 128, "sm90_indexer_reference: kHeadDim must be 128");
  static_assert(Cfg::kHeads == 16 || Cfg::kHeads == 32 || Cfg::kHeads == 64,
                "sm90_indexer_reference: kHeads must be 16, 32 or 64");
  constexpr int H = Cfg::kHeads, D = Cfg::kHeadDim;
  __shared__ float q_s[H * D];
  __shared__ float w_s[H];

  const i64 row = blockIdx.x;
  const RowWindow win = reference_row<Cfg>(a, row);
  const i64 tok = (Cfg::kLayout == kLayoutBshd) ? row % a.s_q : row;
  const i64 bat = (Cfg::kLayout == kLayoutBshd) ? row / a.s_q : 0;

  const u16* qrow = reinterpret_cast<const u16*>(a.q) + bat * a.q_stride[0] + tok * a.q_stride[1];
  for (int e = threadIdx.x; e < H * D; e += kRefThreads) {
    const int h = e / D, d = e % D;
    q_s[e] = bf16_bits_to_float(__ldg(qrow + h * a.q_stride[2] + d));
  }
  const i64 wrow = bat * a.w_stride[0] + tok * a.w_stride[1];
  for (int h = threadIdx.x; h < H; h += kRefThreads) w_s[h] = load_weight<Cfg>(a, wrow + h * a.w_stride[2]);
  __syncthreads();

  const i64 col = static_cast<i64>(blockIdx.y) * kRefThreads + threadIdx.x;
  if (!win.valid || col >= a.out_cols) return;
  const i64 kabs = win.base + col;
  float score = neg_inf();
  if (kabs >= win.lo && kabs < win.hi) {
    const i64 krow_index = (Cfg::kLayout == kLayoutBshd) ? (bat * a.k_stride[0] + kabs * a.k_stride[1]) : (kabs * a.k_stride[1]);
    const uint4* krow = reinterpret_cast<const uint4*>(reinterpret_cast<const u16*>(a.k) + krow_index);
    u32 kp[D / 2];
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      uint4 v = __ldg(krow + c);
      kp[4 * c + 0] = v.x;
      kp[4 * c + 1] = v.y;
      kp[4 * c + 2] = v.z;
      kp[4 * c + 3] = v.w;
    }
    float acc = 0.0f;
    for (int h = 0; h < H; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int d2 = 0; d2 < D / 2; ++d2) {
        dot = fmaf(q_s[h * D + 2 * d2], __uint_as_float(kp[d2] << 16), dot);
        dot = fmaf(q_s[h * D + 2 * d2 + 1], __uint_as_float(kp[d2] & 0xffff0000u), dot);
      }
      acc = fmaf(fmaxf(dot, 0.0f), w_s[h], acc);
    }
    score = acc * a.sm_scale;
  }
  reinterpret_cast<float*>(a.out)[win.out_off + col] = score;
}

// grid = rows, block = 256: lse over the scores the first kernel stored, in a fixed order.
template <class Cfg>
__global__ void __launch_bounds__(kRefLseThreads) sm90_indexer_reference_lse(const DsaArgs a) {
  __shared__ float red[kRefLseThreads];
  const i64 row = blockIdx.x;
  const RowWindow win = reference_row<Cfg>(a, row);
  if (!win.valid) return;
  const float* srow = reinterpret_cast<const float*>(a.out) + win.out_off;
  const i64 c0 = win.lo - win.base, c1 = win.hi - win.base;
  float m = neg_inf();
  for (i64 c = c0 + threadIdx.x; c < c1; c += kRefLseThreads) m = fmaxf(m, srow[c]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = kRefLseThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float mx = red[0];
  __syncthreads();
  float sum = 0.0f;
  if (mx != neg_inf())
    for (i64 c = c0 + threadIdx.x; c < c1; c += kRefLseThreads) sum += expf(srow[c] - mx);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kRefLseThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    reinterpret_cast<float*>(a.lse)[win.lse_off] = (mx == neg_inf()) ? neg_inf() : mx + logf(red[0]);
}

}  // namespace dsa
