#pragma once
// sm90_indexer_lean: the fast path for H 64, D 128, bf16 Q/K, bf16/fp32 W, fp32 scores, BSHD,
// compiled per shape key: S_q and S_k are compile-time constants (every stride, window bound
// and tile count follows), sm_scale == 1 compiles the multiply out. The batch is a launch
// argument: one kernel serves every B and runs all of them in one persistent launch over
// B x q-tiles work items, in the order the host planner emitted into the source (Sched).
//
// CTA = 3 warpgroups, one CTA per SM:
//   WG0 warp 0    producer: per work item, the KV tiles, each consumer's Q rows (TMA, lane 0)
//                 and its weights (the whole warp).
//   WG0 warps 1-3 fillers: -inf over the columns past the item's KV range. They need nothing
//                 from the other roles: every role derives the item's windows from the
//                 compile-time shape, so no per-tile information is exchanged.
//   WG1, WG2      consumers, as in the generic family (shared main loop and head sum, so the
//                 results are bitwise equal): m64n256k16 over 4 tokens x 64 heads each, sharing
//                 every KV tile, ping-ponging on the tensor cores. bf16 weights of an item stay
//                 in registers for all its KV tiles, and Q is then released right after the
//                 last product so the next item's Q loads under the last epilogue.
#include "dsa_types.cuh"
#include "dsa_window.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "sm90_epilogue.cuh"
#include "sm90_indexer_lean_args.cuh"
#include "sm90_mainloop.cuh"

