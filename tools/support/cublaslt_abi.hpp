#pragma once
// The part of cuBLASLt's C ABI that the FP8 GEMM ceiling uses, declared by hand: the tools open
// libcublasLt with dlopen and need neither its headers nor a link-time dependency (as the bf16
// ceiling does with cuBLAS). Values from the CUDA 13 cublasLt.h / cublas_api.h /
// library_types.h; tests/unit/test_fp8_bench.cpp checks them against those headers where the
// toolkit has them.
#include <cstddef>
#include <cstdint>

namespace dsa_support::cublaslt {

// cudaDataType_t
inline constexpr int kR32F = 0;
inline constexpr int kR16BF = 14;
inline constexpr int kR8FE4M3 = 28;
// cublasComputeType_t, cublasOperation_t
inline constexpr int kCompute32F = 68;
inline constexpr int kOpN = 0;
inline constexpr int kOpT = 1;
// cublasLtMatmulDescAttributes_t
inline constexpr int kDescTransA = 3;        // int32_t
inline constexpr int kDescTransB = 4;        // int32_t
inline constexpr int kDescFastAccum = 25;      // int8_t
// cublasLtMatmulPreferenceAttributes_t
inline constexpr int kPrefMaxWorkspaceBytes = 1;  // uint64_t

// cublasLtMatmulHeuristicResult_t
struct HeuristicResult {
  uint64_t algo[8];  // cublasLtMatmulAlgo_t
  size_t workspace_size;
  int state;  // cublasStatus_t
  float waves_count;
  int reserved[4];
};

using Create = int (*)(void** handle);
using Destroy = int (*)(void* handle);
using DescCreate = int (*)(void** desc, int compute_type, int scale_type);
using DescDestroy = int (*)(void* desc);
using DescSetAttribute = int (*)(void* desc, int attr, const void* buf, size_t bytes);
using LayoutCreate = int (*)(void** layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
using LayoutDestroy = int (*)(void* layout);
using PrefCreate = int (*)(void** pref);
using PrefDestroy = int (*)(void* pref);
using PrefSetAttribute = int (*)(void* pref, int attr, const void* buf, size_t bytes);
using AlgoGetHeuristic = int (*)(void* handle, void* desc, void* a, void* b, void* c, void* d, void* pref, int requested,
                                 HeuristicResult* results, int* returned);
// cudaStream_t is the driver's CUstream (the same struct).
using Matmul = int (*)(void* handle, void* desc, const void* alpha, const void* A, void* a_desc, const void* B, void* b_desc,
                       const void* beta, const void* C, void* c_desc, void* D, void* d_desc, const void* algo, void* workspace,
                       size_t workspace_bytes, void* stream);

}  // namespace dsa_support::cublaslt
