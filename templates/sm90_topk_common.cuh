#pragma once
// Device code shared by the top-k kernels (sm90_topk_select.cuh over score rows,
// sm90_topk_candidates.cuh over candidate lists): the ranking key, block-wide primitives, the
// bitonic sort, the column ranking and the output writer. Both kernels end in topk_write_row, so for the same
// selected set, slot order, k and T they write the same bits (the fused path is held to the
// unfused one bit for bit). The contract is documented in sm90_topk_select.cuh.
#include "sm90_topk_select_args.cuh"

namespace dsa {

constexpr u32 kTopkNanKey = 0xffffffffu;
// Key 0 marks the lanes of a partial word outside [lo, hi): no float maps to it (negative NaNs
// map to kTopkNanKey), -inf is 0x007fffff, so it ranks below every visible cell and its
// histogram bin (0) can never be a threshold bin.
constexpr u32 kTopkNoKey = 0u;
constexpr u32 kTopkPosInfKey = 0xff800000u;
constexpr u32 kTopkNegInfKey = 0x007fffffu;
constexpr int kTopkUnroll = 4;  // words in flight per thread (global loads, ordered-pass tiles)

__device__ __forceinline__ u32 topk_key(float x) {
  const u32 b = __float_as_uint(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return kTopkNanKey;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// Inverse of topk_key (a NaN key gives the canonical 0x7fffffff).
__device__ __forceinline__ float topk_key_value(u32 k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ float topk_canonical_nan() { return __uint_as_float(0x7fffffffu); }
// A candidate list's entry (sm90_topk_candidates_args.cuh): the composite of a cell's key and
// column, ordered as (key desc, column asc) by its value; and the column back from it.
__device__ __forceinline__ u64 topk_composite(u32 key, u32 col) {
  return (static_cast<u64>(key) << 32) | static_cast<u64>(0xffffffffu - col);
}
__device__ __forceinline__ i32 topk_composite_col(u64 c) { return static_cast<i32>(0xffffffffu - static_cast<u32>(c)); }

// exp(v - m) with the rounding error of v - m (TwoSum) folded back in: without it a spread of
// 20 between v and m costs ~1e-6 relative in the exponential. Requires m finite.
__device__ __forceinline__ float topk_exp_diff(float v, float m) {
  const float d = v - m;
  if (!(d > -3.0e38f)) return expf(d);  // v = -inf (or d overflowed to -inf): exp is 0
  const float bv = d - v;
  const float err = (v - (d - bv)) + (-m - bv);
  const float e = expf(d);
  return fmaf(e, err, e);
}

// Small block-wide primitives on static shared scratch. Each begins with a barrier, so a call
// may follow another without one.
struct TopkScratch {
  u32 tot[kTopkUnroll][32];
  u32 pre[kTopkUnroll][32];
  u32 sum[kTopkUnroll];
  double dsum[32];
  double dtotal;
  u32 umax;
  u32 bin, above;  // topk_find_bin's result
  u32 cand_count;
};

__device__ __forceinline__ u32 topk_warp_incl_scan(u32 v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const u32 t = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

// Exclusive scan of U values per thread in the order (u, thread): ex[u] = sum of v over every
// (u', t') before (u, threadIdx.x). Returns the block total.
template <int T, int U>
__device__ __forceinline__ u32 topk_block_scan(TopkScratch& s, const u32 (&v)[U], u32 (&ex)[U]) {
  static_assert(T % 32 == 0 && T / 32 >= U && T <= 1024, "topk_block_scan: T must be a multiple of 32 in [32U, 1024]");
  constexpr int NW = T / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u32 incl[U];
  __syncthreads();
#pragma unroll
  for (int u = 0; u < U; ++u) {
    incl[u] = topk_warp_incl_scan(v[u]);
    if (lane == 31) s.tot[u][warp] = incl[u];
  }
  __syncthreads();
  if (warp < U) {
    const u32 x = lane < NW ? s.tot[warp][lane] : 0u;
    const u32 xi = topk_warp_incl_scan(x);
    if (lane < NW) s.pre[warp][lane] = xi - x;
    if (lane == 31) s.sum[warp] = xi;
  }
  __syncthreads();
  u32 base = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    ex[u] = base + s.pre[u][warp] + incl[u] - v[u];
    base += s.sum[u];
  }
  return base;
}

template <int T>
__device__ __forceinline__ u32 topk_block_max(TopkScratch& s, u32 v) {
  constexpr int NW = T / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  v = __reduce_max_sync(0xffffffffu, v);
  if (lane == 0) s.tot[0][warp] = v;
  __syncthreads();
  if (warp == 0) {
    u32 x = lane < NW ? s.tot[0][lane] : 0u;
    x = __reduce_max_sync(0xffffffffu, x);
    if (lane == 0) s.umax = x;
  }
  __syncthreads();
  return s.umax;
}

// Fixed-order fp64 sum: per-thread partials (caller's fixed assignment), a shuffle tree per
// warp, then warp 0 over the warp sums. The same bits on every run.
template <int T>
__device__ __forceinline__ double topk_block_sum(TopkScratch& s, double v) {
  constexpr int NW = T / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  if (lane == 0) s.dsum[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double x = lane < NW ? s.dsum[lane] : 0.0;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) x += __shfl_down_sync(0xffffffffu, x, d);
    if (lane == 0) s.dtotal = x;
  }
  __syncthreads();
  return s.dtotal;
}

// The bin b with (count above b) < need <= (count above b) + hist[b], scanning from the top
// bin down. The caller guarantees sum(hist) >= need >= 1, so exactly one thread finds it.
template <int T>
__device__ __forceinline__ void topk_find_bin(TopkScratch& s, const u32* hist, u32 need, u32& bin, u32& above) {
  static_assert(kTopkBins % T == 0, "topk_find_bin: T must divide kTopkBins");
  constexpr int kPer = kTopkBins / T;
  const int top = kTopkBins - 1 - static_cast<int>(threadIdx.x) * kPer;
  u32 c[kPer];
  u32 v[1] = {0u}, ex[1];
  __syncthreads();  // the histogram is complete
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    c[i] = hist[top - i];
    v[0] += c[i];
  }
  topk_block_scan<T, 1>(s, v, ex);
  u32 acc = ex[0];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (acc < need && acc + c[i] >= need) {
      s.bin = static_cast<u32>(top - i);
      s.above = acc;
    }
    acc += c[i];
  }
  __syncthreads();
  bin = s.bin;
  above = s.above;
}

// Ascending by (key desc, column asc): the score order of the output.
__device__ __forceinline__ bool topk_before(u32 ka, i32 ca, u32 kb, i32 cb) {
  return ka > kb || (ka == kb && ca < cb);
}

// The two slot orders as sort predicates ("a before b"). Column order breaks a column tie by
// key desc only so that the sort's padding (kTopkNoKey, 0x7fffffff) stays behind a real cell
// of column 0x7fffffff; real columns of one row are unique.
struct TopkScoreOrder {
  __device__ __forceinline__ bool operator()(u32 ka, i32 ca, u32 kb, i32 cb) const { return topk_before(ka, ca, kb, cb); }
};
struct TopkColumnOrder {
  __device__ __forceinline__ bool operator()(u32 ka, i32 ca, u32 kb, i32 cb) const {
    return ca < cb || (ca == cb && ka > kb);
  }
};

// Sorts n2 (a power of two) (key, column) pairs ascending by `before`, a strict total order on
// them, so the result depends only on the set, not on where the pairs started.
template <int T, class Before>
__device__ __forceinline__ void topk_bitonic_sort(u32* key, i32* col, int n2, Before before) {
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < n2 / 2; i += T) {
        const int pos = 2 * i - (i & (stride - 1));
        const int par = pos + stride;
        const u32 ka = key[pos], kb = key[par];
        const i32 ca = col[pos], cb = col[par];
        const bool up = (pos & size) == 0;
        if (up ? before(kb, cb, ka, ca) : before(ka, ca, kb, cb)) {
          key[pos] = kb;
          key[par] = ka;
          col[pos] = cb;
          col[par] = ca;
        }
      }
    }
  }
  __syncthreads();
}

