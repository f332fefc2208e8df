#pragma once
// The epilogue the wgmma families share: relu(acc) * w summed over a thread's heads and the
// 4-lane reduce-scatter that completes the head sum, in one fixed order, so every family that
// uses it produces the same bits for the same inputs (docs/DESIGN.md, "Contract"); and the -inf fill
// of cells no KV tile covers.
#include "dsa_types.cuh"
#include "ptx/sync.cuh"

namespace dsa {

// 2 relu(x) as x + |x|: one FADD, which shares the FMA pipe with the head sum's FFMA, where fmaxf
// is an FMNMX on the ALU pipe. Doubling is exact in binary floating point, so
// fma(2 relu(x), w, 2 s) == 2 fma(relu(x), w, s) bit for bit, and the head sum of the doubled
// terms, halved once at its end, has the bits of the fmaxf form for every finite input whose
// doubled terms stay finite and normal (|q . k| < 2^127, nonzero partial sums >= 2^-125 in
// magnitude). For a product of -inf (infinite inputs) it gives NaN where fmaxf gave 0. The form
// follows the input precision, here for every family (head_sum's kFp8; docs/DESIGN.md
// "Contract"): measured in session 10, it is 2-3 % faster for FP8 and 4-6 % slower for bf16.
template <bool kRelu2>
__device__ __forceinline__ float relu_term(float x) {
  if constexpr (kRelu2) return x + fabsf(x);
  else return fmaxf(x, 0.0f);
}

// After the reduce-scatter lane class c owns the tokens of quarter 2*(c&1) + (c>>1): tokens
// [quarter * TPW/4, (quarter + 1) * TPW/4) of its warpgroup, both accumulator rows of each.
__device__ __forceinline__ int token_quarter(int lane) { return 2 * (lane & 1) + ((lane >> 1) & 1); }

// Heads of lane class c = lane & 3 in the weight quadruple g4 of a token: element e of the
// float4 is head 16*g4 + 8*(e>>1) + 2*c + (e&1). A weight source W is any callable
// W(token_local, g4) -> float4 in that order (shared memory in generic, registers in lean).
__device__ __forceinline__ int weight_head(int g4, int e, int cls) { return 16 * g4 + 8 * (e >> 1) + 2 * cls + (e & 1); }

// acc: m64n(TPW x H) accumulators of one KV tile (rows = 64 KV rows, columns = TPW tokens x H
// heads of this warpgroup: 256, or 128 for lean with four consumers). On return part[j],
// j < 2*TPW/4, is the head sum of token slot j >> 1 for accumulator row 16 * warp + lane / 4 +
// 8 * (j & 1); at TPW 2, part[0] is that of token lane & 1, accumulator row 16 * warp +
// lane / 4 + 8 * ((lane >> 1) & 1). Either way every sum adds the same per-lane terms in the same
// tree (lanes paired by bit 0, then by bit 1), so its bits do not depend on TPW.
template <int H, int TPW, bool kFp8 = false, class W>
__device__ __forceinline__ void head_sum(const float (&acc)[TPW * H / 2], const W& w, float (&part)[2 * TPW], int lane) {
  constexpr int P = 2 * TPW;
  constexpr bool kRelu2 = kFp8;  // FP8 inputs: relu as x + |x| (relu_term)
  // (1) per thread: relu * w (kRelu2: 2 relu * w) over its H/4 heads of each token, one sum per
  // accumulator row
#pragma unroll
  for (int tl = 0; tl < TPW; ++tl) {
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int g4 = 0; g4 < H / 16; ++g4) {
      const float4 wv = w(tl, g4);
      const int i0 = 4 * (tl * (H / 8) + 2 * g4), i1 = i0 + 4;
      s0 = fmaf(relu_term<kRelu2>(acc[i0 + 0]), wv.x, s0);
      s0 = fmaf(relu_term<kRelu2>(acc[i0 + 1]), wv.y, s0);
      s1 = fmaf(relu_term<kRelu2>(acc[i0 + 2]), wv.x, s1);
      s1 = fmaf(relu_term<kRelu2>(acc[i0 + 3]), wv.y, s1);
      s0 = fmaf(relu_term<kRelu2>(acc[i1 + 0]), wv.z, s0);
      s0 = fmaf(relu_term<kRelu2>(acc[i1 + 1]), wv.w, s0);
      s1 = fmaf(relu_term<kRelu2>(acc[i1 + 2]), wv.z, s1);
      s1 = fmaf(relu_term<kRelu2>(acc[i1 + 3]), wv.w, s1);
    }
    part[2 * tl] = s0;
    part[2 * tl + 1] = s1;
  }
  // (2) reduce-scatter over the 4 lanes of a quad: halves by lane bit 0, quarters by bit 1
  const bool b0 = lane & 1, b1 = lane & 2;
#pragma unroll
  for (int j = 0; j < P / 2; ++j) {
    const float send = b0 ? part[j] : part[j + P / 2];
    const float keep = b0 ? part[j + P / 2] : part[j];
    part[j] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
  }
#pragma unroll
  for (int j = 0; j < P / 4; ++j) {
    const float send = b1 ? part[j] : part[j + P / 4];
    const float keep = b1 ? part[j + P / 4] : part[j];
    part[j] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
  }
  if constexpr (kRelu2) {
#pragma unroll
    for (int j = 0; j < P / 4; ++j) part[j] *= 0.5f;  // exact: every step above only doubled
  }
}

