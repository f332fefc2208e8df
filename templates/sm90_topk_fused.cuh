#pragma once
// The fused top-k's own module (src/families/sm90_topk_fused.cpp): the rows kernel it shares
// with the unfused path (each row's window and output bias), the selection over each row's
// candidates, and the split redo's slots and joins. The score sweep between them is a module of
// its own per block shape (sm90_topk_fused_sweep.cuh).
#include "sm90_topk_candidates.cuh"
#include "sm90_topk_redo.cuh"
#include "sm90_topk_unfused.cuh"
