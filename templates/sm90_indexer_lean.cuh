#pragma once
// sm90_indexer_lean: the fast path for H 64, D 128, bf16 Q/K, bf16/fp32 W, fp32 scores,
// compiled per shape key, sm_scale == 1 compiling the multiply out.
//   BSHD: S_q and S_k are compile-time constants (every stride, window bound and tile count
//         follows). The batch is a launch argument: one kernel serves every B and runs all of
//         them in one persistent launch over B x q-tiles work items, in the order the host
//         planner emitted into the source (Sched).
//   THD:  the packed T_q, rounded up to the q-tile, is the compile-time constant; T_k, the
//         segment boundaries and the offsets are launch arguments, and so is the order of the
//         q-tiles, which the host plans per packing from the host cu_seqlens (LeanThdSchedule).
//         A q-tile may straddle segments: every row carries its own window.
//
// CTA = 3 warpgroups, one CTA per SM:
//   WG0 warp 0    producer: per work item, the KV tiles, each consumer's Q rows (TMA, lane 0)
//                 and its weights (the whole warp).
//   WG0 warps 1-3 fillers: -inf over the columns outside the item's KV range. They need
//                 nothing from the other roles: every role derives the item's windows itself
//                 (from the compile-time shape, or for THD from cu_seqlens), so no per-tile
//                 information is exchanged.
//   WG1, WG2      consumers, as in the generic family (shared main loop and head sum, so the
//                 results are bitwise equal): m64n256k16 over 4 tokens x 64 heads each, sharing
//                 every KV tile, ping-ponging on the tensor cores. bf16 weights of an item stay
//                 in registers for all its KV tiles, and Q is then released right after the
//                 last product so the next item's Q loads under the last epilogue.
#include "dsa_args.cuh"
#include "dsa_types.cuh"
#include "dsa_window.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "sm90_epilogue.cuh"
#include "sm90_indexer_lean_args.cuh"
#include "sm90_indexer_lean_scheduler.cuh"
#include "sm90_mainloop.cuh"

namespace dsa {

// Lean's members rendered only when they differ from their first value (DSA_CONFIG_OR): the split
// variant (kKvSplit), the indexer heads (kHeads, 64 first), the consumer warpgroups (kConsumers,
// 2 first), the lse output (kWithLse) and free-running consumers (kFreeConsumers).
DSA_CONFIG_OR(SplitOf, kKvSplit, bool, false)
DSA_CONFIG_OR(HeadsOf, kHeads, int, 64)
DSA_CONFIG_OR(ConsumersOf, kConsumers, int, 2)
DSA_CONFIG_OR(LseOf, kWithLse, bool, false)
DSA_CONFIG_OR(FreeOf, kFreeConsumers, bool, false)
// Measurements: the roles stamp their phases into LeanArgs::trace (kTrace; LeanTrace).
DSA_CONFIG_OR(TraceOf, kTrace, bool, false)
// Explicit windows of a B 1 BSHD call, served by the THD kernel as one packed sequence whose rows'
// windows come from ks / ke (LeanArgs): kLayout THD global for key columns, THD local for
// window-start columns (column c of row r holds key ks[r] + c).
DSA_CONFIG_OR(RowWindowsOf, kRowWindows, bool, false)

// A role's phase stamps (sm90_indexer_lean_args.cuh, kLeanTraceWords): one recording thread per
// role (lane 0 of the producer warp, lane 0 of a consumer's first warp); each stamp is stored as
// it is taken, so that no register stays live across the loop's waits for it. Empty unless kOn.
template <bool kOn>
struct LeanTrace {
  __device__ __forceinline__ LeanTrace(const LeanArgs&, int, bool) {}
  __device__ __forceinline__ void open(u32, i32, i64) {}
  __device__ __forceinline__ void stamp(int) {}
  __device__ __forceinline__ void close() {}
};
template <>
struct LeanTrace<true> {
  u32* p = nullptr;  // the role's region (nullptr: this thread does not record)
  u32 n = 0;         // records written
  __device__ __forceinline__ LeanTrace(const LeanArgs& a, int role, bool recorder) {
    if (recorder && a.trace != 0)
      p = reinterpret_cast<u32*>(a.trace) + (static_cast<u64>(blockIdx.x) * kLeanTraceRoles + role) * kLeanTraceWords;
  }
  __device__ __forceinline__ bool room() const { return p != nullptr && 1 + (n + 1) * kLeanTraceRecord <= kLeanTraceWords; }
  __device__ __forceinline__ u32* record() const { return p + 1 + n * kLeanTraceRecord; }
  __device__ __forceinline__ void open(u32 kind, i32 i, i64 round) {
    if (!room()) return;
    record()[0] = kind | (static_cast<u32>(i) << 8);
    record()[7] = static_cast<u32>(round);
  }
  __device__ __forceinline__ void stamp(int f) {
    if (!room()) return;
    u32 c;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(c)::"memory");
    record()[f] = c;
  }
  __device__ __forceinline__ void close() {
    if (!room()) return;
    p[0] = ++n;
  }
};

// The order in which a work item's KV tiles are swept. The scores kernels sweep in order; an
// epilogue may ask for a sample-first order (its kSampleStride s > 1: the fused top-k's sweep)
// in which tiles s/2, s/2 + s, s/2 + 2s, ... come first and the others follow in order. Every
// role maps its iteration to the tile with lean_tile_at (sm90_indexer_lean_args.cuh), so producer,
// consumers and epilogue agree.
DSA_CONFIG_OR(SampleStrideOf, kSampleStride, int, 1)
// An epilogue that keeps registers of its own beside the accumulators may ask for the weights
// as packed pairs (kNarrowWeights; LeanWeights).
DSA_CONFIG_OR(NarrowWeightsOf, kNarrowWeights, bool, false)
// THD consumers compute the next item's lane state during the item's first product; an epilogue
// whose consumers have no room for it (kLateLaneInfo: the fused top-k's exact THD sweep at 208
// registers with bf16 weights in registers spilled 28 bytes) takes it after the item instead.
DSA_CONFIG_OR(LateLaneInfoOf, kLateLaneInfo, bool, false)

