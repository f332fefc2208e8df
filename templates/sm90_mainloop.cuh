#pragma once
// The main loop the wgmma families share: one 64-row KV tile into a ring slot by TMA, and the
// product of a KV tile (wgmma A, 64 rows) with a consumer's 256 packed (token, head) Q rows
// (wgmma B) over D = 128 in eight k16 steps. Sharing it keeps the per-element k-order, and so
// the bits of every score, identical across families.
#include "dsa_types.cuh"
#include "ptx/gmma_desc.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"

namespace dsa {

// Q rows per consumer warpgroup (the wgmma N) and KV rows per tile (the wgmma M); both D halves
// of a tile are 128-byte-swizzled boxes of 64 bf16 columns.
constexpr int kPackedRows = 256;
constexpr int kKvRows = 64;
constexpr int kHalfBytesQ = kPackedRows * 128;
constexpr int kQBytes = 2 * kHalfBytesQ;       // 64 KB per consumer
constexpr int kHalfBytesKv = kKvRows * 128;
constexpr int kKvBytes = 2 * kHalfBytesKv;     // 16 KB per stage
// FP8 (E4M3): a 128-byte swizzled row holds all 128 columns of D, so a tile is one box.
constexpr int kQBytesFp8 = kPackedRows * 128;  // 32 KB per consumer
constexpr int kKvBytesFp8 = kKvRows * 128;     // 8 KB per stage
template <bool kFp8>
struct InputTiles {
  static constexpr int kBoxes = kFp8 ? 1 : 2;  // 128-byte boxes per row of D
  static constexpr int kBoxCols = kFp8 ? 128 : 64;
  static constexpr int kQBytes = kFp8 ? kQBytesFp8 : dsa::kQBytes;
  static constexpr int kKvBytes = kFp8 ? kKvBytesFp8 : dsa::kKvBytes;
  static constexpr int kBoxBytesQ = kQBytes / kBoxes;
  static constexpr int kBoxBytesKv = kKvBytes / kBoxes;
};

// Producer: KV tile `it` of a range starting at absolute K row `kv_begin` into ring slot
// `stage` (waits for the slot, arms its full barrier, advances stage/phase).
template <int kStages, bool kBshd, bool kFp8 = false>
__device__ __forceinline__ void load_kv_tile(const TmaDesc& k_map, u8* kv_smem, u64* kv_full, u64* kv_empty, u32& stage,
                                             u32& phase, i64 kv_begin, i32 it, i32 batch) {
  using I = InputTiles<kFp8>;
  mbarrier_wait(&kv_empty[stage], phase ^ 1);
  mbarrier_arrive_expect_tx(&kv_full[stage], I::kKvBytes);
  u8* dst = kv_smem + stage * I::kKvBytes;
  const i32 row = static_cast<i32>(kv_begin + static_cast<i64>(it) * kKvRows);
#pragma unroll
  for (int hd = 0; hd < I::kBoxes; ++hd) {
    if (kBshd)
      tma_load_3d(dst + hd * I::kBoxBytesKv, &k_map, &kv_full[stage], hd * I::kBoxCols, row, batch, kL2EvictNormal);
    else
      tma_load_2d(dst + hd * I::kBoxBytesKv, &k_map, &kv_full[stage], hd * I::kBoxCols, row, kL2EvictNormal);
  }
  if (++stage == kStages) {
    stage = 0;
    phase ^= 1;
  }
}

// Producer: one consumer's Q rows (tokens_per_consumer tokens x H heads, both D halves);
// kRows: the consumer's packed rows (lean with four consumers: 128).
template <bool kBshd, bool kFp8 = false, int kRows = kPackedRows>
__device__ __forceinline__ void load_q_rows(const TmaDesc& q_map, u8* dst, u64* bar, i32 tok0, i32 batch) {
  using I = InputTiles<kFp8>;
  constexpr int kBoxBytes = I::kBoxBytesQ / kPackedRows * kRows;
#pragma unroll
  for (int hd = 0; hd < I::kBoxes; ++hd) {
    if (kBshd)
      tma_load_4d(dst + hd * kBoxBytes, &q_map, bar, hd * I::kBoxCols, 0, tok0, batch, kL2EvictFirst);
    else
      tma_load_3d(dst + hd * kBoxBytes, &q_map, bar, hd * I::kBoxCols, 0, tok0, kL2EvictFirst);
  }
}

// One k-step's wgmma against 2R packed Q rows (R accumulators per thread): m64n256 for the
// families' 256 rows per consumer, m64n128 for lean's four consumers of 128. Every element of an
// m64n128 product has the bits of the m64n256 one (both sum the same k-steps in the same order).
__device__ __forceinline__ void wgmma_bf16(float (&d)[128], u64 a, u64 b, int scale_d) { wgmma_m64n256k16_bf16_ss(d, a, b, scale_d); }
__device__ __forceinline__ void wgmma_bf16(float (&d)[64], u64 a, u64 b, int scale_d) { wgmma_m64n128k16_bf16_ss(d, a, b, scale_d); }
__device__ __forceinline__ void wgmma_e4m3(float (&d)[128], u64 a, u64 b, int scale_d) { wgmma_m64n256k32_e4m3_ss(d, a, b, scale_d); }
__device__ __forceinline__ void wgmma_e4m3(float (&d)[64], u64 a, u64 b, int scale_d) { wgmma_m64n128k32_e4m3_ss(d, a, b, scale_d); }

// acc = KV tile x Q rows^T: issues the eight k16 steps and commits them as one group (the
// caller waits). kv_base / q_base: shared addresses of the tile's and the rows' D half 0 (a D
// half of the 2R rows is 2R x 128 bytes).
template <int R>
__device__ __forceinline__ void mma_kv_tile(float (&acc)[R], u32 kv_base, u32 q_base) {
  constexpr int kHalfBytes = 2 * R * 128;
  const u64 da0 = gmma_desc_sw128(kv_base), db0 = gmma_desc_sw128(q_base);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const u64 da = gmma_desc_advance(da0, (kk >> 2) * kHalfBytesKv + (kk & 3) * 32);
    const u64 db = gmma_desc_advance(db0, (kk >> 2) * kHalfBytes + (kk & 3) * 32);
    wgmma_bf16(acc, da, db, kk > 0 ? 1 : 0);
  }
  wgmma_commit_group();
}

// FP8: the same product over D = 128 in four k32 steps; each step's 32 columns are 32 bytes of
// the one 128-byte swizzled row (the descriptor advances as BF16's k16 steps do within a half).
template <int R>
__device__ __forceinline__ void mma_kv_tile_fp8(float (&acc)[R], u32 kv_base, u32 q_base) {
  const u64 da0 = gmma_desc_sw128(kv_base), db0 = gmma_desc_sw128(q_base);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const u64 da = gmma_desc_advance(da0, kk * 32);
    const u64 db = gmma_desc_advance(db0, kk * 32);
    wgmma_e4m3(acc, da, db, kk > 0 ? 1 : 0);
  }
  wgmma_commit_group();
}

template <bool kFp8, int R>
__device__ __forceinline__ void mma_tile(float (&acc)[R], u32 kv_base, u32 q_base) {
  if (kFp8) mma_kv_tile_fp8(acc, kv_base, q_base);
  else mma_kv_tile(acc, kv_base, q_base);
}

}  // namespace dsa