namespace dsa {

template <class Cfg>
struct LeanTraits {
  static constexpr int kHeads = 64;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kTokensPerConsumer = kPackedRows / kHeads;           // 4
  static constexpr int kTokensPerTile = kConsumers * kTokensPerConsumer;    // 8
  static constexpr int kStages = Cfg::kKvStages;
  static constexpr i64 kSeqQ = Cfg::kSeqQ;
  static constexpr i64 kSeqK = Cfg::kSeqK;
  static constexpr i64 kTilesPerBatch = kSeqQ / kTokensPerTile;
  static constexpr int kWBytes = kTokensPerConsumer * kHeads * (Cfg::kWeightsF32 ? 4 : 2);  // per consumer
  static constexpr int kFillThreads = 96;                                  // warps 1..3
  static_assert(Cfg::kHeadDim == 128, "sm90_indexer_lean: kHeadDim must be 128");
  static_assert(kSeqQ >= kTokensPerTile && kSeqQ % kTokensPerTile == 0,
                "sm90_indexer_lean: kSeqQ must be a positive multiple of the 8-token q-tile");
  static_assert(kSeqK >= 1, "sm90_indexer_lean: kSeqK must be >= 1");
  static_assert(kStages >= 2 && kStages <= 8, "sm90_indexer_lean: kKvStages must be in [2, 8]");
};

template <class Cfg>
struct LeanSmem {
  using T = LeanTraits<Cfg>;
  static constexpr int kOffQ = 0;                                   // [consumer][D half][256 rows][128 B]
  static constexpr int kOffKv = kOffQ + T::kConsumers * kQBytes;    // [stage][D half][64 rows][128 B]
  static constexpr int kOffW = kOffKv + T::kStages * kKvBytes;      // [consumer][4 tokens][64 heads]
  static constexpr int kOffBar = kOffW + T::kConsumers * T::kWBytes;
  static constexpr int kNumBars = 3 * T::kConsumers + 2 * T::kStages;  // q full/empty, w full, kv full/empty
  static constexpr int kBytes = kOffBar + kNumBars * 8;
  static constexpr int kAlloc = kBytes + 1024;                      // slack to 1024-align the base
  static_assert(kOffKv % 1024 == 0 && kOffW % 16 == 0 && kOffBar % 8 == 0,
                "sm90_indexer_lean: shared-memory regions misaligned");
};

// The static schedule as an interchangeable component: CTA `cta` of `grid` walks rounds k; its
// item of round k is position k*G + c (reversed on odd rounds for the snake), and position p is
// q-tile Sched::tile(p / B) of batch p % B, so a larger B scales the planner's order without
// changing it.
template <class Sched>
struct LeanWork {
  i64 num_items, batch;
  i32 cta, grid;
  __device__ __forceinline__ i64 rounds() const { return (num_items + grid - 1) / grid; }
  __device__ __forceinline__ bool item(i64 k, i32& tile, i32& b) const {
    const i64 slot = (Sched::kPolicy == kLeanSnake && (k & 1)) ? grid - 1 - cta : cta;
    const i64 pos = k * grid + slot;
    if (pos >= num_items) return false;
    b = static_cast<i32>(pos % batch);
    i64 r = pos / batch;
#pragma unroll 1
    for (int i = 0; i < Sched::kNumRuns; ++i) {
      const LeanRun run = Sched::run(i);
      if (r < run.count) {
        tile = run.first + run.step * static_cast<i32>(r);
        return true;
      }
      r -= run.count;
    }
    return false;
  }
};

// The windows of one work item: row i of batch b sees key rows [0, causal_limit(i)).
template <class Cfg>
struct LeanItem {
  using T = LeanTraits<Cfg>;
  i64 offset;  // q_causal_offsets[b] (0 when not given)
  i64 ratio;
  __device__ __forceinline__ i64 hi(i64 i) const { return causal_limit(offset, i, ratio, T::kSeqK); }
  // KV tiles the item's rows [tok0, tok0 + 8) need (the last row's window is the widest).
  __device__ __forceinline__ i32 n_kv(i32 tok0) const {
    return static_cast<i32>((hi(tok0 + T::kTokensPerTile - 1) + kKvRows - 1) / kKvRows);
  }
};

template <class Cfg>
__device__ __forceinline__ LeanItem<Cfg> lean_item(const LeanArgs& a, i32 b) {
  LeanItem<Cfg> it;
  it.offset = a.has_offsets ? static_cast<i64>(__ldg(reinterpret_cast<const i32*>(a.offsets) + b * a.offsets_stride)) : 0;
  it.ratio = a.ratio;
  return it;
}

// Weights of one consumer's 4 tokens for lane class c = lane & 3, in the order head_sum expects
// (weight_head). bf16 weights stay in registers for a whole item (32 registers of packed
// pairs, widened exactly at use); fp32 weights would need 64 registers beside the 128
// accumulators, which spills, so they are read from the item's shared-memory copy per tile.
template <class Cfg, bool kF32 = Cfg::kWeightsF32>
struct LeanWeights;

template <class Cfg>
struct LeanWeights<Cfg, false> {
  static constexpr int H = LeanTraits<Cfg>::kHeads;
  u32 v[LeanTraits<Cfg>::kTokensPerConsumer * (H / 16)][2];
  __device__ __forceinline__ void load(u32 w_smem, int cls) {
#pragma unroll
    for (int tl = 0; tl < LeanTraits<Cfg>::kTokensPerConsumer; ++tl)
#pragma unroll
      for (int g4 = 0; g4 < H / 16; ++g4) {
        v[tl * (H / 16) + g4][0] = ld_shared_u32(w_smem + (tl * H + weight_head(g4, 0, cls)) * 2);
        v[tl * (H / 16) + g4][1] = ld_shared_u32(w_smem + (tl * H + weight_head(g4, 2, cls)) * 2);
      }
  }
  __device__ __forceinline__ float4 operator()(int tl, int g4) const {
    const u32 a = v[tl * (H / 16) + g4][0], b = v[tl * (H / 16) + g4][1];
    return make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u), __uint_as_float(b << 16),
                       __uint_as_float(b & 0xffff0000u));
  }
};

template <class Cfg>
struct LeanWeights<Cfg, true> {
  static constexpr int H = LeanTraits<Cfg>::kHeads;
  u32 base;  // this consumer's weights in shared memory, [4 tokens][64 heads] fp32
  int cls;
  __device__ __forceinline__ void load(u32 w_smem, int c) {
    base = w_smem;
    cls = c;
  }
  __device__ __forceinline__ float4 operator()(int tl, int g4) const {
    const float2 a = ld_shared_f32x2(base + (tl * H + weight_head(g4, 0, cls)) * 4);
    const float2 b = ld_shared_f32x2(base + (tl * H + weight_head(g4, 2, cls)) * 4);
    return make_float4(a.x, a.y, b.x, b.y);
  }
};

// Named barrier ids (0 is __syncthreads).
constexpr u32 kLeanPingPong0 = 1;  // consumer 0 may issue its wgmma (arrived by consumer 1)
constexpr u32 kLeanPingPong1 = 2;  // consumer 1 may issue its wgmma (arrived by consumer 0)