template <class Cfg>
struct LeanTraits {
  static constexpr int kHeads = HeadsOf<Cfg>::value;
  // Two consumers of 256 packed (token, head) rows each (m64n256), or four of 128 (m64n128): the
  // same q-tile, twice the warps to hide the epilogue's latency per product.
  static constexpr int kConsumers = ConsumersOf<Cfg>::value;
  static constexpr int kRows = 2 * kPackedRows / kConsumers;                // the wgmma N: 256 or 128
  static constexpr int kAcc = kRows / 2;                                    // accumulators per thread
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kTokensPerConsumer = kRows / kHeads;                 // 4, 8, 16 (two consumers); 2, 4, 8 (four)
  static constexpr int kTokensPerTile = kConsumers * kTokensPerConsumer;    // 8 (H 64), 16 (H 32), 32 (H 16)
  // After the head sum a lane holds kVals sums (head_sum's part): kSlots tokens, both of its
  // accumulator rows each, or at two tokens per consumer one sum of one token and row.
  static constexpr int kVals = kTokensPerConsumer / 2;
  static constexpr int kSlots = kTokensPerConsumer == 2 ? 1 : kTokensPerConsumer / 4;
  static constexpr int kStages = Cfg::kKvStages;
  static constexpr i64 kSeqQ = Cfg::kSeqQ;
  static constexpr i64 kSeqK = Cfg::kSeqK;  // BSHD S_k; THD 0 (T_k is a launch argument)
  static constexpr bool kThd = Cfg::kLayout != kLayoutBshd;
  static constexpr i64 kTilesPerBatch = kSeqQ / kTokensPerTile;
  // FP8 (q and k E4M3): a row of D is one 128-byte box, and the weights are fp32 in shared
  // memory whatever W's dtype (each is w * q_scale, folded by the consumer: lean_fp8_fold).
  static constexpr bool kFp8 = InputOf<Cfg>::value == kInputE4m3;
  static constexpr int kQBytes = InputTiles<kFp8>::kQBytes / kPackedRows * kRows;  // per consumer: 64 KB (FP8: 32 KB) at 256 rows
  static constexpr int kKvBytes = InputTiles<kFp8>::kKvBytes;  // per stage: 16 KB (FP8: 8 KB)
  static constexpr bool kWF32 = Cfg::kWeightsF32 || kFp8;       // the weights' shared-memory copy is fp32
  static constexpr int kWBytes = kTokensPerConsumer * kHeads * (kWF32 ? 4 : 2);  // per consumer
  static constexpr int kFillThreads = 96;                                  // warps 1..3
  static constexpr bool kSplit = SplitOf<Cfg>::value;
  // How a consumer reads its weights per tile (LeanWeights; lean_weight_mode). Weights in shared
  // memory keep the consumer's Q and weight buffers until its last tile's epilogue.
  static constexpr int kWMode = lean_weight_mode(kWF32, kConsumers, kThd, kSplit, LseOf<Cfg>::value);
  static constexpr bool kWSmem = kWMode != 0;
  // Weights read from shared memory per tile have two buffers per consumer (item parity), so that
  // they do not hold the next item's Q back: every consumer releases its Q and weights after its
  // last product, and the producer writes the next item's weights into the other buffer (the
  // one the item before last read, done with before this item began).
  static constexpr int kWBufs = kWSmem ? 2 : 1;
  // FP8: two Q buffers per consumer (item parity; 128 KB of Q beside the 64 KB KV ring), so the
  // producer loads an item's Q and weights while the consumer still works on the item before, and
  // the consumer's raw weights and q scales (4 bytes of each per packed row, cp.async by the
  // producer, which never waits for them), folded into the weight buffer by the consumer itself at
  // the item's start. bf16 keeps one Q buffer (two do not fit beside its 128 KB KV ring).
  static constexpr int kQBufs = kFp8 ? 2 : 1;
  static constexpr int kRawBytes = kFp8 ? kRows * 8 : 0;  // per consumer and buffer
  static_assert(!kFp8 || kWBufs == kQBufs, "sm90_indexer_lean: FP8's weight buffers follow its Q buffers");
  // Registers per thread after setmaxnreg. The CTA's pool is what it was launched with (168
  // per thread at 384 threads, 1 CTA/SM): a setmaxnreg.inc that the warpgroups' decs have not
  // freed enough for blocks forever, so 128 * (producer + 2 consumers) <= 384 * 168. THD's
  // producer and fillers derive per-row windows from cu_seqlens, and the split variant's
  // its chunks, and need more than 40. Four consumers: 640 threads launch with 96 (65,536 / 640,
  // in steps of 8), and each consumer gets 104 beside its 64 accumulators.
  // BSHD rows of an S_k that is not a multiple of 4 are not 16-byte aligned, and the fillers'
  // unaligned ends need more than 40 too (they spilled 8-12 bytes there).
  // An epilogue whose filler warps do work of their own (the fused top-k's selectors) may ask
  // for more (Regs<its count>); the consumers get what is left, in steps of 8 (four: at most 104).
  static constexpr bool kWideProducer = kThd || kSplit || kSeqK % 4 != 0;
  static constexpr int kEntryRegs = kConsumers == 2 ? 168 : 96;
  template <int kP>
  struct Regs {
    static constexpr int kProducer = kP;
    static constexpr int kLeft = (kThreads / 128 * kEntryRegs - kP) / kConsumers / 8 * 8;
    static constexpr int kConsumer = kConsumers == 4 && kLeft > 104 ? 104 : kLeft;
    static_assert(128 * (kProducer + kConsumers * kConsumer) <= kThreads * kEntryRegs,
                  "sm90_indexer_lean: setmaxnreg asks for more registers than the CTA was launched with");
  };
  static constexpr int kProducerRegs = kWideProducer ? 56 : 40;
  static constexpr int kConsumerRegs = Regs<kProducerRegs>::kConsumer;
  static_assert(kConsumerRegs == (kConsumers == 4 ? 104 : kWideProducer ? 224 : 232), "sm90_indexer_lean: the measured splits");
  static_assert(Cfg::kHeadDim == 128, "sm90_indexer_lean: kHeadDim must be 128");
  static_assert(kHeads == 64 || kHeads == 32 || kHeads == 16, "sm90_indexer_lean: kHeads must be 64, 32 or 16");
  static_assert(kConsumers == 2 || kConsumers == 4, "sm90_indexer_lean: kConsumers must be 2 or 4");
  static_assert(!(kThd && RowWindowsOf<Cfg>::value) || kHeads == 64, "sm90_indexer_lean: row windows are H 64");
  static_assert(kSeqQ >= kTokensPerTile && kSeqQ % kTokensPerTile == 0,
                "sm90_indexer_lean: kSeqQ must be a positive multiple of the q-tile (8, 16 or 32 tokens)");
  static_assert(kThd ? kSeqK == 0 : kSeqK >= 1, "sm90_indexer_lean: kSeqK must be >= 1 (BSHD) or 0 (THD)");
  static_assert(kStages >= 2 && kStages <= 8, "sm90_indexer_lean: kKvStages must be in [2, 8]");
};

// Where value j of a lane's head sums (head_sum's part) belongs: its accumulator row is
// 16 * warp + lane / 4 + lean_val_row8(j, lane), its token the lane's first plus j >> 1; the
// lane's first token of its consumer's is token_quarter(lane) * kSlots, or lane & 1 when
// kVals == 1 (two tokens per consumer).
template <class T>
__device__ __forceinline__ int lean_val_row8(int j, int lane) {
  return T::kVals == 1 ? 8 * ((lane >> 1) & 1) : 8 * (j & 1);
}

template <class Cfg, int kEpiBytes = 0>
struct LeanSmem {
  using T = LeanTraits<Cfg>;
  static constexpr int kOffQ = 0;                                   // [consumer][D half][kRows][128 B]
  static constexpr int kOffKv = kOffQ + T::kConsumers * T::kQBufs * T::kQBytes;  // [stage][D box][64 rows][128 B]
  static constexpr int kOffW = kOffKv + T::kStages * T::kKvBytes;      // [consumer][buffer][tokens][heads]
  static constexpr int kOffRaw = kOffW + T::kConsumers * T::kWBufs * T::kWBytes;  // FP8: [consumer][buffer] raw W, q_scale
  static constexpr int kOffBar = kOffRaw + T::kConsumers * T::kWBufs * T::kRawBytes;
  static constexpr int kNumBars = 3 * T::kConsumers * T::kQBufs + 2 * T::kStages;  // q full/empty, w full, kv full/empty
  static constexpr int kOffEpi = kOffBar + kNumBars * 8;              // the epilogue's own (top-k: row state)
  static constexpr int kBytes = kOffEpi + kEpiBytes;
  static constexpr int kAlloc = kBytes + 1024;                      // slack to 1024-align the base
  static_assert(kOffKv % 1024 == 0 && kOffW % 16 == 0 && kOffRaw % 16 == 0 && kOffBar % 8 == 0 && kOffEpi % 16 == 0,
                "sm90_indexer_lean: shared-memory regions misaligned");
};

// BSHD: the windows of one work item: row i of batch b sees key rows [0, causal_limit(i)).
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

// THD: the windows of one q-tile of packed rows, which may belong to several segments. Every
// warp of every role computes what it needs for itself (lane r evaluates row tok0 + r modulo the
// q-tile's 8, 16 or 32 tokens (H 64, 32, 16) with the generic family's window arithmetic,
// dsa_window.cuh, and the warp reduces with shuffles), so no per-tile information is exchanged
// through shared memory.
struct LeanThdRow {
  i64 lo, hi;  // visible absolute K rows of the packed K (lo == hi: none)
  i64 base;    // absolute K row of output column 0
  i32 valid;   // the row exists (< T_q)
  __device__ __forceinline__ bool live() const { return valid && hi > lo; }
  // Row r of the tile (every lane of the warp calls it).
  __device__ __forceinline__ LeanThdRow from_lane(int r) const {
    LeanThdRow x;
    x.lo = __shfl_sync(0xffffffffu, lo, r);
    x.hi = __shfl_sync(0xffffffffu, hi, r);
    x.base = __shfl_sync(0xffffffffu, base, r);
    x.valid = __shfl_sync(0xffffffffu, valid, r);
    return x;
  }
};

template <class Cfg>
__device__ __forceinline__ LeanThdRow lean_thd_row(const LeanArgs& a, i32 tok0, int lane) {
  LeanThdRow w;
  const i64 r = static_cast<i64>(tok0) + (lane & (LeanTraits<Cfg>::kTokensPerTile - 1));
  w.valid = r < a.t_q;
  w.lo = w.hi = w.base = 0;
  if constexpr (RowWindowsOf<Cfg>::value) {
    // the generic family's BSHD explicit windows (row_window's arithmetic): window-start columns
    // (THD local) have column 0 at key ks
    if (w.valid) {
      const i64 ks = load_i32(a.ks, r * a.win_stride), ke = load_i32(a.ke, r * a.win_stride);
      i64 lo, hi;
      clip_explicit_window(ks, ke, a.t_k, Cfg::kLayout == kLayoutThdLocal, a.out_cols, lo, hi);
      if (hi <= lo) lo = hi = 0;
      w.lo = lo;
      w.hi = hi;
      w.base = Cfg::kLayout == kLayoutThdLocal ? ks : 0;
    }
    return w;
  }
  if (w.valid) {
    const ThdRow t = thd_row(a.cu_q, a.cu_k, a.batch, a.t_k, r);
    const i64 off = a.has_offsets ? static_cast<i64>(load_i32(a.offsets, t.b * a.offsets_stride)) : 0;
    i64 hi = causal_limit(off, t.i, a.ratio, t.s_k);
    if (Cfg::kLayout == kLayoutThdLocal && hi > a.out_cols) hi = a.out_cols;
    w.lo = t.k0;
    w.hi = t.k0 + hi;
    w.base = Cfg::kLayout == kLayoutThdLocal ? t.k0 : 0;
  }
  return w;
}

__device__ __forceinline__ i64 lean_group_min(i64 v, int width) {
  for (int o = 1; o < width; o <<= 1) { const i64 x = __shfl_xor_sync(0xffffffffu, v, o); v = x < v ? x : v; }
  return v;
}
__device__ __forceinline__ i64 lean_group_max(i64 v, int width) {
  for (int o = 1; o < width; o <<= 1) { const i64 x = __shfl_xor_sync(0xffffffffu, v, o); v = x > v ? x : v; }
  return v;
}
constexpr i64 kLeanI64Max = 0x7fffffffffffffffll;

