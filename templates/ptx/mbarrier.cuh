#pragma once
// mbarrier wrappers (sm_90). Addresses are 32-bit shared-window addresses.
#include "dsa_types.cuh"

namespace dsa {

__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// mbarrier.init: the barrier starts in phase 0 expecting `count` arrivals.
__device__ __forceinline__ void mbarrier_init(u64* bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Makes mbarrier.init visible to the async proxy (TMA) and the rest of the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// mbarrier.arrive (release): one arrival.
__device__ __forceinline__ void mbarrier_arrive(u64* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}

// mbarrier.arrive.expect_tx: one arrival plus `bytes` of transaction count for TMA to deliver.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
               ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// mbarrier.try_wait.parity: true once the phase with this parity has completed.
__device__ __forceinline__ bool mbarrier_try_wait(u64* bar, u32 parity) {
  u32 done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity), "r"(0x989680u)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbarrier_wait(u64* bar, u32 parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

}  // namespace dsa
