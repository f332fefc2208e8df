#pragma once
// sm90_indexer_generic: the wgmma + TMA kernel that serves every call (BSHD and THD, H 16/32/64,
// any S_q, S_k, optional LSE). Compiled once per (H, W dtype, LSE, layout, KV stages); every
// shape, stride, ratio and sm_scale is a launch argument.
//
// CTA = 3 warpgroups, one CTA per SM, static persistent grid (scheduler file):
//   WG0 warp 0   producer: TMA loads of Q (once per q-tile) and of the KV ring.
//   WG0 warps 1-3 helpers: per-tile row windows and weights into shared memory, and the -inf
//                 writes of every cell outside the tile's KV range.
//   WG1, WG2     consumers: each owns 256 packed (token, head) rows of the q-tile and runs
//                 m64n256k16 wgmma with the 64-row KV tile as A and its Q rows as B, then the
//                 epilogue in registers. The two consumers share every KV tile (each KV byte
//                 feeds 2 x 64 x 256 x 2 = 64 KFLOP per row) and alternate on the tensor cores
//                 through two named barriers, so one's epilogue overlaps the other's wgmma.
#include "dsa_args.cuh"
#include "ptx/gmma_desc.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "sm90_indexer_generic_epilogue.cuh"
#include "sm90_indexer_generic_scheduler.cuh"
#include "sm90_mainloop.cuh"

