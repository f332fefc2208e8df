#pragma once
// Launch arguments of the lean family (host and device see the same layout: fixed-width
// scalars only). Shapes are compile-time constants of the variant; what stays here is what one
// compiled kernel serves at run time: the batch, the ratio, the offsets and sm_scale.
#include "dsa_types.cuh"

namespace dsa {

struct LeanArgs {
  u64 w, out, offsets;   // device addresses (offsets 0 = not given)
  i64 batch;             // B: one launch runs all of them
  i64 ratio;
  i64 num_items;         // B x q-tiles: the work items of the static schedule
  i64 offsets_stride;    // elements between batches' q_causal_offsets
  float sm_scale;        // read only when the variant is not the unit-scale one
  i32 has_offsets;
};

// One run of the planner's q-tile order: ranks [r0, r0 + count) take tiles first + step * (r - r0).
struct LeanRun {
  i32 first, step, count, pad_;
};

// How work items go to CTAs: round k hands items k*G .. k*G + G-1 to CTAs 0..G-1, in reverse
// on odd rounds for the snake.
enum LeanPolicy : i32 { kLeanRoundRobin = 0, kLeanSnake = 1 };

}  // namespace dsa
