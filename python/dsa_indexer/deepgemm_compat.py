"""A drop-in for DeepGEMM 2.8's non-paged MQA-logits entry on SM90, E4M3 inputs
(``deep_gemm.fp8_fp4_mqa_logits``, and its older name ``fp8_mqa_logits``).

Switching is one import line::

    # from deep_gemm import fp8_mqa_logits
    from dsa_indexer.deepgemm_compat import fp8_mqa_logits

    logits = fp8_mqa_logits((q_fp8, None), (kv_fp8, kv_scale), weights, ks, ke)   # (S, S_kv) fp32

Arguments, as DeepGEMM takes them for FP8 on SM90:

- ``q``: ``(q_fp8, None)``, q_fp8 ``torch.float8_e4m3fn`` (S, H, D). The second item is Q's block
  scale of DeepGEMM's FP4 path (SM100); for FP8 it is None, the per-token Q scale being folded
  into ``weights``. A bare tensor is taken as ``(q, None)``.
- ``kv``: ``(kv_fp8, kv_scale)``, kv_fp8 ``torch.float8_e4m3fn`` (S_kv, D), kv_scale fp32 (S_kv,)
  (None: 1).
- ``weights``: fp32 (S, H) (bf16 also accepted).
- ``cu_seq_len_k_start`` / ``cu_seq_len_k_end``: int32 (S,), row i's key window ``[ks[i], ke[i])``
  in kv's rows, clipped to ``[0, S_kv)``.

Result: ``logits[i, j] = kv_scale[j] * sum_h weights[i, h] * relu(q_fp8[i, h, :] . kv_fp8[j, :])``
for j in row i's window (products accumulated in fp32; kv_scale > 0 and finite is the caller's
duty, as there), fp32 (S, S_kv), contiguous; (S, max_seqlen_k) with ``max_seqlen_k > 0``.

**Cells outside a row's window hold -inf, always.** DeepGEMM leaves them unwritten (whatever its
tile computed, or stale memory) unless ``clean_logits=True``, which fills them with -inf in a
second kernel. Here every cell is written by the one call, so ``clean_logits`` is accepted and not
read: both values give what DeepGEMM gives with ``clean_logits=True``. Unlike DeepGEMM's, the
result is not a strided view of a padded buffer.

DeepGEMM 2.8.2's own binding is ``fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k,
schedule_meta=None)`` (compressed logits only), while its Python wrappers put ``clean_logits``
sixth; both forms work here: a bool sixth argument is ``clean_logits``, an int ``max_seqlen_k``.

``max_seqlen_k > 0`` asks for DeepGEMM's compressed layout: the result is (S, max_seqlen_k), column
c of row i holding key ``ks[i] + c``, so row i's window starts at column 0. Cells past the window
(c >= ke[i] - ks[i]) hold -inf, and a window longer than max_seqlen_k keeps its first
max_seqlen_k keys (DeepGEMM expects max_seqlen_k to cover every window). It is computed directly
in that layout (`indexer_forward`'s ``window_columns="window_start"``), never through the full
matrix. ``logits_dtype`` (`fp8_fp4_mqa_logits`) other than fp32 raises
``dsa_indexer.UnsupportedConfig`` (a NotImplementedError and a ValueError).

How the call is served: `dsa_indexer.indexer_forward` with B = 1 and the explicit windows, q
``(1, S, H, D)``, k = kv_fp8 viewed ``(1, S_kv, 1, D)``, k_scale = kv_scale viewed ``(1, S_kv)``,
w ``(1, S, H)``, ks / ke ``(1, S)``, ``sm_scale`` 1, no q_scale. Its validation therefore reports
shape, dtype and device problems with the library's names (q, k, k_scale, w, ks, ke for q[0],
kv[0], kv[1], weights, cu_seq_len_k_start, cu_seq_len_k_end); the ranks this module relies on are
checked here with DeepGEMM's names. The lean family serves these calls (B 1 explicit windows at H 64,
S a multiple of 8 with S / 8 at least the device's SMs: its THD kernel over one packed sequence,
the rows' windows read from ks / ke on the device), else the generic family; both give the same
bits.

Importing this module imports neither torch nor the library.
"""

from __future__ import annotations

import operator

from . import _forward
from .errors import UnsupportedConfig

__all__ = ["fp8_mqa_logits", "fp8_fp4_mqa_logits"]