// The KV tiles the item sweeps: the union of its live rows' windows (the q-tile's kTileRows
// lanes), from a multiple of 64.
struct LeanThdSpan {
  i64 kv_begin;
  i32 n_kv;  // 0: every row of the item is all -inf
};
template <int kTileRows>
__device__ __forceinline__ LeanThdSpan lean_thd_span(const LeanThdRow& w) {
  const i64 u_lo = lean_group_min(w.live() ? w.lo : kLeanI64Max, kTileRows);
  const i64 u_hi = lean_group_max(w.live() ? w.hi : -kLeanI64Max, kTileRows);
  LeanThdSpan s;
  s.kv_begin = 0;
  s.n_kv = 0;
  if (u_lo < u_hi) {
    s.kv_begin = (u_lo / kKvRows) * kKvRows;
    s.n_kv = static_cast<i32>((u_hi - s.kv_begin + kKvRows - 1) / kKvRows);
  }
  return s;
}

__device__ __forceinline__ i32 lean_rel(i64 v, i64 kv_begin, i32 n_kv) {
  return static_cast<i32>(clamp64(v - kv_begin, 0, static_cast<i64>(n_kv) * kKvRows));
}

// What a consumer lane needs of an item, relative to its first KV row (32-bit, to spare
// registers beside the accumulators): for each of its S tokens (slot s: the head sum's part[2s],
// part[2s + 1]), the row's columns [c_lo, c_hi) and window [w_lo, w_hi) (w inside c) and the
// address of KV row kv_begin in its row of the scores; KV rows [f_lo, f_hi) inside the window of
// every row of the consumer (no mask there).
template <int S>
struct LeanLaneS {
  i32 n_kv, f_lo, f_hi;
  i32 w_lo[S], w_hi[S], c_lo[S], c_hi[S];
  float* row[S];
  i64 q_row0;  // output row of the consumer's first token (b * S_q + token; THD: the packed row)
};
using LeanLane = LeanLaneS<1>;  // H 64: one token per lane
// THD with an epilogue that selects (E::kSelects, the fused top-k's sweep): also the item's first
// KV row, kv_begin (its candidates carry the block's key columns). A type of its own, so that the
// scores kernels' lane state, and their code, stay as they were.
template <int S>
struct LeanLaneKv : LeanLaneS<S> {
  i32 kv0;
};
template <int S, bool kKv0>
struct LeanLaneOf {
  using type = LeanLaneS<S>;
};
template <int S>
struct LeanLaneOf<S, true> {
  using type = LeanLaneKv<S>;
};

// FP8, the producer warp: one consumer's raw weight rows (16-byte pieces, contiguous and 16-byte
// aligned: gate) and q scales (4 bytes each, at their strides) into its raw buffer `raw` by
// cp.async, zero-filled past T_q (THD), and each lane's arrival on `w_full` once its copies have
// landed: the producer never waits for them (session 19's fold waited one round trip to memory
// per consumer and item, and before that eight: ~6k and ~15k cycles of per-item wait measured).
// The consumer folds w x q_scale itself (lean_fp8_fold). No data registers (the producer has 40).
template <class Cfg>
__device__ __forceinline__ void lean_fp8_stage(const LeanArgs& a, const DsaScales& sc, u8* raw, u64* w_full, i64 row0,
                                               i32 t0, i32 b, int lane) {
  using T = LeanTraits<Cfg>;
  constexpr int H = T::kHeads, kRows = T::kTokensPerConsumer * H;
  constexpr int kWElem = Cfg::kWeightsF32 ? 4 : 2, kChunks = kRows * kWElem / 16, kRowsPerChunk = 16 / kWElem;
  static_assert(kRows % 32 == 0 && T::kRawBytes == kRows * 8, "lean_fp8_stage: raw buffer geometry");
  const bool bshd = !T::kThd;
  const u32 raw_w = smem_addr(raw), raw_s = raw_w + kRows * 4;  // kRows raw weights (fp32 or bf16), kRows q scales
  const u8* const w_base = reinterpret_cast<const u8*>(a.w);
  const u8* w_src = w_base + row0 * H * kWElem;
#pragma unroll 1  // fire and forget: no data registers, no wait
  for (int c = lane; c < kChunks; c += 32) {
    const bool valid = bshd || t0 + c * kRowsPerChunk / H < a.t_q;
    cp_async_16_zfill(raw_w + c * 16, valid ? w_src + c * 16 : w_base, valid);  // (src-size 0 reads nothing)
  }
  const float* const qs_base = reinterpret_cast<const float*>(sc.q_scale);
  if (qs_base != nullptr) {
    const float* qs = qs_base + (bshd ? b * sc.q_scale_stride[0] : 0) + static_cast<i64>(t0) * sc.q_scale_stride[1];
#pragma unroll 1
    for (int e = lane; e < kRows; e += 32) {
      const int tl = e / H, h = e % H;
      const bool valid = bshd || t0 + tl < a.t_q;
      cp_async_4_zfill(raw_s + e * 4, valid ? qs + tl * sc.q_scale_stride[1] + h * sc.q_scale_stride[2] : qs_base, valid);
    }
  }
  cp_async_arrive_noinc(smem_addr(w_full));
}

// FP8, a consumer warpgroup at its item's start (after w_full): the fp32 weights w x q_scale (one
// product, as the generic family folds them; w alone without q_scale) from its raw buffer into
// its weight buffer, kRows / 128 per thread, then a barrier of the warpgroup. Rows past T_q
// were zero-filled, so they fold to 0.
template <class Cfg>
__device__ __forceinline__ void lean_fp8_fold(const DsaScales& sc, const u8* raw, float* dst, u32 bar, int tid) {
  using T = LeanTraits<Cfg>;
  constexpr int kRows = T::kTokensPerConsumer * T::kHeads;
  static_assert(kRows % 128 == 0, "lean_fp8_fold: whole rows per thread");
  const float* raw_s = reinterpret_cast<const float*>(raw + kRows * 4);
#pragma unroll
  for (int e = tid; e < kRows; e += 128) {
    float v = Cfg::kWeightsF32 ? reinterpret_cast<const float*>(raw)[e]
                               : bf16_bits_to_float(reinterpret_cast<const u16*>(raw)[e]);
    if (sc.q_scale != 0) v *= raw_s[e];
    dst[e] = v;
  }
  named_barrier_sync(bar, 128);
}

// Weights of one consumer's 4 tokens for lane class c = lane & 3, in the order head_sum expects
// (weight_head). bf16 weights stay in registers for a whole item: kMode 3 widens them once per
// item and keeps them as fp32 (64 registers beside the 128 accumulators; the widening is inline
// asm, which the compiler cannot redo at every use, so the per-tile epilogue has none left:
// 64 of about 550 instructions per KV tile and warp, session 16); kMode 0 keeps them as 32
// registers of packed pairs, widened exactly at use, for the variants where 64 spill
// (lean_weight_regs_mode). fp32 weights come from the item's shared-memory copy: once per item
// (kMode 4) or per tile (kMode 1).
template <class Cfg, int kMode = LeanTraits<Cfg>::kWMode>
struct LeanWeights;

template <class Cfg>
struct LeanWeights<Cfg, 0> {
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

// kMode 3 (bf16) and 4 (fp32): the item's weights as fp32 in registers, loaded once per item from
// its shared copy (bf16 pairs widened by bf16x2_to_f32x2: kMode 0's values, the same bits).
template <class Cfg, bool kF32>
struct LeanWeightsWide {
  static constexpr int H = LeanTraits<Cfg>::kHeads;
  float4 v[LeanTraits<Cfg>::kTokensPerConsumer * (H / 16)];
  __device__ __forceinline__ void load(u32 w_smem, int cls) {
#pragma unroll
    for (int tl = 0; tl < LeanTraits<Cfg>::kTokensPerConsumer; ++tl)
#pragma unroll
      for (int g4 = 0; g4 < H / 16; ++g4) {
        const u32 e0 = w_smem + (tl * H + weight_head(g4, 0, cls)) * (kF32 ? 4 : 2);
        const u32 e2 = w_smem + (tl * H + weight_head(g4, 2, cls)) * (kF32 ? 4 : 2);
        const float2 wa = kF32 ? ld_shared_f32x2(e0) : bf16x2_to_f32x2(ld_shared_u32(e0));
        const float2 wb = kF32 ? ld_shared_f32x2(e2) : bf16x2_to_f32x2(ld_shared_u32(e2));
        v[tl * (H / 16) + g4] = make_float4(wa.x, wa.y, wb.x, wb.y);
      }
  }
  __device__ __forceinline__ float4 operator()(int tl, int g4) const { return v[tl * (H / 16) + g4]; }
};
template <class Cfg>
struct LeanWeights<Cfg, 3> : LeanWeightsWide<Cfg, false> {};

// How a variant's consumers hold their weights (LeanWeights' kMode): as fp32 in registers,
// loaded once per item (bf16 W widened: 3; fp32 W and FP8 from the shared copy: 4), where two
// consumers (four have 104 registers), BSHD, not the split variant at H 16, and an epilogue
// that keeps no registers of its own beside them (kNarrowWeights: the fused top-k's exact sweep,
// whose consumers get 208); the others spilled 8-64 bytes with them (session 16; the NVRTC
// tests hold every variant of the manifest to no spills) and keep lean_weight_mode's (0: packed
// bf16 pairs widened at use; 1, 2: the shared copy read per KV tile).
template <class Cfg, class Epi>
__device__ __forceinline__ constexpr int lean_weight_regs_mode() {
  using T = LeanTraits<Cfg>;
  constexpr bool kWide = T::kConsumers == 2 && !T::kThd && !(T::kSplit && T::kHeads == 16) &&
                         !NarrowWeightsOf<Epi>::value;
  // fp32 from the shared copy: only at the consumers' full 232 registers (not the split variant
  // or ragged S_k: 224), not beside lse's running sums or FP8's k scales at H 16
  constexpr bool kWide4 = kWide && T::kConsumerRegs == 232 && !LseOf<Cfg>::value && !(T::kFp8 && T::kHeads == 16);
  return T::kWMode == 0 && kWide ? 3 : T::kWMode == 1 && kWide4 ? 4 : T::kWMode;
}

// Weights read from the item's shared-memory copy per tile (kMode 1 and 2; kMode 4 reads it once).
template <class Cfg>
struct LeanWeightsSmem {
  static constexpr int H = LeanTraits<Cfg>::kHeads;
  u32 base;  // this consumer's weights in shared memory, [tokens][H heads]
  int cls;
  __device__ __forceinline__ void load(u32 w_smem, int c) {
    base = w_smem;
    cls = c;
  }
};

template <class Cfg>
struct LeanWeights<Cfg, 2> : LeanWeightsSmem<Cfg> {
  using LeanWeightsSmem<Cfg>::H;
  using LeanWeightsSmem<Cfg>::base;
  using LeanWeightsSmem<Cfg>::cls;
  // bf16: the pairs LeanWeights<Cfg, 0> holds, widened the same way (the same values, the same bits)
  __device__ __forceinline__ float4 operator()(int tl, int g4) const {
    const u32 a = ld_shared_u32(base + (tl * H + weight_head(g4, 0, cls)) * 2);
    const u32 b = ld_shared_u32(base + (tl * H + weight_head(g4, 2, cls)) * 2);
    return make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u), __uint_as_float(b << 16),
                       __uint_as_float(b & 0xffff0000u));
  }
};

