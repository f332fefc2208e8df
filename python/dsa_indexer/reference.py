"""A PyTorch oracle of the contract (any device, fp64 by default) and comparison helpers.

Slow and memory-hungry by design (it materializes a (rows, H, S_k) block per chunk of query
rows): meant for tests and for checking peers on small shapes, not for benchmarks.
"""

from __future__ import annotations


def _windows_end(offset: int, n_rows: int, ratio: int, s_k: int, device):
    import torch

    i = torch.arange(n_rows, device=device, dtype=torch.int64)
    return torch.clamp(torch.div(offset + i + 1, ratio, rounding_mode="floor"), 0, s_k)


def _block_scores(q, k, w, dtype, sm_scale, chunk_bytes):
    """sm_scale * sum_h relu(q[i,h,:] . k[j,:]) * w[i,h] for q (S, H, D), k (S_k, D), w (S, H)."""
    import torch

    s, h, _ = q.shape
    s_k = k.shape[0]
    out = torch.empty((s, s_k), dtype=dtype, device=q.device)
    kd = k.to(dtype)
    rows = max(1, chunk_bytes // max(1, h * s_k * torch.finfo(dtype).bits // 8))
    for r0 in range(0, s, rows):
        qc = q[r0 : r0 + rows].to(dtype)
        logits = torch.einsum("ihd,jd->ihj", qc, kd)
        out[r0 : r0 + rows] = (logits.clamp_min_(0) * w[r0 : r0 + rows].to(dtype)[:, :, None]).sum(1)
    return out * sm_scale


def indexer_forward_reference(
    q,
    k,
    w,
    ratio: int = 4,
    sm_scale: float = 1.0,
    q_causal_offsets=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    thd_columns: str = "local",
    ks=None,
    ke=None,
    dtype=None,
    chunk_bytes: int = 256 << 20,
    q_scale=None,
    k_scale=None,
    window_columns: str = "key",
):
    """Scores as the contract defines them, in `dtype` (default float64), on q's device.

    Same arguments as `dsa_indexer.indexer_forward` (BSHD or THD local/global columns,
    offsets, explicit ks/ke windows intersected with each row's valid columns, FP8 q/k with
    their ``q_scale`` / ``k_scale``, ``window_columns="window_start"`` with ``max_seqlen_k`` columns
    for BSHD). Returns the scores tensor; use `reference_lse` for the LSE.

    FP8: the scores of the dequantized inputs, ``q8 * q_scale`` and ``k8 * k_scale`` in `dtype`
    (the contract's relu(q_scale * k_scale * dot) with exact products), so the oracle does not
    depend on the order in which the library applies the scales."""
    import torch

    dtype = torch.float64 if dtype is None else dtype
    if q_scale is not None:
        q = q.to(dtype) * q_scale.to(dtype).unsqueeze(-1)  # (..., H) -> (..., H, 1)
    if k_scale is not None:
        ksc = k_scale.to(dtype)
        k = k.to(dtype) * (ksc if ksc.dim() == k.dim() - 1 else ksc.unsqueeze(-1)).unsqueeze(-1)
    neg_inf = float("-inf")
    offs = None if q_causal_offsets is None else [int(v) for v in q_causal_offsets.reshape(-1).tolist()]
    if cu_seqlens_q is None:
        b, s_q, _, _ = q.shape
        s_k = k.shape[1]
        out = torch.full((b, s_q, s_k), neg_inf, dtype=dtype, device=q.device)
        for bi in range(b):
            block = _block_scores(q[bi], k[bi, :, 0], w[bi], dtype, sm_scale, chunk_bytes)
            col = torch.arange(s_k, device=q.device)[None, :]
            if ks is not None:
                lo, hi = ks[bi].to(torch.int64)[:, None], ke[bi].to(torch.int64)[:, None]
                vis = (col >= lo) & (col < hi)
            else:
                vis = col < _windows_end(offs[bi] if offs else 0, s_q, ratio, s_k, q.device)[:, None]
            out[bi] = torch.where(vis, block, torch.full_like(block, neg_inf))
        if window_columns == "window_start":  # column c of row (b, i) is key ks[b, i] + c
            key = ks.to(torch.int64)[..., None] + torch.arange(max_seqlen_k, device=q.device)
            inside = (key >= 0) & (key < s_k)
            out = torch.where(inside, out.gather(-1, key.clamp(0, s_k - 1)), torch.full_like(key, neg_inf, dtype=dtype))
        return out
    cu_q = [int(v) for v in cu_seqlens_q.tolist()]
    cu_k = [int(v) for v in cu_seqlens_k.tolist()]
    t_q, t_k = q.shape[0], k.shape[0]
    global_cols = thd_columns == "global"
    n_cols = t_k if global_cols else max_seqlen_k
    out = torch.full((t_q, n_cols), neg_inf, dtype=dtype, device=q.device)
    for bi in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[bi], cu_q[bi + 1], cu_k[bi], cu_k[bi + 1]
        if q1 == q0 or k1 == k0:
            continue
        block = _block_scores(q[q0:q1], k[k0:k1, 0], w[q0:q1], dtype, sm_scale, chunk_bytes)
        base = k0 if global_cols else 0
        col = base + torch.arange(k1 - k0, device=q.device)[None, :]
        if ks is not None:
            lo, hi = ks[q0:q1].to(torch.int64)[:, None], ke[q0:q1].to(torch.int64)[:, None]
            vis = (col >= lo) & (col < hi)
        else:
            vis = (col - base) < _windows_end(offs[bi] if offs else 0, q1 - q0, ratio, k1 - k0, q.device)[:, None]
        out[q0:q1, base : base + (k1 - k0)] = torch.where(vis, block, torch.full_like(block, neg_inf))
    return out


def reference_lse(scores):
    """log sum exp over the last dimension; -inf for rows with no finite cell."""
    import torch

    return torch.logsumexp(scores, dim=-1)


def compare(got, ref) -> dict:
    """rel-L2 over the cells finite in `ref`, the number of cells whose -inf-ness differs, and
    the number of NaN/+inf cells in `got` (e.g. unwritten memory)."""
    import torch

    got = got.to(torch.float64)
    ref = ref.to(torch.float64)
    g_ninf = torch.isneginf(got)
    r_ninf = torch.isneginf(ref)
    bad = torch.isnan(got) | torch.isposinf(got)
    finite = ~r_ninf & ~g_ninf & ~bad
    diff = (got - ref).where(finite, torch.zeros_like(got))
    den = ref.where(finite, torch.zeros_like(ref)).pow(2).sum()
    num = diff.pow(2).sum()
    rel = (num / den).sqrt().item() if den.item() > 0 else num.sqrt().item()
    return {
        "rel_l2": rel,
        "pattern_mismatch": int((g_ninf != r_ninf).sum().item()),
        "non_finite": int(bad.sum().item()),
        "visible": int((~r_ninf).sum().item()),
    }


def topk_reference(scores, top_k: int, sort_by_score: bool = False):
    """The top-k contract's selection applied to a score tensor (any device): the scores of
    `dsa_indexer.indexer_forward` with local columns, (..., S_k) fp32, -inf exactly outside each
    row's window. Returns (indices int32, values fp32), both (..., top_k):

    the ``top_k`` visible cells of largest score, ties going to the smaller column, ranked on the
    fp32 bit patterns (so +0.0 ranks above -0.0); indices ascending within a row, or by (score
    desc, index asc) with ``sort_by_score``; padding -1 / -inf. Visible means "not -inf" here,
    which holds for scores of finite inputs (a visible score is then finite)."""
    import torch

    s_k = scores.shape[-1]
    bits = scores.contiguous().view(torch.int32)
    key = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # orders like the floats, -0.0 below +0.0
    visible = ~torch.isneginf(scores)
    key = torch.where(visible, key, torch.full_like(key, torch.iinfo(torch.int32).min))
    n = min(top_k, s_k)
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices[..., :n]  # ties: smaller column first
    valid = torch.arange(n, device=scores.device) < visible.sum(-1, keepdim=True)
    indices = torch.where(valid, order, torch.full_like(order, -1))
    if not sort_by_score:
        big = torch.full_like(indices, s_k)
        indices = torch.sort(torch.where(valid, indices, big), dim=-1).values
        indices = torch.where(indices == s_k, torch.full_like(indices, -1), indices)
    values = torch.where(indices >= 0, torch.gather(scores, -1, indices.clamp_min(0)),
                         torch.full(indices.shape, float("-inf"), dtype=scores.dtype, device=scores.device))
    if top_k > n:  # rows narrower than k: padded to k columns
        pad = list(indices.shape[:-1]) + [top_k - n]
        indices = torch.cat([indices, torch.full(pad, -1, dtype=indices.dtype, device=scores.device)], -1)
        values = torch.cat([values, torch.full(pad, float("-inf"), dtype=values.dtype, device=scores.device)], -1)
    return indices.to(torch.int32), values.to(torch.float32)


def topk_softmax_reference(values):
    """softmax over each row's selected values (fp64): exp(v - max) / sum, 0 in padding (-inf)
    and in rows with nothing selected."""
    import torch

    v = values.double()
    m = v.amax(-1, keepdim=True)
    e = torch.where(torch.isneginf(v), torch.zeros_like(v), torch.exp(v - torch.where(torch.isneginf(m), torch.zeros_like(m), m)))
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(e))