// The running log-sum-exp of a row's cells: (max, sum of exp(x - max)), one cell at a time
// (lse_push) or two states (lse_merge, symmetric in its two states bit for bit), in orders the
// families fix (generic's lse_finish; lean's LeanScoresEpilogue follows it).
__device__ __forceinline__ void lse_push(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  float r = 0.0f;
  if (m != neg_inf()) r += s * expf(m - mx);
  if (m2 != neg_inf()) r += s2 * expf(m2 - mx);
  m = mx;
  s = r;
}

// A row's lse from its merged state: -inf where no cell was visible.
__device__ __forceinline__ float lse_value(float m, float s) { return m == neg_inf() ? neg_inf() : m + logf(s); }

// FP8 scales of KV rows: row r's at p[r * stride] for rows [0, k_rows) (p null: no scales).
// Generic points p at the batch's (BSHD) or the packed K's (THD) row 0, lean at its item's
// first KV row. A tile's rows past k_rows (zero-filled by TMA and never stored) read nothing.
struct KScales {
  const float* p = nullptr;
  i64 stride = 1, k_rows = 0;
};

// The scales of this lane's two KV rows of a tile (kr and kr + 8; 1 where there are none),
// loaded while the tile's product runs, so that their latency is not the epilogue's.
struct KScalePair {
  float v[2] = {1.0f, 1.0f};
};
__device__ __forceinline__ KScalePair load_k_scales(const KScales& ks, i64 kr) {
  KScalePair r;
  if (ks.p != nullptr) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      if (kr + 8 * e < ks.k_rows) r.v[e] = __ldg(ks.p + (kr + 8 * e) * ks.stride);
  }
  return r;
}

// -inf over columns [c0, c1) of one row, by `n` cooperating threads: 16-byte stores where the
// address allows, single stores at the unaligned ends.
__device__ __forceinline__ void fill_neg_inf(float* row, i64 c0, i64 c1, int t, int n) {
  if (c1 <= c0) return;
  const float ninf = neg_inf();
  const u64 addr = reinterpret_cast<u64>(row + c0);
  i64 head = static_cast<i64>(((16 - (addr & 15)) & 15) >> 2);
  if (head > c1 - c0) head = c1 - c0;
  if (t < head) store_streaming(row + c0 + t, ninf);
  const i64 v0 = c0 + head;
  const i64 nvec = (c1 - v0) >> 2;
#pragma unroll 1
  for (i64 v = t; v < nvec; v += n) store_streaming4(row + v0 + 4 * v, ninf, ninf, ninf, ninf);
  const i64 tail0 = v0 + 4 * nvec;
  if (t < c1 - tail0) store_streaming(row + tail0 + t, ninf);
}

}  // namespace dsa