template <class Cfg>
struct LeanWeights<Cfg, 1> : LeanWeightsSmem<Cfg> {  // fp32
  using LeanWeightsSmem<Cfg>::H;
  using LeanWeightsSmem<Cfg>::base;
  using LeanWeightsSmem<Cfg>::cls;
  __device__ __forceinline__ float4 operator()(int tl, int g4) const {
    const float2 a = ld_shared_f32x2(base + (tl * H + weight_head(g4, 0, cls)) * 4);
    const float2 b = ld_shared_f32x2(base + (tl * H + weight_head(g4, 2, cls)) * 4);
    return make_float4(a.x, a.y, b.x, b.y);
  }
};

// fp32 weights (fp32 W, FP8's w * q_scale) once per item (lean_weight_regs_mode): kMode 1's values
// without its 32 shared loads per KV tile. The copy stays the item's until its last product, as
// for kMode 1.
template <class Cfg>
struct LeanWeights<Cfg, 4> : LeanWeightsWide<Cfg, true> {};

// The consumers' epilogue: what a consumer does with one KV tile's head sums (this lane's 2 KV
// rows of its token). An epilogue E provides
//   E::Args                the launch arguments it reads (passed to the kernel after LeanArgs)
//   E::kSmemBytes          its shared memory (after the barriers)
//   E::kFillsScores        whether the filler warps write -inf outside the items' KV tiles
//   E::kSelects            whether the filler warps run E::select instead (E::init_barriers(smem)
//                          by thread 0 before the CTA's first barrier; E::kProducerRegs: the
//                          producer warpgroup's registers, if more than the traits' choice)
//   E(args, smem, cg, warp_in_wg, lane)     per consumer thread, before the first item
//   tile(part, it, ln, warp_in_wg, lane, sm_scale, item)  per KV tile (item: the consumer's
//                          items with KV tiles before this one)
//   after_tile(ln), end_item(ln)            after each tile's, and each item's, last tile
// (end_item also for items without KV tiles).
//
// The scores operation: the tile to the row of scores, -inf outside the row's window, nothing
// outside the row's columns; with kWithLse (LseOf) also each row's log-sum-exp, in the generic
// family's order (below), so its bits are generic's.
// Named barrier ids (0 is __syncthreads): the consumers' ring takes 1 .. kConsumers, a
// consumer's own (128 threads: its LSE merge) the next kConsumers.
constexpr u32 kLeanPingPong0 = 1;  // consumer 0 may issue its wgmma (arrived by the last consumer)
constexpr u32 kLeanPingPong1 = 2;  // consumer 1 may issue its wgmma (arrived by consumer 0)
// Consumer cg's own barrier (its 128 threads): lse's finish, FP8's weight fold.
template <class T>
__device__ __forceinline__ constexpr u32 lean_consumer_bar(int cg) { return kLeanPingPong0 + T::kConsumers + cg; }

// The lse element of BSHD output row b * S_q + token.
__device__ __forceinline__ i64 lean_bshd_lse_offset(const LeanLseArgs& a, i64 row, i64 seq_q) {
  return (row / seq_q) * a.stride_b + (row % seq_q) * a.stride_row;
}

template <class Cfg>
struct LeanScoresEpilogue {
  using T = LeanTraits<Cfg>;
  static constexpr bool kLse = LseOf<Cfg>::value;
  // kWithLse variants read the kernel's LeanLseArgs; the others take nothing (an empty struct:
  // the variants from before LSE keep their SASS)
  struct NoArgs {};
  template <bool kOn, int = 0>
  struct ArgsOf {
    using type = LeanLseArgs;
  };
  template <int D>
  struct ArgsOf<false, D> {
    using type = NoArgs;
  };
  using Args = typename ArgsOf<kLse>::type;
  // kLse: the kernel's parameter itself (a __grid_constant__, read where it is used, not held
  // in registers beside the accumulators)
  __device__ __forceinline__ static decltype(auto) args(const LeanLseArgs& la) {
    if constexpr (kLse) return (la);
    else return Args{};
  }
  static constexpr int TPW = T::kTokensPerConsumer;
  static constexpr int kSmemBytes = kLse ? T::kConsumers * 4 * TPW * 2 * 4 : 0;  // [consumer][warp][token][m, s]
  static constexpr bool kFillsScores = true;
  static constexpr bool kSelects = false;
  static constexpr int kProducerRegs = 0;
  // kLse: the running (max, sum of exp) of this lane's visible cells of each token slot, pushed
  // in the generic family's order (KV tiles from the first, in a tile row r then r + 8), merged
  // at the item's end as generic's lse_finish does (lanes by their row groups, then warps 0..3).
  template <bool kOn, int = 0>
  struct State {
    float m[T::kSlots], s[T::kSlots];
    u32 scratch;  // shared address of this consumer's [warp][token][m, s]
    const LeanLseArgs* args;
  };
  template <int D>
  struct State<false, D> {};  // no LSE: the scores epilogue keeps no state
  mutable State<kLse> st;
  __device__ __forceinline__ LeanScoresEpilogue(const Args& a, u8* smem, int cg, int, int) {
    if constexpr (kLse) {
      st.scratch = smem_addr(smem) + cg * 4 * TPW * 2 * 4;
      st.args = &a;
      lse_reset();
    } else {
      (void)a, (void)smem, (void)cg;
    }
  }
  __device__ __forceinline__ void lse_reset() const {
    if constexpr (kLse) {
#pragma unroll
      for (int t = 0; t < T::kSlots; ++t) {
        st.m[t] = neg_inf();
        st.s[t] = 0.0f;
      }
    }
  }
  __device__ __forceinline__ void lse_push_slot(int t, float v) const {
    if constexpr (kLse) lse_push(st.m[t], st.s[t], v);
  }
  template <int S>
  __device__ __forceinline__ void tile(const float* part, i32 it, const LeanLaneS<S>& ln, int warp_in_wg, int lane,
                                       float sm_scale, u32 /*item*/) const {
    // KV rows relative to the item's first: the tile's rows are [it * 64, it * 64 + 64)
    const i32 rel0 = it * kKvRows;
    const bool masked = !(rel0 >= ln.f_lo && rel0 + kKvRows <= ln.f_hi);
    const i32 rr = rel0 + 16 * warp_in_wg + (lane >> 2);
    if constexpr (LeanTraits<Cfg>::kVals == 1) {
      // two tokens per consumer (four consumers at H 64): one sum, of token slot 0
      const i32 rel = rr + lean_val_row8<LeanTraits<Cfg>>(0, lane);
      float v = Cfg::kUnitScale ? part[0] : part[0] * sm_scale;
      bool in_cols = true, visible = true;
      if (masked) {
        in_cols = !(rel < ln.c_lo[0] || rel >= ln.c_hi[0]);
        if (rel < ln.w_lo[0] || rel >= ln.w_hi[0]) v = neg_inf(), visible = false;
        visible = visible && in_cols;
      }
      if constexpr (kLse) {
        // generic's order: row r, then row r + 8 (lane ^ 2's), in the lane of row r
        const float v8 = __shfl_xor_sync(0xffffffffu, v, 2);
        const bool visible8 = __shfl_xor_sync(0xffffffffu, visible ? 1 : 0, 2) != 0;
        if (!(lane & 2)) {
          if (visible) lse_push_slot(0, v);
          if (visible8) lse_push_slot(0, v8);
        }
      }
      if (in_cols) store_streaming(ln.row[0] + rel, v);
    } else if constexpr (S == 1 && !kLse) {
      // H 64 keeps the loop its kernels were measured and validated with (the general form
      // below compiles to other SASS)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const i32 rel = rr + 8 * j;
        float v = Cfg::kUnitScale ? part[j] : part[j] * sm_scale;
        if (masked) {
          if (rel < ln.c_lo[0] || rel >= ln.c_hi[0]) continue;
          if (rel < ln.w_lo[0] || rel >= ln.w_hi[0]) v = neg_inf();
        }
        store_streaming(ln.row[0] + rel, v);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 2 * S; ++j) {
        const int t = j >> 1;  // the token slot
        const i32 rel = rr + 8 * (j & 1);
        float v = Cfg::kUnitScale ? part[j] : part[j] * sm_scale;
        if (masked) {
          if (rel < ln.c_lo[t] || rel >= ln.c_hi[t]) continue;
          if (rel < ln.w_lo[t] || rel >= ln.w_hi[t]) v = neg_inf();
          else if (kLse) lse_push_slot(t, v);
        } else if (kLse) {
          lse_push_slot(t, v);
        }
        store_streaming(ln.row[t] + rel, v);
      }
    }
  }
  template <int S>
  __device__ __forceinline__ void after_tile(const LeanLaneS<S>&) const {}
  // kLse: generic's lse_finish over the consumer's tokens: the 8 lanes of a token's rows by
  // butterfly (xor 4, 8, 16), the 4 warps in order through shared memory; every row of the item
  // gets its lse (-inf where nothing is visible), THD's rows past T_q none.
  template <int S>
  __device__ __forceinline__ void end_item(const LeanLaneS<S>& ln) const {
    if constexpr (kLse) {
      const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, cg = threadIdx.x / 128 - 1;
#pragma unroll
      for (int t = 0; t < T::kSlots; ++t) {
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
          const float m2 = __shfl_xor_sync(0xffffffffu, st.m[t], o);
          const float s2 = __shfl_xor_sync(0xffffffffu, st.s[t], o);
          lse_merge(st.m[t], st.s[t], m2, s2);
        }
      }
      // the lanes holding a token's state: 0..3 (two tokens per consumer: 0 and 1)
      if (T::kVals == 1 ? lane < 2 : lane < 4) {
#pragma unroll
        for (int t = 0; t < T::kSlots; ++t) {
          const int tl = T::kVals == 1 ? lane : token_quarter(lane) * T::kSlots + t;
          st_shared_f32x2(st.scratch + (warp * TPW + tl) * 8, st.m[t], st.s[t]);
        }
      }
      const u32 bar = lean_consumer_bar<T>(cg);
      named_barrier_sync(bar, 128);
      if (warp == 0 && lane < TPW) {
        float2 ms = ld_shared_f32x2(st.scratch + lane * 8);
        float m = ms.x, s = ms.y;
#pragma unroll
        for (int w = 1; w < 4; ++w) {
          ms = ld_shared_f32x2(st.scratch + (w * TPW + lane) * 8);
          lse_merge(m, s, ms.x, ms.y);
        }
        const LeanLseArgs& a = *st.args;
        const i64 row = ln.q_row0 + lane;  // b * S_q + token (BSHD), the packed row (THD)
        if constexpr (T::kSplit) {
          // a chunk's (max, sum) of the row, for sm90_indexer_lean_lse_combine (row indexes the
          // partials [part][b][token])
          reinterpret_cast<float2*>(a.partials)[row] = make_float2(m, s);
        } else {
          const i64 off = T::kThd ? row * a.stride_row : lean_bshd_lse_offset(a, row, T::kSeqQ);
          if (!T::kThd || row < a.t_q) reinterpret_cast<float*>(a.lse)[off] = lse_value(m, s);
        }
      }
      named_barrier_sync(bar, 128);
      lse_reset();
    } else {
      (void)ln;
    }
  }
};

