"""A fused Triton peer of the DSA indexer forward (written for bench/peers.py).

One program owns a tile of TM consecutive query tokens of one segment (TM * H = M packed
(token, head) rows, head fastest) and sweeps the key tiles left to right:

    S = Q_tile (M x D, bf16) @ K_tile^T (D x BN, bf16)  -> fp32 accumulators (tl.dot)
    score = sm_scale * sum_h relu(S) * w                 -> (TM x BN), fp32
    masked cells (j >= ke(token)) -> -inf

Tiles past the tile's causal window (the largest window end of its tokens) are not computed:
the program only stores -inf there, so every output cell is written exactly once and no
pre-fill pass is needed. Programs take the q-tiles in reversed order (the last tiles have the
longest windows and start first), a hardware-order approximation of LPT.

Layout: everything is handled as packed THD with local columns: q (T_q, H, D), k (T_k, D),
w (T_q, H), out (T_q, n_cols) with segment b's rows [cu_q[b], cu_q[b+1]) and keys
[cu_k[b], cu_k[b+1]). BSHD with batch B is the special case cu_q = [0, S_q, 2 S_q, ...].
"""

from __future__ import annotations

import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"M": 128, "BN": 128}, num_warps=8, num_stages=3),
    triton.Config({"M": 128, "BN": 64}, num_warps=4, num_stages=3),
    triton.Config({"M": 256, "BN": 64}, num_warps=8, num_stages=2),
]


@triton.jit
def _indexer_fwd_kernel(
    Q, K, W, Out, CuQ, CuK, Offs,
    stride_qt, stride_qh, stride_kt, stride_wt, stride_ot,
    n_cols, max_q, ratio, sm_scale,
    H: tl.constexpr, D: tl.constexpr, M: tl.constexpr, BN: tl.constexpr,
):
    TM: tl.constexpr = M // H
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    q_start = tl.load(CuQ + seg)
    len_q = tl.load(CuQ + seg + 1) - q_start
    k_start = tl.load(CuK + seg)
    len_k = tl.load(CuK + seg + 1) - k_start
    n_mtiles = tl.cdiv(len_q, TM)
    mtile = n_mtiles - 1 - pid  # reversed: program 0 takes the last (longest) tile
    if mtile >= 0:
        # packed rows of the tile: r = token * H + head
        r = tl.arange(0, M)
        tok_r = mtile * TM + r // H
        head_r = r % H
        row_ok = tok_r < len_q
        d = tl.arange(0, D)
        q_rows = (q_start + tok_r).to(tl.int64)
        qt = tl.load(Q + q_rows[:, None] * stride_qt + head_r[:, None] * stride_qh + d[None, :], mask=row_ok[:, None], other=0.0)
        wv = tl.load(W + q_rows * stride_wt + head_r, mask=row_ok, other=0.0).to(tl.float32)

        # per-token window ends, int64 as the contract requires (floor and truncation agree
        # once negative numerators are mapped to 0)
        tok = mtile * TM + tl.arange(0, TM)
        tok_ok = tok < len_q
        num = tl.load(Offs + seg).to(tl.int64) + tok.to(tl.int64) + 1
        ke = tl.where(num > 0, num // ratio, 0)
        ke = tl.minimum(ke, len_k.to(tl.int64))
        ke = tl.where(tok_ok, ke, 0)
        n_vis = tl.cdiv(tl.max(ke, axis=0), BN).to(tl.int32)
        n_all = tl.cdiv(n_cols, BN)
        out_rows = Out + (q_start + tok).to(tl.int64)[:, None] * stride_ot

        for kb in range(0, n_vis):
            cols = kb * BN + tl.arange(0, BN)
            kt = tl.load(K + (k_start + cols).to(tl.int64)[:, None] * stride_kt + d[None, :], mask=(cols < len_k)[:, None], other=0.0)
            s = tl.dot(qt, tl.trans(kt))  # (M, BN) fp32
            s = tl.maximum(s, 0.0) * wv[:, None]
            s = tl.sum(tl.reshape(s, (TM, H, BN)), axis=1) * sm_scale
            s = tl.where(cols[None, :].to(tl.int64) < ke[:, None], s, float("-inf"))
            tl.store(out_rows + cols[None, :], s, mask=tok_ok[:, None] & (cols < n_cols)[None, :])
        neg = tl.full((TM, BN), float("-inf"), tl.float32)
        for kb in range(n_vis, n_all):
            cols = kb * BN + tl.arange(0, BN)
            tl.store(out_rows + cols[None, :], neg, mask=tok_ok[:, None] & (cols < n_cols)[None, :])


_tuned = triton.autotune(configs=CONFIGS, key=["n_cols", "max_q", "H"])(_indexer_fwd_kernel)


def indexer_forward_triton(q, k, w, out, cu_q, cu_k, offsets, max_q, ratio, sm_scale=1.0, config=None):
    """q (T_q, H, D) bf16, k (T_k, D) bf16, w (T_q, H) bf16/fp32, out (T_q, n_cols) fp32,
    cu_q / cu_k / offsets int32 on the device (offsets (n_seg,), zeros for none).
    `config`: a dict {"M", "BN", "num_warps", "num_stages"} to skip autotuning."""
    T_q, H, D = q.shape
    n_seg = cu_q.numel() - 1
    assert k.dim() == 2 and k.stride(1) == 1 and q.stride(2) == 1 and w.stride(1) == 1 and out.stride(1) == 1
    args = (
        q, k, w, out, cu_q, cu_k, offsets,
        q.stride(0), q.stride(1), k.stride(0), w.stride(0), out.stride(0),
        out.shape[1], max_q, ratio, sm_scale,
    )
    if config is None:
        grid = lambda meta: (triton.cdiv(max_q, meta["M"] // H), n_seg)  # noqa: E731
        _tuned[grid](*args, H=H, D=D)
    else:
        grid = (triton.cdiv(max_q, config["M"] // H), n_seg)
        _indexer_fwd_kernel[grid](
            *args, H=H, D=D, M=config["M"], BN=config["BN"], num_warps=config.get("num_warps", 4),
            num_stages=config.get("num_stages", 2),
        )
    return out


def best_config():
    """The configs the autotuner picked so far, keyed by its key tuple (for the report)."""
    return {str(k): str(v) for k, v in getattr(_tuned, "cache", {}).items()}


__all__ = ["indexer_forward_triton", "best_config", "CONFIGS"]
