#pragma once
// Generic family, scheduler side: the static persistent tile order, the per-tile row windows
// (TileInfo) and the helper warps that publish them with the tile's weights and write -inf over
// every cell no KV tile of the q-tile covers.
#include "dsa_args.cuh"
#include "dsa_window.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "sm90_epilogue.cuh"
#include "sm90_mainloop.cuh"

namespace dsa {

template <class Cfg>
struct GenericTraits {
  static constexpr int kHeads = Cfg::kHeads;
  static constexpr int kHeadDim = 128;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kPackedRows = dsa::kPackedRows;      // wgmma N per consumer warpgroup
  static constexpr int kTokensPerConsumer = kPackedRows / kHeads;
  static constexpr int kTokensPerTile = kConsumers * kTokensPerConsumer;
  static constexpr int kKvRows = dsa::kKvRows;              // wgmma M: one KV tile
  static constexpr int kStages = Cfg::kKvStages;
  static constexpr bool kFp8 = InputOf<Cfg>::value == kInputE4m3;  // q and k E4M3 (else bf16)
  static constexpr int kQBytes = InputTiles<kFp8>::kQBytes;    // 64 KB per consumer (FP8: 32 KB)
  static constexpr int kKvBytes = InputTiles<kFp8>::kKvBytes;  // 16 KB per stage (FP8: 8 KB)
  // Weights as fp32, permuted so that lane class c = lane & 3 reads its H/4 weights per token as
  // float4s: [c][token][h/8][h&1]; classes are padded by 4 floats so the four classes of a warp
  // hit different banks.
  static constexpr int kWPerClass = kTokensPerTile * kHeads / 4;
  static constexpr int kWClassStride = kWPerClass + 4;
  static constexpr int kWFloats = 4 * kWClassStride;
  static constexpr int kHelperThreads = 96;                  // warps 1..3 of the producer warpgroup

  static_assert(kHeads == 16 || kHeads == 32 || kHeads == 64, "sm90_indexer_generic: kHeads must be 16, 32 or 64");
  static_assert(kStages >= 2 && kStages <= 8, "sm90_indexer_generic: kKvStages must be in [2, 8]");
  static_assert(kTokensPerTile <= 32, "sm90_indexer_generic: one lane of a helper warp per token");
};

struct TileRow {
  i64 lo, hi;      // visible absolute K rows
  i64 base;        // absolute K row of column 0
  i64 out_off;     // offset of the row in the score matrix
  i64 lse_off;
  i32 valid;
  i32 pad_;
};

struct TileInfo {
  i64 kv_begin;    // absolute K row of the first KV tile (a multiple of 64)
  i64 full_lo;     // KV tiles inside [full_lo, full_hi) are visible to every row: no mask
  i64 full_hi;
  i32 n_kv;        // KV tiles of this q-tile (0: nothing to compute, rows are all -inf)
  i32 batch;       // BSHD batch (TMA coordinate)
  i32 tok0;        // first token: in the batch (BSHD) or packed row (THD)
  i32 pad_;
  TileRow rows[32];
};

// Linear id L of the static grid runs tile num_tiles - 1 - L (reversed LPT: the last tiles of
// each batch have the longest causal windows). BSHD numbers tiles t = tile_in_batch * B + b.
template <class Cfg>
__device__ __forceinline__ void decode_tile(const DsaArgs& a, const TileGrid& g, i64 linear, i32& batch, i32& tok0) {
  const i64 t = g.num_tiles - 1 - linear;
  if (Cfg::kLayout == kLayoutBshd) {
    batch = static_cast<i32>(t % a.batch);
    tok0 = static_cast<i32>((t / a.batch) * GenericTraits<Cfg>::kTokensPerTile);
  } else {
    batch = 0;
    tok0 = static_cast<i32>(t * GenericTraits<Cfg>::kTokensPerTile);
  }
}

__device__ __forceinline__ i64 warp_min64(i64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) { i64 x = __shfl_xor_sync(0xffffffffu, v, o); v = x < v ? x : v; }
  return v;
}
__device__ __forceinline__ i64 warp_max64(i64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) { i64 x = __shfl_xor_sync(0xffffffffu, v, o); v = x > v ? x : v; }
  return v;
}