// Sorts the n_sel (<= kTopkMaxK) selected pairs in place by `before`: padded with pairs that
// rank after every selected key (kTopkNoKey is below every float's key) up to a power of two,
// which the kTopkMaxK entries of room always hold.
template <int T, class Before>
__device__ __forceinline__ void topk_sort_slots(u32* skey, i32* scol, u32 n_sel, Before before) {
  const int tid = threadIdx.x;
  int n2 = 1;
  while (n2 < static_cast<int>(n_sel)) n2 <<= 1;
  for (int i = static_cast<int>(n_sel) + tid; i < n2; i += T) {
    skey[i] = kTopkNoKey;
    scol[i] = 0x7fffffff;
  }
  topk_bitonic_sort<T>(skey, scol, n2, before);
}

// Puts the n_sel (<= kTopkMaxK) selected pairs in ascending column order in place, every
// column in [0, width) and unique: a bitmap of the columns in `bits` (2 * ceil(width / 32)
// words of shared memory the caller has free: the bitmap, then each word's exclusive prefix of
// popcounts), and each pair moves to its column's rank. O(n_sel / T + width / (32 T)) steps
// per thread against the bitonic sort's O(n_sel log^2 n_sel / T); the same result, since the
// order is a function of the set. Begins with a barrier (the caller's writes of skey/scol and
// its last reads of `bits`' memory); ends without one (topk_write_row begins with one).
template <int T>
__device__ __forceinline__ void topk_column_rank(TopkScratch& s, u32* skey, i32* scol, u32 n_sel, u32* bits, u32 width) {
  static_assert(kTopkMaxK % T == 0, "topk_column_rank: T must divide kTopkMaxK");
  constexpr int kPer = kTopkMaxK / T;
  const u32 tid = threadIdx.x;
  const u32 nw = (width + 31u) / 32u;
  u32* const pre = bits + nw;
  __syncthreads();
  for (u32 i = tid; i < nw; i += T) bits[i] = 0u;
  u32 key[kPer];
  i32 col[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const u32 i = tid + static_cast<u32>(u * T);
    key[u] = i < n_sel ? skey[i] : 0u;
    col[u] = i < n_sel ? scol[i] : 0;
  }
  __syncthreads();  // the bitmap is clear
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (tid + static_cast<u32>(u * T) < n_sel) atomicOr(&bits[static_cast<u32>(col[u]) >> 5], 1u << (col[u] & 31));
  __syncthreads();  // the bitmap is complete
  // each thread's run of words, scanned across the block
  const u32 per = (nw + T - 1u) / T;
  const u32 w0 = min(tid * per, nw), w1 = min(w0 + per, nw);
  u32 v[1] = {0u}, ex[1];
  for (u32 w = w0; w < w1; ++w) v[0] += static_cast<u32>(__popc(bits[w]));
  topk_block_scan<T, 1>(s, v, ex);
  for (u32 w = w0; w < w1; ++w) {
    pre[w] = ex[0];
    ex[0] += static_cast<u32>(__popc(bits[w]));
  }
  __syncthreads();  // the prefixes are complete; every pair is in registers
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (tid + static_cast<u32>(u * T) < n_sel) {
      const u32 c = static_cast<u32>(col[u]), w = c >> 5;
      const u32 r = pre[w] + static_cast<u32>(__popc(bits[w] & ((1u << (c & 31u)) - 1u)));
      skey[r] = key[u];
      scol[r] = col[u];
    }
  }
}

