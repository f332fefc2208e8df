#pragma once
// The scores operation's problem as the device sees it, shared by every scores family: the
// argument block of dsa_args.cuh and the TMA geometry of its Q and K operands.
#include "core/problem.hpp"
#include "cuda/launch.hpp"
#include "dsa_args.cuh"

namespace dsa_indexer::detail {

dsa::DsaArgs make_args(const Problem& p);
// The FP8 scales of a call (zero addresses when not given), the generic kernel's last parameter.
dsa::DsaScales make_scales(const Problem& p);

// Q as (D, H, tokens[, B]) with a box of 64 D x H heads x `tokens_per_box` tokens; K as
// (D, S_k[, B]) with a box of 64 D x 64 rows. Both 128-byte swizzled.
TmaGeometry q_tma_geometry(const Problem& p, int tokens_per_box);
TmaGeometry k_tma_geometry(const Problem& p);

}  // namespace dsa_indexer::detail