def _pair(value, name: str, where: str) -> tuple:
    """DeepGEMM's (values, scale) argument as a tuple of two; a bare tensor as (tensor, None)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{where}: {name}: expected a pair (values, scale), got {len(value)} items")
        return value[0], value[1]
    return value, None


def _check_rank(t, name: str, rank: int, layout: str, where: str) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{where}: {name}: expected rank {rank} {layout}, got shape {tuple(t.shape)}")


def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=None):
    """DeepGEMM 2.8's FP8 MQA logits on dsa-indexer (see the module docstring): (S, S_kv) fp32,
    -inf outside each row's window ``[cu_seq_len_k_start[i], cu_seq_len_k_end[i])``; an int as
    the sixth argument is 2.8.2's positional ``max_seqlen_k`` (see `fp8_fp4_mqa_logits`)."""
    where = "fp8_mqa_logits"
    width = _width(where, clean_logits, max_seqlen_k)
    return _mqa_logits(where, q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, width)


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True, max_seqlen_k=None,
                       logits_dtype=None, schedule_meta=None):
    """DeepGEMM 2.8's ``fp8_fp4_mqa_logits`` for E4M3 inputs: `fp8_mqa_logits`, plus
    ``logits_dtype`` (None or torch.float32; DeepGEMM's bf16 logits raise UnsupportedConfig) and
    ``schedule_meta`` (SM100 scheduling metadata: accepted, not read).

    Both of DeepGEMM's call forms are taken: its Python wrappers' ``(..., clean_logits=True,
    max_seqlen_k=0, logits_dtype)`` and 2.8.2's native ``(..., max_seqlen_k, schedule_meta=None)``,
    whose sixth positional argument is the width: a bool there is ``clean_logits``, an int
    ``max_seqlen_k`` (and a seventh positional its ``schedule_meta``). FP4 Q (a block scale in
    ``q[1]``) raises UnsupportedConfig."""
    where = "fp8_fp4_mqa_logits"
    if logits_dtype is not None and str(logits_dtype).removeprefix("torch.") != "float32":
        raise UnsupportedConfig(f"{where}: logits_dtype: expected torch.float32 (or None), got {logits_dtype}")
    width = _width(where, clean_logits, max_seqlen_k)
    return _mqa_logits(where, q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, width)


def _width(where: str, sixth, seventh) -> int:
    """max_seqlen_k (0: the full logits) from either call form (see `fp8_fp4_mqa_logits`)."""
    if isinstance(sixth, bool):  # the wrappers' clean_logits (not read: every cell is written)
        return 0 if seventh is None else seventh
    try:
        width = operator.index(sixth)
    except TypeError:
        raise TypeError(f"{where}: the sixth argument: expected clean_logits (a bool) or DeepGEMM 2.8.2's positional "
                        f"max_seqlen_k (an int), got {type(sixth).__name__}") from None
    # 2.8.2's native form: the seventh positional is its schedule_meta (None or a tensor)
    if seventh is not None and not hasattr(seventh, "data_ptr"):
        raise TypeError(f"{where}: max_seqlen_k given twice: {width} as the sixth argument (DeepGEMM 2.8.2's form) "
                        f"and {seventh!r}")
    return width


def _mqa_logits(where, q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k):
    """Both entries; clean_logits is not an argument: every cell is written (-inf outside the
    windows), see the module docstring."""
    max_seqlen_k = operator.index(max_seqlen_k)
    if max_seqlen_k < 0:
        raise ValueError(f"{where}: max_seqlen_k: expected >= 0 (0: the full (S, S_kv) logits; > 0: the compressed "
                         f"(S, max_seqlen_k) ones), got {max_seqlen_k}")
    q_fp8, q_sf = _pair(q, "q", where)
    if q_sf is not None:
        raise UnsupportedConfig(
            f"{where}: q[1]: expected None (FP8 Q, its per-token scale folded into weights), got a tensor: "
            "block-scaled (FP4) Q is DeepGEMM's SM100 path, not served here")
    kv_fp8, kv_sf = _pair(kv, "kv", where)
    _check_rank(q_fp8, "q[0]", 3, "(S, H, D)", where)
    _check_rank(kv_fp8, "kv[0]", 2, "(S_kv, D)", where)
    if kv_sf is not None:
        _check_rank(kv_sf, "kv[1]", 1, "(S_kv,)", where)
    _check_rank(weights, "weights", 2, "(S, H)", where)
    _check_rank(cu_seq_len_k_start, "cu_seq_len_k_start", 1, "(S,)", where)
    _check_rank(cu_seq_len_k_end, "cu_seq_len_k_end", 1, "(S,)", where)
    # Views only (unsqueeze keeps any strides): one batch entry whose keys are kv's rows.
    scores = _forward.indexer_forward(
        q_fp8.unsqueeze(0),
        kv_fp8.unsqueeze(0).unsqueeze(2),
        weights.unsqueeze(0),
        ratio=1,  # not read with explicit windows
        sm_scale=1.0,
        ks=cu_seq_len_k_start.unsqueeze(0),
        ke=cu_seq_len_k_end.unsqueeze(0),
        k_scale=None if kv_sf is None else kv_sf.unsqueeze(0),
        **({"window_columns": "window_start", "max_seqlen_k": max_seqlen_k} if max_seqlen_k > 0 else {}),
    )
    return scores[0]