namespace dsa {

template <class Cfg>
struct GenericSmem {
  using T = GenericTraits<Cfg>;
  static constexpr int kOffQ = 0;                                     // [consumer][D box][256 rows][128 B]
  static constexpr int kOffKv = kOffQ + T::kConsumers * T::kQBytes;   // [stage][D half][64 rows][128 B]
  static constexpr int kOffW = kOffKv + T::kStages * T::kKvBytes;     // [2][kWFloats] fp32
  static constexpr int kOffInfo = kOffW + 2 * T::kWFloats * 4;        // [2] TileInfo
  static constexpr int kOffLse = kOffInfo + 2 * static_cast<int>(sizeof(TileInfo));  // [consumer][4][TPW][2]
  static constexpr int kOffBar = kOffLse + T::kConsumers * 4 * T::kTokensPerConsumer * 2 * 4;
  static constexpr int kNumBars = 2 * 2 + 2 * T::kStages + 2 * 2;     // q full/empty, kv full/empty, w full/empty
  static constexpr int kBytes = kOffBar + kNumBars * 8;
  static constexpr int kAlloc = kBytes + 1024;                        // slack to 1024-align the base
  static_assert(kOffKv % 1024 == 0 && kOffW % 16 == 0 && kOffInfo % 16 == 0 && kOffBar % 8 == 0,
                "sm90_indexer_generic: shared-memory regions misaligned");
};

// Named barrier ids (0 is __syncthreads).
constexpr u32 kBarPingPong0 = 1;  // consumer 0 may issue its wgmma (arrived by consumer 1)
constexpr u32 kBarPingPong1 = 2;  // consumer 1 may issue its wgmma (arrived by consumer 0)
constexpr u32 kBarHelpers = 3;    // the 96 helper threads
constexpr u32 kBarConsumer0 = 4;  // one consumer warpgroup (4 and 5)

template <class Cfg>
__global__ void __launch_bounds__(GenericTraits<Cfg>::kThreads, 1)
    sm90_indexer_generic(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const DsaArgs a,
                         const TileGrid grid, const DsaScales sc) {
  using T = GenericTraits<Cfg>;
  using L = GenericSmem<Cfg>;
  extern __shared__ u8 smem_raw[];
  u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~static_cast<u64>(1023));
  float* w_s = reinterpret_cast<float*>(smem + L::kOffW);
  TileInfo* info = reinterpret_cast<TileInfo*>(smem + L::kOffInfo);
  float* lse_scratch = reinterpret_cast<float*>(smem + L::kOffLse);
  u64* bars = reinterpret_cast<u64*>(smem + L::kOffBar);
  u64* q_full = bars;
  u64* q_empty = bars + 2;
  u64* kv_full = bars + 4;
  u64* kv_empty = kv_full + T::kStages;
  u64* w_full = kv_empty + T::kStages;
  u64* w_empty = w_full + 2;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  if (threadIdx.x == 0) {
    for (int g = 0; g < 2; ++g) {
      mbarrier_init(&q_full[g], 1);
      mbarrier_init(&q_empty[g], 4);                          // lane 0 of each consumer warp
      mbarrier_init(&w_full[g], T::kHelperThreads);           // every helper thread
      mbarrier_init(&w_empty[g], 128 * T::kConsumers + 1);    // every consumer thread + producer
    }
    for (int s = 0; s < T::kStages; ++s) {
      mbarrier_init(&kv_full[s], 1);
      mbarrier_init(&kv_empty[s], 4 * T::kConsumers);         // lane 0 of each consumer warp
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (warp == 0) {
      // ---------------- producer ----------------
      if (lane != 0) return;
      tma_prefetch_desc(&q_map);
      tma_prefetch_desc(&k_map);
      u32 stage = 0, phase = 0, q_uses = 0;
      i64 iter = 0;
      for (i64 lin = blockIdx.x; lin < grid.num_tiles; lin += gridDim.x, ++iter) {
        const int wb = static_cast<int>(iter & 1);
        mbarrier_wait(&w_full[wb], static_cast<u32>((iter >> 1) & 1));
        const i32 n_kv = info[wb].n_kv, batch = info[wb].batch, tok0 = info[wb].tok0;
        const i64 kv_begin = info[wb].kv_begin;
        mbarrier_arrive(&w_empty[wb]);
        if (n_kv == 0) continue;
        // The first KV tiles go out before Q so that they are in flight while the consumers
        // finish the previous q-tile (Q cannot be double-buffered: it is 128 KB).
        const i32 pre = n_kv < T::kStages ? n_kv : T::kStages;
        for (i32 it = 0; it < pre; ++it) load_kv_tile<T::kStages, Cfg::kLayout == kLayoutBshd, T::kFp8>(k_map, smem + L::kOffKv, kv_full, kv_empty, stage, phase, kv_begin, it, batch);
        for (int g = 0; g < T::kConsumers; ++g) {
          mbarrier_wait(&q_empty[g], (q_uses & 1) ^ 1);
          mbarrier_arrive_expect_tx(&q_full[g], T::kQBytes);
          load_q_rows<Cfg::kLayout == kLayoutBshd, T::kFp8>(q_map, smem + L::kOffQ + g * T::kQBytes, &q_full[g],
                                                   tok0 + g * T::kTokensPerConsumer, batch);
        }
        ++q_uses;
        for (i32 it = pre; it < n_kv; ++it) load_kv_tile<T::kStages, Cfg::kLayout == kLayoutBshd, T::kFp8>(k_map, smem + L::kOffKv, kv_full, kv_empty, stage, phase, kv_begin, it, batch);
      }
      return;
    }
    // ---------------- helpers (warps 1..3) ----------------
    const int ht = threadIdx.x - 32;
    i64 iter = 0;
    for (i64 lin = blockIdx.x; lin < grid.num_tiles; lin += gridDim.x, ++iter) {
      const int wb = static_cast<int>(iter & 1);
      mbarrier_wait(&w_empty[wb], static_cast<u32>(((iter >> 1) & 1) ^ 1));
      // every helper has finished reading this buffer's previous tile (its -inf fill)
      named_barrier_sync(kBarHelpers, T::kHelperThreads);
      i32 batch, tok0;
      decode_tile<Cfg>(a, grid, lin, batch, tok0);
      if (warp == 1) compute_tile_info<Cfg>(a, info[wb], batch, tok0, lane);
      if constexpr (T::kFp8) load_tile_weights<Cfg, true>(a, w_s + wb * T::kWFloats, batch, tok0, ht, sc.q_scale, sc.q_scale_stride);
      else load_tile_weights<Cfg>(a, w_s + wb * T::kWFloats, batch, tok0, ht);
      named_barrier_sync(kBarHelpers, T::kHelperThreads);
      mbarrier_arrive(&w_full[wb]);
      fill_uncovered<Cfg>(a, info[wb], ht);
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<232>();
  const int cg = wg - 1;                 // consumer index 0/1
  const int warp_in_wg = warp % 4;
  const u32 my_bar = cg == 0 ? kBarPingPong0 : kBarPingPong1;
  const u32 other_bar = cg == 0 ? kBarPingPong1 : kBarPingPong0;
  if (cg == 1) named_barrier_arrive(kBarPingPong0, 256);  // consumer 0 issues first
  const u32 q_base = warp_uniform(smem_addr(smem + L::kOffQ + cg * T::kQBytes));
  const u32 kv_base0 = smem_addr(smem + L::kOffKv);
  float* out = reinterpret_cast<float*>(a.out);
  const int quarter = token_quarter(lane);
  constexpr int S = EpilogueRows<Cfg>::kSlots;

  float acc[128];
  u32 stage = 0, phase = 0, q_uses = 0;
  i64 iter = 0;
  for (i64 lin = blockIdx.x; lin < grid.num_tiles; lin += gridDim.x, ++iter) {
    const int wb = static_cast<int>(iter & 1);
    mbarrier_wait(&w_full[wb], static_cast<u32>((iter >> 1) & 1));
    const TileInfo& ti = info[wb];
    // FP8: the KV rows' scales of this q-tile's batch (BSHD) or of the packed K (THD); none: 1.
    KScales k_scale;
    if constexpr (T::kFp8) if (sc.k_scale != 0) {
      k_scale.p = reinterpret_cast<const float*>(sc.k_scale) + (Cfg::kLayout == kLayoutBshd ? ti.batch * sc.k_scale_stride[0] : 0);
      k_scale.stride = sc.k_scale_stride[1];
      k_scale.k_rows = Cfg::kLayout == kLayoutBshd ? a.s_k : a.t_k;
    }
    const i32 n_kv = ti.n_kv;
    const i64 kv_begin = ti.kv_begin, full_lo = ti.full_lo, full_hi = ti.full_hi;
    EpilogueRows<Cfg> rows;
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const TileRow& r = ti.rows[cg * T::kTokensPerConsumer + quarter * S + s];
      rows.lo[s] = r.lo;
      rows.hi[s] = r.hi;
      rows.col0[s] = r.base;
      rows.out_off[s] = r.out_off;
      rows.valid[s] = r.valid;
      rows.lse_m[s] = neg_inf();
      rows.lse_s[s] = 0.0f;
    }
    const u32 w_cls = smem_addr(w_s + wb * T::kWFloats + (lane & 3) * T::kWClassStride +
                                cg * T::kTokensPerConsumer * (T::kHeads / 4));
    if (n_kv > 0) {
      mbarrier_wait(&q_full[cg], q_uses & 1);
      for (i32 it = 0; it < n_kv; ++it) {
        mbarrier_wait(&kv_full[stage], phase);
        named_barrier_sync(my_bar, 256);
        const u32 kv_base = kv_base0 + stage * T::kKvBytes;
        mma_tile<T::kFp8>(acc, warp_uniform(kv_base), q_base);
        named_barrier_arrive(other_bar, 256);
        KScalePair ksc;
        if constexpr (T::kFp8)
          ksc = load_k_scales(k_scale, kv_begin + static_cast<i64>(it) * T::kKvRows + 16 * warp_in_wg + (lane >> 2));
        wgmma_wait_group<0>();
        wgmma_fence_operands(acc);
        if (lane == 0) mbarrier_arrive(&kv_empty[stage]);
        if (++stage == T::kStages) {
          stage = 0;
          phase ^= 1;
        }
        const i64 kabs0 = kv_begin + static_cast<i64>(it) * T::kKvRows;
        const bool masked = !(kabs0 >= full_lo && kabs0 + T::kKvRows <= full_hi);
        if constexpr (T::kFp8)
          epilogue_tile<Cfg, true>(acc, w_cls, rows, kabs0, masked, a.sm_scale, out, a.out_cols, warp_in_wg, lane, ksc);
        else
          epilogue_tile<Cfg>(acc, w_cls, rows, kabs0, masked, a.sm_scale, out, a.out_cols, warp_in_wg, lane);
      }
      if (lane == 0) mbarrier_arrive(&q_empty[cg]);
      ++q_uses;
    }
    if (Cfg::kWithLse)
      lse_finish<Cfg>(rows, lse_scratch + cg * 4 * T::kTokensPerConsumer * 2, ti, cg, warp_in_wg, lane,
                      kBarConsumer0 + cg, reinterpret_cast<float*>(a.lse));
    mbarrier_arrive(&w_empty[wb]);
  }
  if (cg == 0) named_barrier_sync(kBarPingPong0, 256);  // consume consumer 1's last arrival
}

}  // namespace dsa
