#pragma once
// Named barriers, register reallocation and small warp-level helpers.
#include "dsa_types.cuh"

namespace dsa {

// bar.sync id, n: waits until n threads (a multiple of 32) have arrived at barrier `id`.
__device__ __forceinline__ void named_barrier_sync(u32 id, u32 threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive id, n: arrives without waiting.
__device__ __forceinline__ void named_barrier_arrive(u32 id, u32 threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// setmaxnreg: must be executed by every warp of a warpgroup; needs a register cap at entry
// (__launch_bounds__(threads, 1)).
template <u32 R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <u32 R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: R must be a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// cp.async (sm_80+): global to shared without a register for the data; each thread's copies are
// complete and visible to it after cp_async_wait_all (to the other lanes after a __syncwarp).
// `smem` is a shared-window address (smem_addr), `gmem` a global one.
__device__ __forceinline__ void cp_async_4(u32 smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_16(u32 smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// The same copies with zero fill: `valid` false reads nothing and writes zeros (src-size 0).
__device__ __forceinline__ void cp_async_4_zfill(u32 smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 4u : 0u) : "memory");
}
__device__ __forceinline__ void cp_async_16_zfill(u32 smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16u : 0u) : "memory");
}
// One arrival on the mbarrier at `bar` (a shared-window address) once every cp.async this thread
// issued before it is complete (.noinc: it counts as one of the barrier's expected arrivals), so
// a waiter on the barrier sees the copies without the issuing thread ever waiting for them.
__device__ __forceinline__ void cp_async_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// A value every lane of the warp holds alike, broadcast from lane 0 so that the compiler knows
// it is warp-uniform: derived values (wgmma descriptors) then live in uniform registers instead
// of being moved there (R2UR) before every wgmma.
__device__ __forceinline__ u32 warp_uniform(u32 v) { return __shfl_sync(0xffffffffu, v, 0); }

// Two bf16 (the halves of a packed pair) widened to fp32, exactly. Inline asm: the compiler
// cannot rematerialize the widening from the packed pair at every use, so a caller that keeps
// the results keeps them in registers (lean's weights: 64 ALU instructions per KV tile less).
__device__ __forceinline__ float2 bf16x2_to_f32x2(u32 pair) {
  float2 f;
  asm("{\n\t"
      "shl.b32 %0, %2, 16;\n\t"
      "and.b32 %1, %2, 0xffff0000;\n\t"
      "}"
      : "=f"(f.x), "=f"(f.y)
      : "r"(pair));
  return f;
}

// ld.shared.v4.f32: a 16-byte shared-memory load the compiler cannot turn into a generic load.
__device__ __forceinline__ float4 ld_shared_f32x4(u32 addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

// ld.shared.v2.f32 / ld.shared.u32 from a 32-bit shared address.
__device__ __forceinline__ float2 ld_shared_f32x2(u32 addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared_f32x2(u32 addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// atom.shared.add.u32 at a 32-bit shared address: the old value.
__device__ __forceinline__ u32 atom_shared_add_u32(u32 addr, u32 v) {
  u32 old;
  asm volatile("atom.shared.add.u32 %0, [%1], %2;\n" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// bf16 bits -> fp32 (exact).
__device__ __forceinline__ float bf16_bits_to_float(u16 h) { return __uint_as_float(static_cast<u32>(h) << 16); }

// Streaming store: the score matrix is written once and never re-read by this kernel, so keep
// it from evicting the K prefix that every CTA re-reads from L2.
__device__ __forceinline__ void store_streaming(float* p, float v) {
  asm volatile("st.global.cs.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ void store_streaming4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

}  // namespace dsa