// What the roles share: the CTA's shared memory and its mbarriers.
struct LeanCta {
  u8* smem;
  u64 *q_full, *q_empty, *w_full, *kv_full, *kv_empty;
};

// The producer warp: per work item, the KV ring (lane 0's TMA; tiles in the order kS gives), each
// consumer's Q rows (TMA) and its weights (the whole warp, ordinary loads and shared stores).
template <class Cfg, int kS, class Work>
__device__ __forceinline__ void lean_producer(const TmaDesc& q_map, const TmaDesc& k_map, const LeanArgs& a,
                                              const DsaScales& sc, const Work& work, const LeanCta& cta, int lane);
// The filler warps: -inf over every column outside the item's KV tiles.
template <class Cfg, class Work>
__device__ __forceinline__ void lean_fillers(const LeanArgs& a, const Work& work, int lane);
// A consumer warpgroup: the shared main loop over the item's KV tiles, then its epilogue.
template <class Cfg, class Epi, class Work>
__device__ __forceinline__ void lean_consumer(const LeanArgs& a, const DsaScales& sc, const typename Epi::Args& ea,
                                              const Work& work, const LeanCta& cta, int wg, int warp, int lane);

// The work each role walks: whole q-tile sweeps (LeanNoSplit), or the split variant's chunks of
// them (the launch's LeanSplit).
struct LeanNoSplit {};
template <class Split>
struct LeanIsSplit {
  static constexpr bool value = false;
};
template <>
struct LeanIsSplit<LeanSplit> {
  static constexpr bool value = true;
};

// The kernel body, for both layouts (the layout's differences are compile-time branches): the
// barriers, then each warp takes its role.
template <class Cfg, class Epi, class Runs, class Split = LeanNoSplit>
__device__ __forceinline__ void lean_body(const TmaDesc& q_map, const TmaDesc& k_map, const LeanArgs& a,
                                          const DsaScales& sc, const typename Epi::Args& ea, const Runs& runs,
                                          const Split& split = {}) {
  using T = LeanTraits<Cfg>;
  using L = LeanSmem<Cfg, Epi::kSmemBytes>;
  static_assert(L::kAlloc == Cfg::kSmemBytes, "sm90_indexer_lean: host and template disagree on shared memory");
  constexpr bool kBshd = !T::kThd;
  extern __shared__ u8 smem_raw[];
  LeanCta cta;
  cta.smem = reinterpret_cast<u8*>((reinterpret_cast<u64>(smem_raw) + 1023) & ~static_cast<u64>(1023));
  u64* bars = reinterpret_cast<u64*>(cta.smem + L::kOffBar);
  constexpr int kQBarrs = T::kConsumers * T::kQBufs;  // [consumer][Q buffer]
  cta.q_full = bars;
  cta.q_empty = bars + kQBarrs;
  cta.w_full = bars + 2 * kQBarrs;
  cta.kv_full = bars + 3 * kQBarrs;
  cta.kv_empty = cta.kv_full + T::kStages;
  u64* const q_full = cta.q_full;
  u64* const q_empty = cta.q_empty;
  u64* const w_full = cta.w_full;
  u64* const kv_full = cta.kv_full;
  u64* const kv_empty = cta.kv_empty;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4;
  if (threadIdx.x == 0) {
    for (int g = 0; g < kQBarrs; ++g) {
      mbarrier_init(&q_full[g], 1);                     // Q's expect_tx (TMA)
      mbarrier_init(&w_full[g], 32);                    // the producer warp's weight stores (FP8: copies)
      mbarrier_init(&q_empty[g], 128);                  // every consumer thread (each read weights)
    }
    for (int s = 0; s < T::kStages; ++s) {
      mbarrier_init(&kv_full[s], 1);
      mbarrier_init(&kv_empty[s], 4 * T::kConsumers);   // lane 0 of each consumer warp
    }
    if constexpr (Epi::kSelects) Epi::init_barriers(cta.smem + L::kOffEpi);
    fence_mbarrier_init();
  }
  __syncthreads();

  // Each role walks the same schedule (THD: one packed sequence of q-tiles, a.batch is then the
  // segment count), made after setmaxnreg so that it lives in the role's registers.
  constexpr bool kSplit = LeanIsSplit<Split>::value;
  using R = typename T::template Regs<(Epi::kProducerRegs > T::kProducerRegs ? Epi::kProducerRegs : T::kProducerRegs)>;
  if (wg == 0) {
    setmaxnreg_dec<R::kProducer>();
    if constexpr (kSplit) {
      const LeanSplitWork<Runs> work{a.num_items, a.batch, static_cast<i32>(blockIdx.x), static_cast<i32>(gridDim.x), runs,
                                     a.num_items / split.parts, split.chunk};
      if (warp == 0) lean_producer<Cfg, SampleStrideOf<Epi>::value>(q_map, k_map, a, sc, work, cta, lane);
      else if constexpr (Epi::kSelects) Epi::select(a, ea, cta.smem + L::kOffEpi, work, warp - 1, lane);
      else if (Epi::kFillsScores) lean_fillers<Cfg>(a, work, lane);
    } else {
      const LeanWork<Runs> work{a.num_items, kBshd ? a.batch : 1, static_cast<i32>(blockIdx.x), static_cast<i32>(gridDim.x), runs};
      if (warp == 0) lean_producer<Cfg, SampleStrideOf<Epi>::value>(q_map, k_map, a, sc, work, cta, lane);
      else if constexpr (Epi::kSelects) Epi::select(a, ea, cta.smem + L::kOffEpi, work, warp - 1, lane);
      else if (Epi::kFillsScores) lean_fillers<Cfg>(a, work, lane);
    }
    return;
  }
  setmaxnreg_inc<R::kConsumer>();
  if constexpr (kSplit) {
    const LeanSplitWork<Runs> work{a.num_items, a.batch, static_cast<i32>(blockIdx.x), static_cast<i32>(gridDim.x), runs,
                                   a.num_items / split.parts, split.chunk};
    lean_consumer<Cfg, Epi>(a, sc, ea, work, cta, wg, warp, lane);
  } else {
    const LeanWork<Runs> work{a.num_items, kBshd ? a.batch : 1, static_cast<i32>(blockIdx.x), static_cast<i32>(gridDim.x), runs};
    lean_consumer<Cfg, Epi>(a, sc, ea, work, cta, wg, warp, lane);
  }
}

