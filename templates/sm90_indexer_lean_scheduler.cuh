#pragma once
// The lean family's schedulers (STYLE 13): one protocol, LeanWork over a Runs component that
// maps a rank of the planner's longest-first order to a q-tile; the BSHD order is compiled in,
// the THD order is a launch parameter. The roles of sm90_indexer_lean.cuh walk work items only
// through LeanWork::item, so a schedule replaces this file and no role.
#include "dsa_types.cuh"
#include "sm90_indexer_lean_args.cuh"

namespace dsa {

// The schedule as an interchangeable component: CTA `cta` of `grid` walks rounds k; its item
// of round k is position k*G + c (reversed on odd rounds for the snake), and position p is
// q-tile runs.tile(p / B) of batch p % B, so a larger B scales the planner's order without
// changing it. BSHD: the runs are emitted into the source (LeanStaticRuns); THD: they are a
// launch parameter planned per packing (LeanParamRuns).
template <class Sched>
struct LeanStaticRuns {
  __device__ __forceinline__ i32 policy() const { return Sched::kPolicy; }
  __device__ __forceinline__ bool tile(i64 r, i32& t) const {
#pragma unroll 1
    for (int i = 0; i < Sched::kNumRuns; ++i) {
      const LeanRun run = Sched::run(i);
      if (r < run.count) {
        t = run.first + run.step * static_cast<i32>(r);
        return true;
      }
      r -= run.count;
    }
    return false;
  }
};

struct LeanParamRuns {
  const LeanThdSchedule* s;  // in the kernel's parameter space
  __device__ __forceinline__ i32 policy() const { return s->policy; }
  __device__ __forceinline__ bool tile(i64 r, i32& t) const {
    i32 lo = 0, hi = s->n_runs;  // the last run with rank0 <= r
    while (hi - lo > 1) {
      const i32 mid = (lo + hi) >> 1;
      if (s->runs[mid].rank0 <= r) lo = mid; else hi = mid;
    }
    const LeanRun run = s->runs[lo];
    const i64 d = r - run.rank0;
    if (d < 0 || d >= run.count) return false;
    t = run.first + run.step * static_cast<i32>(d);
    return true;
  }
};

template <class Runs>
struct LeanWork {
  static constexpr bool kSplit = false;  // an item is a whole q-tile's KV sweep
  i64 num_items, batch;
  i32 cta, grid;
  Runs runs;
  __device__ __forceinline__ i64 rounds() const { return (num_items + grid - 1) / grid; }
  __device__ __forceinline__ bool item(i64 k, i32& tile, i32& b) const {
    const i64 slot = (runs.policy() == kLeanSnake && (k & 1)) ? grid - 1 - cta : cta;
    const i64 pos = k * grid + slot;
    if (pos >= num_items) return false;
    b = static_cast<i32>(pos % batch);
    return runs.tile(pos / batch, tile);
  }
  __device__ __forceinline__ bool item(i64 k, i32& tile, i32& b, i32& part) const {
    part = 0;
    return item(k, tile, b);
  }
};

// Runs whose split work may put a q-tile's chunks next to each other (LeanSplitWork: the runs'
// split_pos), specialized by such runs (the fused top-k's redo pool); none of the scores kernels.
template <class Runs>
struct LeanSplitOrder {
  static constexpr bool value = false;
};

// The split variant (BSHD calls whose q-tiles x B cannot fill the GPU): every q-tile's KV tiles
// are cut into `parts` chunks of `chunk` tiles (the launch's LeanSplit), and an item is one chunk
// of one q-tile. Position p is chunk p / base of the unsplit item p % base (base = q-tiles x B),
// so the CTAs of a round share chunks of K; the order within a chunk is the planner's. Runs with
// LeanSplitOrder may place the position otherwise (runs.split_pos).
template <class Runs>
struct LeanSplitWork {
  static constexpr bool kSplit = true;
  i64 num_items, batch;  // num_items = base x parts
  i32 cta, grid;
  Runs runs;
  i64 base;
  i32 chunk;
  __device__ __forceinline__ i64 rounds() const { return (num_items + grid - 1) / grid; }
  __device__ __forceinline__ bool item(i64 k, i32& tile, i32& b, i32& part) const {
    const i64 slot = (runs.policy() == kLeanSnake && (k & 1)) ? grid - 1 - cta : cta;
    const i64 pos = k * grid + slot;
    if (pos >= num_items) return false;
    i64 q;
    if constexpr (LeanSplitOrder<Runs>::value) {
      runs.split_pos(pos, base, num_items / base, part, q);
    } else {
      part = static_cast<i32>(pos / base);
      q = pos - static_cast<i64>(part) * base;
    }
    b = static_cast<i32>(q % batch);
    return runs.tile(q / batch, tile);
  }
};

// The KV tiles [first, first + n) an item sweeps, of the `full` its rows need.
struct LeanRange {
  i32 first, n;
};
template <class Work>
__device__ __forceinline__ LeanRange lean_range(const Work& w, i32 full, i32 part) {
  if constexpr (!Work::kSplit) {
    (void)w;
    (void)part;
    return LeanRange{0, full};
  } else {
    const i32 first = part * w.chunk;
    const i32 left = full - first;
    return LeanRange{first, left <= 0 ? 0 : left < w.chunk ? left : w.chunk};
  }
}

}  // namespace dsa
