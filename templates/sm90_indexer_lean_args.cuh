#pragma once
// Launch arguments of the lean family (host and device see the same layout: fixed-width
// scalars only). Shapes are compile-time constants of the variant; what stays here is what one
// compiled kernel serves at run time: the batch, the ratio, the offsets and sm_scale, and for
// THD the packing (cu_seqlens, T_k, the output's columns) and the planner's schedule of it.
#include "dsa_types.cuh"

namespace dsa {

struct LeanArgs {
  u64 w, out, offsets;   // device addresses (offsets 0 = not given)
  u64 cu_q, cu_k;        // THD: the device cu_seqlens (BSHD: 0)
  i64 batch;             // BSHD B (one launch runs all of them); THD n_seg
  i64 ratio;
  i64 num_items;         // the work items of the schedule: B x q-tiles (THD: q-tiles of T_q)
  i64 offsets_stride;    // elements between batches' q_causal_offsets
  i64 t_q, t_k;          // THD packed extents (BSHD: unused)
  i64 out_cols;          // THD: max_seqlen_k (local columns) or T_k (global)
  float sm_scale;        // read only when the variant is not the unit-scale one
  i32 has_offsets;
  u64 trace;             // measurements: a kTrace variant's phase stamps (LeanTrace; 0 = none)
  // kRowWindows variants (B 1 BSHD explicit windows, served as one packed sequence): the device
  // ks / ke (int32) of row r at r * win_stride (0 otherwise)
  u64 ks, ke;
  i64 win_stride;
};

// A kTrace variant's stamps (set_lean_trace, measurements only): per CTA and role (consumer
// warpgroup c at c, the producer warp at kLeanTraceProducer) a region of kLeanTraceWords u32:
// word 0 the records written, then records of kLeanTraceRecord words: {kind | i << 8, up to six
// SM clock stamps (%clock), the work item's round}. Kinds and stamps:
//   kLeanTraceItem (consumer, per item): before its Q / weight waits, after them;
//   kLeanTraceTile (consumer, per KV tile, i = iteration): before the KV stage wait, after it,
//     after the ring's named barrier (its turn), after the product's issue, after the product
//     (wgmma wait), after the epilogue's tile;
//   kLeanTraceKv (producer, per KV tile, i = iteration): before the stage's empty wait, after the
//     load's issue;
//   kLeanTraceQ (producer, per consumer's Q, i = consumer): before its Q buffer's empty wait,
//     after the load's issue.
constexpr int kLeanTraceRoles = 5;
constexpr int kLeanTraceProducer = 4;
constexpr int kLeanTraceWords = 16384;
constexpr int kLeanTraceRecord = 8;
enum LeanTraceKind : u32 { kLeanTraceItem = 1, kLeanTraceTile = 2, kLeanTraceKv = 3, kLeanTraceQ = 4 };

// The scores kernels' last launch parameter: the lse output of a kWithLse variant, fp32 (B, S_q)
// at strides (batch, row) or THD (T_q) at stride row (0: none), and THD's T_q (its rows past T_q
// have no lse). The split variant's chunks write their partial sums to `partials` (device
// workspace, float2 [parts][B][S_q]; rows = B x S_q) and sm90_indexer_lean_lse_combine merges them.
struct LeanLseArgs {
  u64 lse;
  i64 t_q;
  i64 stride_b, stride_row;
  u64 partials;
  i64 rows;
};

// sm90_indexer_lean_lse_combine's block: one thread per row (its __launch_bounds__ and the host's
// launch).
constexpr int kLeanLseCombineThreads = 256;

// How a consumer reads its weights per tile (LeanTraits::kWMode; the host sizes shared memory by
// it): 0 bf16 pairs held in registers for the item, 1 fp32 from shared memory (fp32 W, or FP8's
// w * q_scale), 2 bf16 pairs from shared memory (four consumers' THD and split variants, whose
// lane state leaves no room for those registers beside 104, and every lse variant).
DSA_HOST_DEVICE constexpr int lean_weight_mode(bool wf32, int consumers, bool thd, bool split, bool lse) {
  return wf32 ? 1 : ((consumers == 4 && (thd || split)) || lse) ? 2 : 0;
}

// The order of an item's KV tiles in a sweep whose epilogue asks for a sample first (lean's
// kSampleStride s > 1; host and device: the unit tests check it on the CPU). First, the sample
// tiles of an item of n KV tiles (s/2 + s j < n).
DSA_HOST_DEVICE constexpr i32 lean_sample_tiles_at(i32 n, i32 s) { return n > s / 2 ? (n - s / 2 + s - 1) / s : 0; }
template <int kS>
DSA_HOST_DEVICE constexpr i32 lean_sample_tiles(i32 n) {
  return lean_sample_tiles_at(n, kS);
}

// The KV tile of iteration i of an item of n: i itself (s 1), or the sample tiles first, then
// the others ascending (the j-th of them: 15 of every 16 tiles at s 16, skipping s/2). The
// stride a run-time value (the top-k lse replay, sm90_topk_lse.cuh), or a compile-time one
// (the kernels' lean_tile_at<kS>, the same arithmetic).
DSA_HOST_DEVICE constexpr i32 lean_tile_at_rt(i32 i, i32 n, i32 s) {
  if (s == 1) return i;
  const i32 ns = lean_sample_tiles_at(n, s);
  if (i < ns) return s / 2 + s * i;
  const i32 j = i - ns, o = j % (s - 1);
  return s * (j / (s - 1)) + o + (o >= s / 2 ? 1 : 0);
}
template <int kS>
DSA_HOST_DEVICE constexpr i32 lean_tile_at(i32 i, i32 n) {
  if constexpr (kS == 1) {
    (void)n;
    return i;
  } else {
    return lean_tile_at_rt(i, n, kS);
  }
}

// The split variant's launch parameter: each q-tile's KV tiles in `parts` chunks of `chunk`
// tiles (parts = ceil(the most KV tiles a q-tile can need / chunk)), planned per call from the
// shape, B and the grid.
struct LeanSplit {
  i32 parts, chunk;
};

// One run of the planner's q-tile order: ranks [rank0, rank0 + count) take tiles
// first + step * (r - rank0).
struct LeanRun {
  i32 first, step, count, rank0;
};

// How work items go to CTAs: round k hands items k*G .. k*G + G-1 to CTAs 0..G-1, in reverse
// on odd rounds for the snake.
enum LeanPolicy : i32 { kLeanRoundRobin = 0, kLeanSnake = 1 };

// THD: the schedule of one packing, planned per call from the host cu_seqlens and passed as a
// launch parameter (it is part of the kernel's parameter space, so CUDA graphs capture it by
// value). 192 runs keep the parameters under the 4 KB every driver accepts.
constexpr int kLeanThdMaxRuns = 192;
struct LeanThdSchedule {
  i32 policy, n_runs;
  i32 pad_[2];
  LeanRun runs[kLeanThdMaxRuns];
};

}  // namespace dsa