template <class Cfg, int kS, class Work>
__device__ __forceinline__ void lean_producer(const TmaDesc& q_map, const TmaDesc& k_map, const LeanArgs& a,
                                              const DsaScales& sc, const Work& work, const LeanCta& cta, int lane) {
  using T = LeanTraits<Cfg>;
  using L = LeanSmem<Cfg>;
  constexpr bool kBshd = !T::kThd;
  const i64 rounds = work.rounds();
  // Lane 0 issues every TMA; the whole warp copies the weights with ordinary loads and
  // shared stores (generic proxy, like the consumers that read them), each lane releasing
  // its own stores through its arrival on w_full; q_empty releases both buffers.
  if (lane == 0) {
    tma_prefetch_desc(&q_map);
    tma_prefetch_desc(&k_map);
  }
  u32 stage = 0, phase = 0, q_uses = 0;
  LeanTrace<TraceOf<Cfg>::value> tr(a, kLeanTraceProducer, lane == 0);
  for (i64 k = 0; k < rounds; ++k) {
    i32 tile, b, part;
    if (!work.item(k, tile, b, part)) continue;
    const i32 tok0 = tile * T::kTokensPerTile;
    i32 n_kv;
    i64 kv_begin = 0;
    if constexpr (kBshd) {
      const LeanRange r = lean_range(work, lean_item<Cfg>(a, b).n_kv(tok0), part);
      n_kv = r.n;
      kv_begin = static_cast<i64>(r.first) * kKvRows;
    } else {
      const LeanThdSpan sp = lean_thd_span<T::kTokensPerTile>(lean_thd_row<Cfg>(a, tok0, lane));
      n_kv = sp.n_kv;
      kv_begin = sp.kv_begin;
    }
    if (n_kv == 0) continue;
    const i32 pre = n_kv < T::kStages ? n_kv : T::kStages;
    // lane 0: the item's KV tiles [from, to) into the ring (each waits for its stage)
    auto load_kv = [&](i32 from, i32 to) {
      for (i32 it = from; it < to; ++it) {
        tr.open(kLeanTraceKv, it, k);
        tr.stamp(1);
        load_kv_tile<T::kStages, kBshd, T::kFp8>(k_map, cta.smem + L::kOffKv, cta.kv_full, cta.kv_empty, stage, phase, kv_begin,
                                                  lean_tile_at<kS>(it, n_kv), b);
        tr.stamp(2);
        tr.close();
      }
    };
    // One Q buffer (bf16): the item's first KV tiles, then its Q and weights, which wait for the
    // consumers to release the item before's. Two (FP8): the Q and weights first, into the
    // buffers the item before last released, so they load while the item before still runs.
    const int qb = static_cast<int>(q_uses % T::kQBufs);
    const u32 q_par = (q_uses / T::kQBufs) & 1;
    if (T::kQBufs == 1 && lane == 0) load_kv(0, pre);
    for (int g = 0; g < T::kConsumers; ++g) {
      const int gb = g * T::kQBufs + qb;
      tr.open(kLeanTraceQ, g, k);
      tr.stamp(1);
      mbarrier_wait(&cta.q_empty[gb], q_par ^ 1);
      const i32 t0 = tok0 + g * T::kTokensPerConsumer;
      if (lane == 0) {
        mbarrier_arrive_expect_tx(&cta.q_full[gb], T::kQBytes);
        load_q_rows<kBshd, T::kFp8, T::kRows>(q_map, cta.smem + L::kOffQ + gb * T::kQBytes, &cta.q_full[gb], t0, b);
      }
      tr.stamp(2);
      tr.close();
      // The weight rows of the consumer's 4 tokens are contiguous (16-byte aligned: gate);
      // THD rows past T_q (the last tile of a T_q that is not a multiple of 8) are zero.
      const i64 row0 = (kBshd ? static_cast<i64>(b) * T::kSeqQ : 0) + t0;
      if constexpr (T::kFp8) {
        lean_fp8_stage<Cfg>(a, sc, cta.smem + L::kOffRaw + gb * T::kRawBytes, &cta.w_full[gb], row0, t0, b, lane);
        continue;
      }
      constexpr int kChunksPerToken = T::kWBytes / T::kTokensPerConsumer / 16;
      const uint4* w_src = reinterpret_cast<const uint4*>(
          reinterpret_cast<const u8*>(a.w) + row0 * static_cast<i64>(T::kWBytes / T::kTokensPerConsumer));
      uint4* w_dst = reinterpret_cast<uint4*>(cta.smem + L::kOffW + (g * T::kWBufs + (q_uses & (T::kWBufs - 1))) * T::kWBytes);
#pragma unroll
      for (int i = lane; i < T::kWBytes / 16; i += 32) {
        if (kBshd || t0 + i / kChunksPerToken < a.t_q) w_dst[i] = __ldg(w_src + i);
        else w_dst[i] = make_uint4(0u, 0u, 0u, 0u);
      }
      mbarrier_arrive(&cta.w_full[gb]);
    }
    ++q_uses;
    if (lane == 0) load_kv(T::kQBufs == 1 ? pre : 0, n_kv);
  }
}

template <class Cfg, class Work>
__device__ __forceinline__ void lean_fillers(const LeanArgs& a, const Work& work, int lane) {
  using T = LeanTraits<Cfg>;
  constexpr bool kBshd = !T::kThd;
  const i64 rounds = work.rounds();
  const int ft = threadIdx.x - 32;
  float* out = reinterpret_cast<float*>(a.out);
  for (i64 k = 0; k < rounds; ++k) {
    i32 tile, b, part;
    if (!work.item(k, tile, b, part)) continue;
    const i32 tok0 = tile * T::kTokensPerTile;
    if constexpr (kBshd) {
      if (part != 0) continue;  // the split variant: the first chunk's item fills its rows
      const i64 covered = static_cast<i64>(lean_item<Cfg>(a, b).n_kv(tok0)) * kKvRows;
      const i64 c0 = covered < T::kSeqK ? covered : T::kSeqK;
#pragma unroll 1
      for (int r = 0; r < T::kTokensPerTile; ++r)
        fill_neg_inf(out + (static_cast<i64>(b) * T::kSeqQ + tok0 + r) * T::kSeqK, c0, T::kSeqK, ft, T::kFillThreads);
    } else {
      // Every cell outside the columns the item's KV tiles cover, as the generic family's
      // fill_uncovered: the consumers write every covered cell, so each is written once.
      const LeanThdRow mine = lean_thd_row<Cfg>(a, tok0, lane);
      const LeanThdSpan sp = lean_thd_span<T::kTokensPerTile>(mine);
#pragma unroll 1
      for (int r = 0; r < T::kTokensPerTile; ++r) {
        const LeanThdRow row = mine.from_lane(r);
        if (!row.valid) continue;
        i64 e0 = a.out_cols, e1 = a.out_cols;
        if (sp.n_kv > 0) {
          e0 = clamp64(sp.kv_begin - row.base, 0, a.out_cols);
          e1 = clamp64(sp.kv_begin + static_cast<i64>(sp.n_kv) * kKvRows - row.base, 0, a.out_cols);
        }
        float* p = out + (static_cast<i64>(tok0) + r) * a.out_cols;
        fill_neg_inf(p, 0, e0, ft, T::kFillThreads);
        fill_neg_inf(p, e1, a.out_cols, ft, T::kFillThreads);
      }
    }
  }
}

