#pragma once
// The unfused top-k (src/families/sm90_topk_unfused.cpp): for each block of query rows, (1)
// sm90_topk_rows derives every row's visible window from the problem exactly as the score
// families do (row_window of dsa_window.cuh) and writes it twice: as the explicit window of the
// block's score call (in the block's key columns) and as the selection's TopkRow; (2) a score
// family fills the block's rows of the workspace; (3) sm90_topk_select picks each row's k best.
// The windows are the score operation's own, so the selected scores are bitwise the values
// indexer_forward returns for those cells. With an lse output, BSHD blocks take it from
// sm90_topk_lse (the fused sweep's order, sm90_topk_lse.cuh), THD blocks from the selection.
#include "dsa_window.cuh"
#include "sm90_topk_lse.cuh"
#include "sm90_topk_select.cuh"
#include "sm90_topk_unfused_args.cuh"

namespace dsa {

// One thread per row of the block.
template <int kLayout>
__global__ void __launch_bounds__(256) sm90_topk_rows(const __grid_constant__ TopkBlockArgs b) {
  const i64 r = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= b.n_rows) {
    if (r < b.n_win) b.ks[r] = b.ke[r] = 0;  // a padding row of the score call: nothing visible
    return;
  }
  // BSHD: row b.row0 + r of batch b.batch; THD: packed row b.row0 + r.
  const RowWindow w = kLayout == kLayoutBshd ? row_window<kLayout>(b.a, b.batch, b.row0 + r)
                                             : row_window<kLayout>(b.a, b.row0 + r, 0);
  i32 lo = 0, hi = 0, bias = 0;
  if (w.valid && !w.empty()) {
    // Every visible key of the block's rows lies in [k_base, k_base + width): the host chose the
    // block's key range as the union of its rows' segments (THD) or the batch's keys (BSHD).
    lo = static_cast<i32>(w.lo - b.k_base);
    hi = static_cast<i32>(w.hi - b.k_base);
  }
  // Output index of workspace column c: the key's absolute row (k_base + c) made local to its
  // segment (THD: minus the segment's first key row, row_window's base for local columns), or
  // global (BSHD: plus b * S_k).
  if (kLayout == kLayoutBshd) {
    bias = static_cast<i32>(b.k_base + (b.global ? b.batch * b.a.s_k : 0));
  } else {
    const ThdRow t = thd_row(b.a.cu_q, b.a.cu_k, b.a.batch, b.a.t_k, b.row0 + r);
    bias = static_cast<i32>(b.global ? b.k_base : b.k_base - t.k0);
  }
  if (kLayout == kLayoutBshd && r == 0 && b.offset) {
    // The block's rows as a causal problem of their own: the offset of its first row, saturated
    // at INT32_MAX. The host asks for this only when S_k * ratio <= 2^31, where every row past
    // the saturation sees all S_k keys both ways (floor(2^31 / ratio) >= S_k), so the windows are
    // exactly the call's.
    const i64 off = b.a.has_offsets ? static_cast<i64>(load_i32(b.a.offsets, b.batch * b.a.offsets_stride)) : 0;
    const i64 shifted = off + b.row0;
    *b.offset = static_cast<i32>(shifted > 2147483647ll ? 2147483647ll : shifted);
  }
  b.ks[r] = lo;
  b.ke[r] = hi;
  TopkRow row;
  row.lo = lo;
  row.hi = hi;
  row.bias = bias;
  row.pad = 0;
  b.rows[r] = row;
}

}  // namespace dsa