template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_indexer_lean(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a) {
  using T = LeanTraits<Cfg>;
  using L = LeanSmem<Cfg>;
  static_assert(L::kAlloc == Cfg::kSmemBytes, "sm90_indexer_lean: host and template disagree on shared memory");
  extern __shared__ u8 smem_raw[];
  u8* smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~static_cast<u64>(1023));
  u64* bars = reinterpret_cast<u64*>(smem + L::kOffBar);
  u64* q_full = bars;
  u64* q_empty = bars + T::kConsumers;
  u64* w_full = bars + 2 * T::kConsumers;
  u64* kv_full = bars + 3 * T::kConsumers;
  u64* kv_empty = kv_full + T::kStages;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  if (threadIdx.x == 0) {
    for (int g = 0; g < T::kConsumers; ++g) {
      mbarrier_init(&q_full[g], 1);                     // Q's expect_tx (TMA)
      mbarrier_init(&w_full[g], 32);                    // the producer warp's weight stores
      mbarrier_init(&q_empty[g], 128);                  // every consumer thread (each read weights)
    }
    for (int s = 0; s < T::kStages; ++s) {
      mbarrier_init(&kv_full[s], 1);
      mbarrier_init(&kv_empty[s], 4 * T::kConsumers);   // lane 0 of each consumer warp
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  const LeanWork<Sched> work{a.num_items, a.batch, static_cast<i32>(blockIdx.x), static_cast<i32>(gridDim.x)};
  const i64 rounds = work.rounds();

  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (warp == 0) {
      // ---------------- producer ----------------
      // Lane 0 issues every TMA; the whole warp copies the weights with ordinary loads and
      // shared stores (generic proxy, like the consumers that read them), each lane releasing
      // its own stores through its arrival on w_full; q_empty releases both buffers.
      if (lane == 0) {
        tma_prefetch_desc(&q_map);
        tma_prefetch_desc(&k_map);
      }
      u32 stage = 0, phase = 0, q_uses = 0;
      for (i64 k = 0; k < rounds; ++k) {
        i32 tile, b;
        if (!work.item(k, tile, b)) continue;
        const i32 tok0 = tile * T::kTokensPerTile;
        const i32 n_kv = lean_item<Cfg>(a, b).n_kv(tok0);
        if (n_kv == 0) continue;
        const i32 pre = n_kv < T::kStages ? n_kv : T::kStages;
        if (lane == 0)
          for (i32 it = 0; it < pre; ++it)
            load_kv_tile<T::kStages, true>(k_map, smem + L::kOffKv, kv_full, kv_empty, stage, phase, 0, it, b);
        for (int g = 0; g < T::kConsumers; ++g) {
          mbarrier_wait(&q_empty[g], (q_uses & 1) ^ 1);
          const i32 t0 = tok0 + g * T::kTokensPerConsumer;
          if (lane == 0) {
            mbarrier_arrive_expect_tx(&q_full[g], kQBytes);
            load_q_rows<true>(q_map, smem + L::kOffQ + g * kQBytes, &q_full[g], t0, b);
          }
          // The weight rows of the consumer's 4 tokens are contiguous (16-byte aligned: gate).
          const uint4* w_src = reinterpret_cast<const uint4*>(
              reinterpret_cast<const u8*>(a.w) +
              (static_cast<i64>(b) * T::kSeqQ + t0) * static_cast<i64>(T::kWBytes / T::kTokensPerConsumer));
          uint4* w_dst = reinterpret_cast<uint4*>(smem + L::kOffW + g * T::kWBytes);
#pragma unroll
          for (int i = lane; i < T::kWBytes / 16; i += 32) w_dst[i] = __ldg(w_src + i);
          mbarrier_arrive(&w_full[g]);
        }
        ++q_uses;
        if (lane == 0)
          for (i32 it = pre; it < n_kv; ++it)
            load_kv_tile<T::kStages, true>(k_map, smem + L::kOffKv, kv_full, kv_empty, stage, phase, 0, it, b);
      }
      return;
    }
    // ---------------- fillers (warps 1..3) ----------------
    const int ft = threadIdx.x - 32;
    float* out = reinterpret_cast<float*>(a.out);
    for (i64 k = 0; k < rounds; ++k) {
      i32 tile, b;
      if (!work.item(k, tile, b)) continue;
      const i32 tok0 = tile * T::kTokensPerTile;
      const i64 covered = static_cast<i64>(lean_item<Cfg>(a, b).n_kv(tok0)) * kKvRows;
      const i64 c0 = covered < T::kSeqK ? covered : T::kSeqK;
#pragma unroll 1
      for (int r = 0; r < T::kTokensPerTile; ++r)
        fill_neg_inf(out + (static_cast<i64>(b) * T::kSeqQ + tok0 + r) * T::kSeqK, c0, T::kSeqK, ft, T::kFillThreads);
    }
    return;
  }

  // ---------------- consumers ----------------
  setmaxnreg_inc<232>();
  const int cg = wg - 1;
  const int warp_in_wg = warp % 4;
  const u32 my_bar = cg == 0 ? kLeanPingPong0 : kLeanPingPong1;
  const u32 other_bar = cg == 0 ? kLeanPingPong1 : kLeanPingPong0;
  if (cg == 1) named_barrier_arrive(kLeanPingPong0, 256);  // consumer 0 issues first
  const u32 q_base = smem_addr(smem + L::kOffQ + cg * kQBytes);
  const u32 kv_base0 = smem_addr(smem + L::kOffKv);
  const u32 w_smem = smem_addr(smem + L::kOffW + cg * T::kWBytes);
  float* out = reinterpret_cast<float*>(a.out);
  const int quarter = token_quarter(lane);
  constexpr int TPW = T::kTokensPerConsumer;

  float acc[128];
  LeanWeights<Cfg> wreg;
  u32 stage = 0, phase = 0, q_uses = 0;
  for (i64 k = 0; k < rounds; ++k) {
    i32 tile, b;
    if (!work.item(k, tile, b)) continue;
    const i32 tok0 = tile * T::kTokensPerTile;
    const LeanItem<Cfg> item = lean_item<Cfg>(a, b);
    const i32 n_kv = item.n_kv(tok0);
    if (n_kv == 0) continue;
    const i32 tok_first = tok0 + cg * TPW;
    const i64 full_hi = item.hi(tok_first);           // every row of this consumer sees [0, full_hi)
    const i32 my_tok = tok_first + quarter;           // the token this lane's sums end up with
    const i64 my_hi = item.hi(my_tok);
    float* my_row = out + (static_cast<i64>(b) * T::kSeqQ + my_tok) * T::kSeqK;
    mbarrier_wait(&w_full[cg], q_uses & 1);
    mbarrier_wait(&q_full[cg], q_uses & 1);
    wreg.load(w_smem, lane & 3);
    for (i32 it = 0; it < n_kv; ++it) {
      mbarrier_wait(&kv_full[stage], phase);
      named_barrier_sync(my_bar, 256);
      mma_kv_tile(acc, kv_base0 + stage * kKvBytes, q_base);
      named_barrier_arrive(other_bar, 256);
      wgmma_wait_group<0>();
      wgmma_fence_operands(acc);
      // Q is done with; bf16 weights are in registers, so the next item's Q and weights may
      // load under this last epilogue. fp32 weights are still read from shared memory.
      // Every thread arrives on q_empty: an arrival releases only its own thread's reads.
      if (!Cfg::kWeightsF32 && it == n_kv - 1) mbarrier_arrive(&q_empty[cg]);
      if (lane == 0) mbarrier_arrive(&kv_empty[stage]);
      if (++stage == T::kStages) {
        stage = 0;
        phase ^= 1;
      }
      float part[2 * TPW];
      head_sum<T::kHeads, TPW>(acc, wreg, part, lane);
      const i64 kabs0 = static_cast<i64>(it) * kKvRows;
      const bool masked = kabs0 + kKvRows > full_hi;
      const i64 kr = kabs0 + 16 * warp_in_wg + (lane >> 2);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const i64 kabs = kr + 8 * j;
        float v = Cfg::kUnitScale ? part[j] : part[j] * a.sm_scale;
        if (masked) {
          if (kabs >= T::kSeqK) continue;
          if (kabs >= my_hi) v = neg_inf();
        }
        store_streaming(my_row + kabs, v);
      }
    }
    if (Cfg::kWeightsF32) mbarrier_arrive(&q_empty[cg]);
    ++q_uses;
  }
  if (cg == 0) named_barrier_sync(kLeanPingPong0, 256);  // consume consumer 1's last arrival
}

}  // namespace dsa