template <class Cfg, class Epi, class Work>
__device__ __forceinline__ void lean_consumer(const LeanArgs& a, const DsaScales& sc, const typename Epi::Args& ea,
                                              const Work& work, const LeanCta& cta, int wg, int warp, int lane) {
  using T = LeanTraits<Cfg>;
  using L = LeanSmem<Cfg, Epi::kSmemBytes>;
  constexpr bool kBshd = !T::kThd;
  const i64 rounds = work.rounds();
  const int cg = wg - 1;
  const int warp_in_wg = warp % 4;
  // The consumers issue their products in turn: consumer c waits on barrier 1 + c, which the
  // consumer before it arrives on once its product is issued (four: a ring of 1..4).
  u32 my_bar, other_bar;
  if constexpr (T::kConsumers == 2) {
    my_bar = cg == 0 ? kLeanPingPong0 : kLeanPingPong1;
    other_bar = cg == 0 ? kLeanPingPong1 : kLeanPingPong0;
  } else {
    my_bar = kLeanPingPong0 + cg;
    other_bar = kLeanPingPong0 + (cg + 1) % T::kConsumers;
  }
  // (kFreeConsumers: no ring; each consumer issues as soon as its Q and the KV stage are there)
  constexpr bool kRing = !FreeOf<Cfg>::value;
  if (kRing && cg == T::kConsumers - 1) named_barrier_arrive(kLeanPingPong0, 256);  // consumer 0 issues first
  // the operands' shared addresses as warp-uniform values (the wgmma descriptors then live in
  // uniform registers: 150 fewer instructions per KV tile and warp with the weights widened once,
  // session 16); four consumers keep Q's per thread (uniform, it spilled 4-8 bytes at 104)
  const u32 q_base_t = smem_addr(cta.smem + L::kOffQ + cg * T::kQBufs * T::kQBytes);
  const u32 q_base0 = T::kConsumers == 2 ? warp_uniform(q_base_t) : q_base_t;
  const u32 kv_base0 = smem_addr(cta.smem + L::kOffKv);
  const u32 w_smem = smem_addr(cta.smem + L::kOffW + cg * T::kWBufs * T::kWBytes);
  float* out = reinterpret_cast<float*>(a.out);
  const int quarter = token_quarter(lane);
  constexpr int TPW = T::kTokensPerConsumer;
  constexpr int S = T::kSlots;
  using Lane = typename LeanLaneOf<S, !kBshd && Epi::kSelects>::type;

  float acc[T::kAcc];
  LeanWeights<Cfg, lean_weight_regs_mode<Cfg, Epi>()> wreg;
  Epi epi(ea, cta.smem + L::kOffEpi, cg, warp_in_wg, lane);
  LeanTrace<TraceOf<Cfg>::value> tr(a, cg, warp_in_wg == 0 && lane == 0);
  u32 stage = 0, phase = 0, q_uses = 0;
  // What this lane needs of item (tile, b). THD derives it from cu_seqlens (loads and warp
  // shuffles), so the consumers compute the next item's while their first product of the
  // current item runs on the tensor cores.
  auto lane_info = [&](i32 tile, i32 b, i32 part) {
    Lane ln;
    const i32 tok0 = tile * T::kTokensPerTile;
    const i32 tok_first = tok0 + cg * TPW;
    // the first token this lane's sums end up with (two tokens per consumer: lane & 1)
    const i32 my_tok = tok_first + (T::kVals == 1 ? (lane & 1) : quarter * S);
    if constexpr (kBshd && Work::kSplit) {
      // one chunk of the q-tile's KV tiles: the same ranges relative to its first row
      const LeanItem<Cfg> item = lean_item<Cfg>(a, b);
      const LeanRange r = lean_range(work, item.n_kv(tok0), part);
      const i64 kv_begin = static_cast<i64>(r.first) * kKvRows;
      ln.n_kv = r.n;
      ln.f_lo = 0;
      ln.f_hi = lean_rel(item.hi(tok_first), kv_begin, r.n);
#pragma unroll
      for (int t = 0; t < S; ++t) {
        ln.w_lo[t] = 0;
        ln.w_hi[t] = lean_rel(item.hi(my_tok + t), kv_begin, r.n);
        ln.c_lo[t] = 0;
        ln.c_hi[t] = lean_rel(T::kSeqK, kv_begin, r.n);
        ln.row[t] = out + (static_cast<i64>(b) * T::kSeqQ + my_tok + t) * T::kSeqK + kv_begin;
      }
      // with lse: the index of the consumer's first token in the chunk partials, [part][b][token]
      ln.q_row0 = (LseOf<Cfg>::value ? (static_cast<i64>(part) * a.batch + b) : static_cast<i64>(b)) * T::kSeqQ + tok_first;
    } else if constexpr (kBshd) {
      (void)part;
      const LeanItem<Cfg> item = lean_item<Cfg>(a, b);
      ln.n_kv = item.n_kv(tok0);
      ln.f_lo = 0;
      ln.f_hi = static_cast<i32>(item.hi(tok_first));  // every row of the consumer sees [0, hi(tok_first))
      if constexpr (S == 1) {  // H 64: as measured and validated (the loop compiles to other SASS)
        ln.w_lo[0] = 0;
        ln.w_hi[0] = static_cast<i32>(item.hi(my_tok));
        ln.c_lo[0] = 0;
        ln.c_hi[0] = static_cast<i32>(T::kSeqK);
        ln.row[0] = out + (static_cast<i64>(b) * T::kSeqQ + my_tok) * T::kSeqK;
      } else {
#pragma unroll
        for (int t = 0; t < S; ++t) {
          ln.w_lo[t] = 0;
          ln.w_hi[t] = static_cast<i32>(item.hi(my_tok + t));
          ln.c_lo[t] = 0;
          ln.c_hi[t] = static_cast<i32>(T::kSeqK);
          ln.row[t] = out + (static_cast<i64>(b) * T::kSeqQ + my_tok + t) * T::kSeqK;
        }
      }
      ln.q_row0 = static_cast<i64>(b) * T::kSeqQ + tok_first;

    } else {
      const LeanThdRow w = lean_thd_row<Cfg>(a, tok0, lane);
      const LeanThdSpan sp = lean_thd_span<T::kTokensPerTile>(w);
      // the consumer's TPW rows: an invalid or empty row leaves no unmasked range
      const i64 i_lo = lean_group_max(w.live() ? w.lo : kLeanI64Max, TPW);
      const i64 i_hi = lean_group_min(w.live() ? w.hi : -kLeanI64Max, TPW);
      const i64 f_lo = __shfl_sync(0xffffffffu, i_lo, TPW * cg), f_hi = __shfl_sync(0xffffffffu, i_hi, TPW * cg);
      if constexpr (S == 1) {  // H 64: as measured and validated (the loop compiles to other SASS)
        const LeanThdRow me = w.from_lane(cg * TPW + (T::kVals == 1 ? (lane & 1) : quarter));
        ln.n_kv = sp.n_kv;
        ln.f_lo = f_lo < f_hi ? lean_rel(f_lo, sp.kv_begin, sp.n_kv) : 0;
        ln.f_hi = f_lo < f_hi ? lean_rel(f_hi, sp.kv_begin, sp.n_kv) : 0;
        ln.w_lo[0] = me.live() ? lean_rel(me.lo, sp.kv_begin, sp.n_kv) : 0;
        ln.w_hi[0] = me.live() ? lean_rel(me.hi, sp.kv_begin, sp.n_kv) : 0;
        ln.c_lo[0] = me.valid ? lean_rel(me.base, sp.kv_begin, sp.n_kv) : 0;
        ln.c_hi[0] = me.valid ? lean_rel(me.base + a.out_cols, sp.kv_begin, sp.n_kv) : 0;
        ln.row[0] = out + static_cast<i64>(my_tok) * a.out_cols + (sp.kv_begin - me.base);
      } else {
        // H 32 / 16: slot t is the lane's token my_tok + t
        ln.n_kv = sp.n_kv;
        ln.f_lo = f_lo < f_hi ? lean_rel(f_lo, sp.kv_begin, sp.n_kv) : 0;
        ln.f_hi = f_lo < f_hi ? lean_rel(f_hi, sp.kv_begin, sp.n_kv) : 0;
#pragma unroll
        for (int t = 0; t < S; ++t) {
          const LeanThdRow me = w.from_lane(cg * TPW + quarter * S + t);
          ln.w_lo[t] = me.live() ? lean_rel(me.lo, sp.kv_begin, sp.n_kv) : 0;
          ln.w_hi[t] = me.live() ? lean_rel(me.hi, sp.kv_begin, sp.n_kv) : 0;
          ln.c_lo[t] = me.valid ? lean_rel(me.base, sp.kv_begin, sp.n_kv) : 0;
          ln.c_hi[t] = me.valid ? lean_rel(me.base + a.out_cols, sp.kv_begin, sp.n_kv) : 0;
          ln.row[t] = out + static_cast<i64>(my_tok + t) * a.out_cols + (sp.kv_begin - me.base);
        }
      }
      // the packed row, for the LSE epilogue and the fused top-k's candidate rows
      ln.q_row0 = (LseOf<Cfg>::value || Epi::kSelects) ? tok_first : 0;
      if constexpr (Epi::kSelects) ln.kv0 = static_cast<i32>(sp.kv_begin);  // (< 2^31: the row-windows gate)

    }
    return ln;
  };
  auto next_item = [&](i64& k, i32& tile, i32& b, i32& part) {
    while (k < rounds && !work.item(k, tile, b, part)) ++k;
    return k < rounds;
  };
  // FP8: the k scales of item (tile, b, part)'s KV rows (the whole warp calls it: THD shuffles).
  auto k_scales = [&](i32 tile, i32 b, i32 part) {
    KScales r;  // p at the item's first KV row
    if (sc.k_scale == 0) return r;
    r.stride = sc.k_scale_stride[1];
    if constexpr (kBshd) {
      i64 kv_begin = 0;
      if constexpr (Work::kSplit)
        kv_begin = static_cast<i64>(lean_range(work, lean_item<Cfg>(a, b).n_kv(tile * T::kTokensPerTile), part).first) * kKvRows;
      else
        (void)part;
      r.p = reinterpret_cast<const float*>(sc.k_scale) + b * sc.k_scale_stride[0] + kv_begin * r.stride;
      r.k_rows = T::kSeqK - kv_begin;
    } else {
      const LeanThdSpan sp = lean_thd_span<T::kTokensPerTile>(lean_thd_row<Cfg>(a, tile * T::kTokensPerTile, lane));
      r.p = reinterpret_cast<const float*>(sc.k_scale) + sp.kv_begin * r.stride;
      r.k_rows = a.t_k - sp.kv_begin;
    }
    return r;
  };
  i64 k = 0;
  Lane ln;
  bool have;
  i32 cur_tile = 0, cur_b = 0, cur_part = 0;
  {
    have = next_item(k, cur_tile, cur_b, cur_part);
    if (have) ln = lane_info(cur_tile, cur_b, cur_part);
  }
  while (have) {
    i64 k_n = k + 1;
    i32 tile_n = 0, b_n = 0, part_n = 0;
    // (four consumers: the next item is found after this one's tiles, so that its state is not
    // live across them beside the accumulators)
    bool have_n = false;
    if constexpr (T::kConsumers == 2) have_n = next_item(k_n, tile_n, b_n, part_n);
    Lane ln_n = ln;
    bool ready_n = false;
    const i32 n_kv = ln.n_kv;
    if (n_kv > 0) {
      KScales kscale;
      if constexpr (T::kFp8) kscale = k_scales(cur_tile, cur_b, cur_part);
      tr.open(kLeanTraceItem, 0, k);
      tr.stamp(1);
      // this item's Q buffer (FP8: two, by item parity) and its barriers' phase
      const int qb = static_cast<int>(q_uses % T::kQBufs);
      const int gb = cg * T::kQBufs + qb;
      const u32 q_par = (q_uses / T::kQBufs) & 1;
      // (warp-uniform at H 64, so that the descriptors stay in uniform registers: +12 instructions
      // per tile without; at H 32 it spilled 4 bytes, and four consumers keep Q's address per thread)
      constexpr bool kUniformQ = T::kConsumers == 2 && T::kHeads == 64;
      const u32 q_base = T::kQBufs == 1 ? q_base0 : kUniformQ ? warp_uniform(q_base0 + qb * T::kQBytes)
                                                              : q_base0 + qb * T::kQBytes;
      mbarrier_wait(&cta.w_full[gb], q_par);
      mbarrier_wait(&cta.q_full[gb], q_par);
      tr.stamp(2);
      tr.close();
      const int wb = q_uses & (T::kWBufs - 1);
      if constexpr (T::kFp8)
        lean_fp8_fold<Cfg>(sc, cta.smem + L::kOffRaw + gb * T::kRawBytes,
                           reinterpret_cast<float*>(cta.smem + L::kOffW + (cg * T::kWBufs + wb) * T::kWBytes),
                           lean_consumer_bar<T>(cg), threadIdx.x - 128 * wg);
      wreg.load(w_smem + wb * T::kWBytes, lane & 3);
      for (i32 it = 0; it < n_kv; ++it) {
        const i32 kt = lean_tile_at<SampleStrideOf<Epi>::value>(it, n_kv);  // the KV tile of this iteration
        tr.open(kLeanTraceTile, it, k);
        tr.stamp(1);
        mbarrier_wait(&cta.kv_full[stage], phase);
        tr.stamp(2);
        if (kRing) named_barrier_sync(my_bar, 256);
        tr.stamp(3);
        mma_tile<T::kFp8>(acc, warp_uniform(kv_base0 + stage * T::kKvBytes), q_base);
        if (kRing) named_barrier_arrive(other_bar, 256);
        tr.stamp(4);
        // FP8: this lane's two k scales load while the product runs (1 where there are none)
        // (four consumers: one row per lane, row8 of lean_val_row8; its second load goes unused)
        KScalePair ksc;
        if constexpr (T::kFp8)
          ksc = load_k_scales(kscale, static_cast<i64>(kt) * kKvRows + 16 * warp_in_wg + (lane >> 2) +
                                          (T::kVals == 1 ? lean_val_row8<T>(0, lane) : 0));
        // (four consumers, and H 32 / 16 with their 2-4 token slots per lane: after the item,
        // where the other consumers' warps hide it, as the next item's lane state beside this
        // one's does not fit their registers)
        if (!kBshd && T::kConsumers == 2 && S == 1 && !LateLaneInfoOf<Epi>::value && it == 0 && have_n) {
          ln_n = lane_info(tile_n, b_n, part_n);
          ready_n = true;
        }
        wgmma_wait_group<0>();
        wgmma_fence_operands(acc);
        tr.stamp(5);
        // Q is done with; weights are in registers or the next item's go to the other buffer, so
        // the next item's Q and weights may load under this last epilogue. Every thread arrives
        // on q_empty: an arrival releases only its own reads.
        if (it == n_kv - 1) mbarrier_arrive(&cta.q_empty[gb]);
        if (lane == 0) mbarrier_arrive(&cta.kv_empty[stage]);
        if (++stage == T::kStages) {
          stage = 0;
          phase ^= 1;
        }
        float part[2 * TPW];
        head_sum<T::kHeads, TPW, T::kFp8>(acc, wreg, part, lane);
        if constexpr (T::kFp8) {
          // k_scale * head sum, before the epilogue's sm_scale: the generic family's order (ksc is
          // 1, an exact product, for rows past k_rows: load_k_scales)
          if (kscale.p != nullptr) {
#pragma unroll
            for (int j = 0; j < T::kVals; ++j) part[j] = part[j] * ksc.v[T::kVals == 1 ? 0 : j & 1];
          }
        }
        epi.tile(part, kt, ln, warp_in_wg, lane, a.sm_scale, q_uses);
        epi.after_tile(ln);
        tr.stamp(6);
        tr.close();
      }
      ++q_uses;
    }
    if constexpr (T::kConsumers == 4) have_n = next_item(k_n, tile_n, b_n, part_n);
    epi.end_item(ln);
    if (have_n && !ready_n) ln_n = lane_info(tile_n, b_n, part_n);
    ln = ln_n;
    cur_tile = tile_n;
    cur_b = b_n;
    cur_part = part_n;
    k = k_n;
    have = have_n;
  }
  if (kRing && cg == 0) named_barrier_sync(kLeanPingPong0, 256);  // consume the last consumer's last arrival
}

