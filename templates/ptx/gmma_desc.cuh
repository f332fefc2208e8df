#pragma once
// Shared-memory matrix descriptor for wgmma operands (sm_90 layout, not tcgen05's).
//   bits [0,14)  start address >> 4      bits [16,30) leading byte offset >> 4 (unused for
//   K-major 128B swizzle; written as 1)    bits [32,46) stride byte offset >> 4 (1024 B: the
//   distance between 8-row groups of 128-byte rows)   bits [49,52) base offset (0: every tile
//   is 1024-byte aligned)   bits [62,64) layout (1 = 128-byte swizzle).
#include "dsa_types.cuh"
#include "ptx/mbarrier.cuh"

namespace dsa {

__device__ __forceinline__ u64 gmma_desc_sw128(u32 smem_address) {
  u64 d = 0;
  d |= static_cast<u64>((smem_address & 0x3FFFF) >> 4);
  d |= static_cast<u64>(1) << 16;
  d |= static_cast<u64>(1024 >> 4) << 32;
  d |= static_cast<u64>(1) << 62;
  return d;
}

// Advances a descriptor's start address by `bytes` (a multiple of 16 that keeps the address
// inside the shared window, so the 14-bit field cannot carry).
__device__ __forceinline__ u64 gmma_desc_advance(u64 desc, u32 bytes) {
  // the field is the low word's bits [0, 14) and cannot carry: a 32-bit add
  return (desc & 0xffffffff00000000ull) | static_cast<u64>(static_cast<u32>(desc) + (bytes >> 4));
}

}  // namespace dsa
