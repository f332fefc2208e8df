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
};

}  // namespace dsa
