#pragma once
// Launch arguments of the top-k selection kernel (sm90_topk_select.cuh). Host and device see the
// same layout (fixed-width scalars and plain pointers only), so the host side fills this struct
// and passes it by value.
#include "dsa_types.cuh"

namespace dsa {

// The largest k one launch serves: the selected (key, column) pairs of a row are staged in
// shared memory (kTopkCandCap entries, >= kTopkMaxK) before they are written.
constexpr i32 kTopkMaxK = 2048;

// Dynamic shared memory: [histogram kTopkBins u32][candidate keys kTopkCandCap u32]
// [candidate columns kTopkCandCap i32][selected keys kTopkMaxK u32][selected columns kTopkMaxK
// i32][row cache: the rest]. The host chooses the launch's dynamic size as kTopkFixedSmemBytes
// + cache bytes; the kernel reads %dynamic_smem_size and keeps the first (size - fixed) / 16
// aligned 4-float words of a row in shared memory on its exact (histogram) path.
constexpr i32 kTopkBins = 2048;         // 11-bit radix digit
constexpr i32 kTopkCandCap = 4096;      // candidates refined in shared memory
constexpr i32 kTopkSampleWords = 1024;  // 4-float words sampled to estimate the filter threshold
constexpr i32 kTopkFixedSmemBytes = (kTopkBins + 2 * kTopkCandCap + 2 * kTopkMaxK) * 4;
// The short-row kernel (sm90_topk_select_short<256>): rows of at most kTopkShortCells cells in
// registers, 4 words a thread; dynamic shared memory [3 histograms][selected keys][columns].
constexpr i32 kTopkShortCells = 4096;
constexpr i32 kTopkMediumCells = 8192;  // sm90_topk_select_short<256, 8>: 8 words a thread
constexpr i32 kTopkShortSmemBytes = (3 * kTopkBins + 2 * kTopkMaxK) * 4;

// Visible workspace columns [lo, hi) of one row (lo == hi: an empty row); the output index of
// column c is c + bias.
struct TopkRow {
  i32 lo, hi;
  i32 bias;
  i32 pad;
};

struct TopkSelectArgs {
  const float* scores; i64 ld;      // workspace: row r is scores[r * ld + c] (4-byte aligned)
  const TopkRow* rows; i64 n_rows;  // one per workspace row
  i32 k;                            // 1..kTopkMaxK
  i32 sort_by_score;                // 0: indices ascending within a row; 1: by (score desc, index asc)
  i32* indices; i64 indices_ld;     // out: n_rows x k
  float* values; i64 values_ld;     // optional (nullptr): the selected scores, same order as indices
  float* softmax; i64 softmax_ld;   // optional: softmax over the selected logits (padding slots 0)
  float* lse; i64 lse_stride;       // optional: log(sum over all visible cells exp(score))
  i32 skip_words;                   // sm90_topk_select_short: rows of at most this many words (> 0)
                                    // an earlier launch selected (0: none); the other kernels ignore it
  i32 pad;
};

// The top-k lse of a BSHD block in the fused sweep's order (sm90_topk_lse.cuh).
struct TopkLseArgs {
  const float* scores; i64 ld;      // the block's scores: row r at scores[r * ld]
  const TopkRow* rows; i64 n_rows;  // visible columns [lo, hi) per row; q-tiles of 8 rows from 0
  i32 sample_stride;                // lean_topk_sample_stride(S_k): the sweep's tile order
  i32 pad;
  float* lse; i64 lse_stride;       // out: row r's lse at lse[r * lse_stride]
};

}  // namespace dsa
