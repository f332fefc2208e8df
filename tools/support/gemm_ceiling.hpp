#pragma once
// The dense GEMM ceilings of the card, measured in the same run as our kernels through cuBLAS
// (bf16) and cuBLASLt (FP8), both opened with dlopen, so the tool has no link-time dependency on them.
#include <string>

namespace dsa_support {

struct GemmCeiling {
  bool ok = false;
  double tflops = 0.0;
  double median_us = 0.0;
  int n = 0;
  std::string library;
  std::string why;  // when !ok
};

// C[n x n] = A[n x n] B[n x n], bf16 in/out, fp32 compute, random inputs, median of `reps`.
GemmCeiling measure_gemm_ceiling(int n, int reps, int device = 0);

// The FP8 ceiling (issue 22): D[n x n] = A^T B with A and B E4M3 (N(0,1) draws), D bf16, fp32
// compute and scale type, device scale pointers of 1.0 for A and B (as torch._scaled_mm passes
// them), in the "TN" layout Hopper's FP8 GEMMs take, through cuBLASLt (libcublasLt, dlopen: the
// cuBLAS GemmEx of the bf16 ceiling has no FP8 types); the heuristic's first algorithm, 32 MiB of
// workspace, median of `reps`. fast_accum: CUBLASLT_MATMUL_DESC_FAST_ACCUM (tensor-core partial
// sums never promoted to full fp32 on the way; torch._scaled_mm's use_fast_accum=True).
GemmCeiling measure_fp8_gemm_ceiling(int n, int reps, bool fast_accum, int device = 0);

}  // namespace dsa_support
