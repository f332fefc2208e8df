#pragma once
// Generic family, epilogue side: the shared head sum (sm90_epilogue.cuh), sm_scale, the per-element mask (boundary tiles
// only), the stores, and the running log-sum-exp. The order of every sum is fixed, so results
// are bitwise reproducible.
#include "dsa_args.cuh"
#include "ptx/sync.cuh"
#include "sm90_epilogue.cuh"
#include "sm90_indexer_generic_scheduler.cuh"

namespace dsa {

// Weights of a lane class read from the permuted shared-memory layout of load_tile_weights.
template <int H>
struct SmemWeights {
  u32 w_cls;  // shared address of this lane class's weights of the warpgroup's tokens
  __device__ __forceinline__ float4 operator()(int tl, int g4) const { return ld_shared_f32x4(w_cls + (tl * (H / 4) + 4 * g4) * 4); }
};

template <class Cfg>
struct EpilogueRows {
  static constexpr int kSlots = GenericTraits<Cfg>::kTokensPerConsumer / 4;
  i64 lo[kSlots], hi[kSlots], col0[kSlots], out_off[kSlots];  // col0: base of the row
  i32 valid[kSlots];
  float lse_m[kSlots], lse_s[kSlots];
};

// w_cls: shared address of this lane class's weights of the warpgroup's tokens.
// acc: the m64n256 accumulators of one KV tile (rows = 64 KV rows, columns = this warpgroup's
// 256 packed (token, head) rows). kabs0: absolute K row of the tile's row 0.
// kKScaled (FP8): a cell is sm_scale * (k_scale * head sum), in that fixed order; ksc holds the
// k scales of this lane's rows (load_k_scales).
template <class Cfg, bool kKScaled = false>
__device__ __forceinline__ void epilogue_tile(const float (&acc)[128], u32 w_cls, EpilogueRows<Cfg>& rows,
                                              i64 kabs0, bool masked, float sm_scale, float* out, i64 out_cols,
                                              int warp_in_wg, int lane, KScalePair ksc = KScalePair{}) {
  using T = GenericTraits<Cfg>;
  constexpr int H = T::kHeads, TPW = T::kTokensPerConsumer, P = 2 * TPW;
  float part[P];
  head_sum<H, TPW, T::kFp8>(acc, SmemWeights<H>{w_cls}, part, lane);
  // (3) part[j]: token slot j >> 1, accumulator row 16 * warp + lane / 4 + 8 * (j & 1)
  const i64 kr = kabs0 + 16 * warp_in_wg + (lane >> 2);
#pragma unroll
  for (int j = 0; j < P / 4; ++j) {
    const int slot = j >> 1;
    const i64 kabs = kr + 8 * (j & 1);
    float v;
    if constexpr (kKScaled) v = (part[j] * ksc.v[j & 1]) * sm_scale;
    else v = part[j] * sm_scale;
    const i64 col = kabs - rows.col0[slot];
    if (masked) {
      if (!rows.valid[slot] || col < 0 || col >= out_cols) continue;
      if (kabs < rows.lo[slot] || kabs >= rows.hi[slot]) v = neg_inf();
      else if (Cfg::kWithLse) lse_push(rows.lse_m[slot], rows.lse_s[slot], v);
    } else if (Cfg::kWithLse) {
      lse_push(rows.lse_m[slot], rows.lse_s[slot], v);
    }
    store_streaming(out + rows.out_off[slot] + col, v);
  }
}

// End of a q-tile: combine the running (max, sum) of the 32 KV-row owners of each token (8
// quads x 4 warps) in a fixed order and write lse. scratch: 4 warps x TPW x 2 floats.
template <class Cfg>
__device__ __forceinline__ void lse_finish(EpilogueRows<Cfg>& rows, float* scratch, const TileInfo& ti, int wg,
                                           int warp_in_wg, int lane, u32 bar_id, float* lse) {
  using T = GenericTraits<Cfg>;
  constexpr int TPW = T::kTokensPerConsumer, S = EpilogueRows<Cfg>::kSlots;
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, rows.lse_m[s], o);
      const float s2 = __shfl_xor_sync(0xffffffffu, rows.lse_s[s], o);
      lse_merge(rows.lse_m[s], rows.lse_s[s], m2, s2);
    }
  }
  if (lane < 4) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int tl = token_quarter(lane) * S + s;
      scratch[(warp_in_wg * TPW + tl) * 2 + 0] = rows.lse_m[s];
      scratch[(warp_in_wg * TPW + tl) * 2 + 1] = rows.lse_s[s];
    }
  }
  named_barrier_sync(bar_id, 128);
  if (warp_in_wg == 0 && lane < TPW) {
    float m = scratch[lane * 2 + 0], s = scratch[lane * 2 + 1];
#pragma unroll
    for (int w = 1; w < 4; ++w) lse_merge(m, s, scratch[(w * TPW + lane) * 2 + 0], scratch[(w * TPW + lane) * 2 + 1]);
    const TileRow& r = ti.rows[wg * TPW + lane];
    if (r.valid) lse[r.lse_off] = lse_value(m, s);
  }
  named_barrier_sync(bar_id, 128);
}

}  // namespace dsa