// One helper warp: lane r computes row r of the tile; the warp reduces the union (the KV range
// every consumer sweeps) and the intersection (where no mask is needed).
template <class Cfg>
__device__ __forceinline__ void compute_tile_info(const DsaArgs& a, TileInfo& ti, i32 batch, i32 tok0, int lane) {
  using T = GenericTraits<Cfg>;
  constexpr i64 kMax = 0x7fffffffffffffffll, kMin = -kMax - 1;
  RowWindow w;
  w.valid = 0;
  w.lo = w.hi = w.base = w.out_off = w.lse_off = 0;
  if (lane < T::kTokensPerTile) {
    if (Cfg::kLayout == kLayoutBshd) w = row_window<kLayoutBshd, WindowStartOf<Cfg>::value>(a, batch, tok0 + lane);
    else w = row_window<Cfg::kLayout>(a, static_cast<i64>(tok0) + lane, 0);
    TileRow& r = ti.rows[lane];
    r.lo = w.lo;
    r.hi = w.hi;
    r.base = w.base;
    r.out_off = w.out_off;
    r.lse_off = w.lse_off;
    r.valid = w.valid;
  }
  const bool in_tile = lane < T::kTokensPerTile;
  const bool live = in_tile && w.valid && !w.empty();
  const i64 u_lo = warp_min64(live ? w.lo : kMax);
  const i64 u_hi = warp_max64(live ? w.hi : kMin);
  const i64 i_lo = warp_max64(in_tile ? (live ? w.lo : kMax) : kMin);
  const i64 i_hi = warp_min64(in_tile ? (live ? w.hi : kMin) : kMax);
  if (lane == 0) {
    if (u_lo >= u_hi) {
      ti.n_kv = 0;
      ti.kv_begin = 0;
    } else {
      const i64 begin = (u_lo / T::kKvRows) * T::kKvRows;
      ti.kv_begin = begin;
      ti.n_kv = static_cast<i32>((u_hi - begin + T::kKvRows - 1) / T::kKvRows);
    }
    ti.full_lo = i_lo;
    ti.full_hi = i_hi;
    ti.batch = batch;
    ti.tok0 = tok0;
  }
}

// All helpers: the tile's weights as fp32 in the permuted layout, 0 for rows past the end.
// FP8 (kQScaled): the row's q scale folds into its weight (ReLU commutes with a positive scale),
// one fp32 product per (token, head), so the head sum is w[h] * q_scale[h] * relu(q8 . k8);
// q_scale 0: not given.
template <class Cfg, bool kQScaled = false>
__device__ __forceinline__ void load_tile_weights(const DsaArgs& a, float* w_s, i32 batch, i32 tok0, int ht, u64 q_scale = 0,
                                                  const i64* q_scale_stride = nullptr) {
  using T = GenericTraits<Cfg>;
  constexpr int H = T::kHeads;
#pragma unroll 1
  for (int e = ht; e < T::kTokensPerTile * H; e += T::kHelperThreads) {
    const int r = e / H, h = e % H;
    const i64 tok = static_cast<i64>(tok0) + r;
    float v = 0.0f;
    const bool valid = (Cfg::kLayout == kLayoutBshd) ? tok < a.s_q : tok < a.t_q;
    if (valid) {
      const i64 off = (Cfg::kLayout == kLayoutBshd ? batch * a.w_stride[0] : 0) + tok * a.w_stride[1] + h * a.w_stride[2];
      if (Cfg::kWeightsF32) v = __ldg(reinterpret_cast<const float*>(a.w) + off);
      else v = bf16_bits_to_float(__ldg(reinterpret_cast<const u16*>(a.w) + off));
      if constexpr (kQScaled) {
        if (q_scale != 0) {
          const i64 so = (Cfg::kLayout == kLayoutBshd ? batch * q_scale_stride[0] : 0) + tok * q_scale_stride[1] +
                         h * q_scale_stride[2];
          v *= __ldg(reinterpret_cast<const float*>(q_scale) + so);
        }
      }
    }
    const int c = (h & 7) >> 1;
    w_s[c * T::kWClassStride + r * (H / 4) + (h >> 3) * 2 + (h & 1)] = v;
  }
}

// Cells of one row that no KV tile of the q-tile writes: outside [kv_begin, kv_begin + 64 n_kv)
// mapped to columns. The consumers write every cell inside (visible or -inf), so each cell is
// written exactly once.
template <class Cfg>
__device__ __forceinline__ void fill_uncovered(const DsaArgs& a, const TileInfo& ti, int ht) {
  using T = GenericTraits<Cfg>;
  float* out = reinterpret_cast<float*>(a.out);
#pragma unroll 1
  for (int r = 0; r < T::kTokensPerTile; ++r) {
    const TileRow& row = ti.rows[r];
    if (!row.valid) continue;
    i64 e0 = a.out_cols, e1 = a.out_cols;
    if (ti.n_kv > 0) {
      e0 = clamp64(ti.kv_begin - row.base, 0, a.out_cols);
      e1 = clamp64(ti.kv_begin + static_cast<i64>(ti.n_kv) * T::kKvRows - row.base, 0, a.out_cols);
    }
    float* p = out + row.out_off;
    fill_neg_inf(p, 0, e0, ht, T::kHelperThreads);
    fill_neg_inf(p, e1, a.out_cols, ht, T::kHelperThreads);
  }
}

}  // namespace dsa