__device__ __forceinline__ u32 topk_dynamic_smem_bytes() {
  u32 r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// The last step of both kernels: the optional score order, then every output of one row in
// slot order. On entry skey/scol hold the n_sel (<= k) selected (key, column) pairs in
// ascending column order, or in any order when a.sort_by_score (the sort's result depends only
// on the set), with kTopkMaxK entries of room; max_key is the row's largest key (always
// selected: k >= 1; unused when n_sel is 0) and the index of column c is lo + c + bias. The
// softmax sum runs over the slots in their final order with the thread assignment of T, so the
// same selection, k and T give the same bits whichever kernel selected it. Args: the kernel's
// launch arguments (sort_by_score, indices, values, softmax and their leading dimensions).
template <int T, class Args>
__device__ __forceinline__ void topk_write_row(TopkScratch& s, const Args& a, i64 row, u32 k, u32* skey, i32* scol,
                                               u32 n_sel, u32 max_key, i32 lo, i32 bias) {
  const int tid = threadIdx.x;
  __syncthreads();  // the caller's writes of skey/scol
  if (a.sort_by_score && n_sel > 1u) topk_sort_slots<T>(skey, scol, n_sel, TopkScoreOrder{});
  // softmax: 0 = finite max (normalize), 1 = NaN slots, 2 = zero slots.
  int sm_mode = 0;
  float m = 0.0f;
  double total = 0.0;
  if (a.softmax != nullptr && n_sel > 0u) {
    m = topk_key_value(max_key);
    if (max_key == kTopkNanKey || max_key == kTopkPosInfKey) {
      sm_mode = 1;
    } else if (max_key == kTopkNegInfKey) {
      sm_mode = 2;
    } else {
      double acc = 0.0;
      for (u32 i = tid; i < n_sel; i += T) acc += static_cast<double>(topk_exp_diff(topk_key_value(skey[i]), m));
      total = topk_block_sum<T>(s, acc);
    }
  }
  for (u32 i = tid; i < k; i += T) {
    const bool sel = i < n_sel;
    const u32 key = sel ? skey[i] : 0u;
    const float v = sel ? topk_key_value(key) : __uint_as_float(0xff800000u);
    a.indices[row * a.indices_ld + i] = sel ? lo + scol[i] + bias : -1;
    if (a.values != nullptr) a.values[row * a.values_ld + i] = v;
    if (a.softmax != nullptr) {
      float sm = 0.0f;
      if (sel) {
        if (sm_mode == 1) sm = topk_canonical_nan();
        else if (sm_mode == 0) sm = static_cast<float>(static_cast<double>(topk_exp_diff(v, m)) / total);
      }
      a.softmax[row * a.softmax_ld + i] = sm;
    }
  }
}

}  // namespace dsa