// BSHD: the planner's schedule is compiled in (Sched, generated per shape key).
template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_indexer_lean(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                      const DsaScales sc, const __grid_constant__ LeanLseArgs la) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_indexer_lean: the BSHD kernel of a THD variant");
  static_assert(!LeanTraits<Cfg>::kSplit, "sm90_indexer_lean: the unsplit kernel of a split variant");
  lean_body<Cfg, LeanScoresEpilogue<Cfg>>(q_map, k_map, a, sc, LeanScoresEpilogue<Cfg>::args(la), LeanStaticRuns<Sched>{});
}

// BSHD, the split variant (q-tiles x B below the SM count): each q-tile's KV tiles in chunks
// (split), one work item per chunk. Scores are per cell, so the chunks need no combine: every
// cell is computed from the same KV tile by the same main loop and head sum as unsplit.
template <class Cfg, class Sched>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_indexer_lean_split(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                            const DsaScales sc, const LeanSplit split, const __grid_constant__ LeanLseArgs la) {
  static_assert(!LeanTraits<Cfg>::kThd, "sm90_indexer_lean: the split kernel is BSHD only");
  static_assert(LeanTraits<Cfg>::kSplit, "sm90_indexer_lean: the split kernel of a variant without kKvSplit");
  lean_body<Cfg, LeanScoresEpilogue<Cfg>>(q_map, k_map, a, sc, LeanScoresEpilogue<Cfg>::args(la), LeanStaticRuns<Sched>{}, split);
}

// The split variant's lse: each chunk wrote its (max, sum of exp) per row to la.partials
// ([part][b][token], float2); one thread per row merges them in chunk order (lse_merge), so the
// result is the same bits run to run. (Not generic's bits: generic pushes a row's cells one by
// one in column order, the chunks merge sums of disjoint column ranges; the difference is a few
// ulp of the sum's rounding.)
template <class Cfg>
__global__ void __launch_bounds__(kLeanLseCombineThreads)
    sm90_indexer_lean_lse_combine(const LeanSplit split, const __grid_constant__ LeanLseArgs la) {
  static_assert(LeanTraits<Cfg>::kSplit && LseOf<Cfg>::value, "sm90_indexer_lean: the lse combine of a split lse variant");
  constexpr i64 kSeqQ = LeanTraits<Cfg>::kSeqQ;
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= la.rows) return;
  const float2* part = reinterpret_cast<const float2*>(la.partials);
  float2 ms = part[row];
  float m = ms.x, s = ms.y;
  for (i32 c = 1; c < split.parts; ++c) {
    ms = part[static_cast<i64>(c) * la.rows + row];
    lse_merge(m, s, ms.x, ms.y);
  }
  reinterpret_cast<float*>(la.lse)[lean_bshd_lse_offset(la, row, kSeqQ)] = lse_value(m, s);
}

// THD: the schedule of the call's packing is a launch parameter.
template <class Cfg>
__global__ void __launch_bounds__(LeanTraits<Cfg>::kThreads, 1)
    sm90_indexer_lean_thd(const __grid_constant__ TmaDesc q_map, const __grid_constant__ TmaDesc k_map, const LeanArgs a,
                          const __grid_constant__ LeanThdSchedule sched, const DsaScales sc, const __grid_constant__ LeanLseArgs la) {
  static_assert(LeanTraits<Cfg>::kThd, "sm90_indexer_lean: the THD kernel of a BSHD variant");
  lean_body<Cfg, LeanScoresEpilogue<Cfg>>(q_map, k_map, a, sc, LeanScoresEpilogue<Cfg>::args(la), LeanParamRuns{&sched});
}

}  // namespace dsa
