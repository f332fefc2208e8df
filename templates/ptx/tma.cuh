#pragma once
// TMA (cp.async.bulk.tensor) wrappers. The tensor map is a __grid_constant__ kernel parameter
// of 128 bytes encoded on the host by cuTensorMapEncodeTiled.
#include "dsa_types.cuh"
#include "ptx/mbarrier.cuh"

namespace dsa {

struct __align__(64) TmaDesc {
  char bytes[128];
};

// prefetch.tensormap: pulls the descriptor into the cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* desc) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(desc)) : "memory");
}

// L2 cache-policy hints for cp.async.bulk.tensor ... .L2::cache_hint (CacheHintSm90 values).
constexpr u64 kL2EvictNormal = 0x1000000000000000ull;
constexpr u64 kL2EvictFirst = 0x12F0000000000000ull;
constexpr u64 kL2EvictLast = 0x14F0000000000000ull;

// 2-D/3-D/4-D tiled loads global -> shared, completing on `bar` (complete_tx::bytes).
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDesc* desc, u64* bar, i32 c0, i32 c1, u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(hint)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDesc* desc, u64* bar, i32 c0, i32 c1, i32 c2, u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5}], [%2], %6;\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "l"(hint)
      : "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const TmaDesc* desc, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3,
                                            u64 hint) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<u64>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "l"(hint)
      : "memory");
}

}  // namespace dsa
