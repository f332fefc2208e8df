#pragma once
// The bf16 dense GEMM ceiling of the card, measured in the same run as our kernels through
// cuBLAS (opened with dlopen, so the tool has no link-time dependency on it).
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

}  // namespace dsa_support
