"""A drop-in for cuDNN-frontend 1.32's ``indexer_forward_wrapper`` (its SM90 path) and
``indexer_forward_top_k_wrapper`` (SM100-only there; see its docstring here).

Switching is one import line::

    # from cudnn.deepseek_sparse_attention import indexer_forward_wrapper
    from dsa_indexer.cudnn_compat import indexer_forward_wrapper

    res = indexer_forward_wrapper(q, k, w, ratio=2, sm_scale=0.125, return_lse=True)
    scores, lse = res                      # or res["scores"], res["lse"], res[0], res[1]

The signature is cuDNN-frontend 1.32's, keyword names, order and defaults included. What it
does with each argument is what cuDNN-frontend does on a Hopper GPU:

- the tuning knobs ``m_block_size=128, n_block_size=128, q_stage=2, kv_stage=4`` are accepted
  at those values and raise ValueError otherwise (the message lists the offending ones);
- ``cu_seqlens_q_scale_padded`` / ``cu_seqlens_k_scale_padded`` raise NotImplementedError
  (SM100 only there too); ``sf_vec_size`` is not read (as on SM90);
- ``precision`` is case-insensitive; ``"bf16"`` runs as before; ``"fp8"`` follows the SM90 FP8
  contract (below); anything else, or ``q_scale`` / ``k_scale`` with bf16, ValueError naming
  the parameter;
- ``qhead_per_kv_head`` must be None or ``H_q // H_kv`` (ValueError; cuDNN asserts);
- ``stream``: a ``cuda.bindings`` ``CUstream``, a ``torch.cuda.Stream``, an int handle, or None
  for the current stream;
- the result is a `TupleDict` holding ``'scores'``, plus ``'lse'`` when ``return_lse`` is true;
  a given ``lse_out`` is filled in place, and without ``return_lse`` it is not in the result
  (as in cuDNN-frontend).

``precision="fp8"`` (cuDNN-frontend 1.32's SM90 path): q and k ``torch.float8_e4m3fn``;
``q_scale`` fp32 (B, S_q, H) / THD (T_q, H) and ``k_scale`` fp32 (B, S_k, 1) / THD (T_k, 1), one
descale per 128-element (token, head) row, both required (ValueError naming the missing one, as
there); ``return_lse``, ``lse_out``, THD and offsets as for bf16. What reaches the library
depends on w's dtype, as in cuDNN-frontend:

- bf16 w: ``scores = sm_scale * k_scale[j] * sum_h w[h] * q_scale[h] * relu(q8[h] . k8[j])``
  (``q_scale``, ``k_scale`` and ``sm_scale`` all passed on);
- fp32 w: taken as already multiplied by ``q_scale * sm_scale``, so neither ``q_scale`` nor
  ``sm_scale`` is applied (``q_scale`` must still be given): ``scores = k_scale[j] * sum_h w[h]
  * relu(q8[h] . k8[j])``.

The H gate is the library's (cuDNN-frontend's SM90 FP8 path asserts H in {32, 64}); the
library's generic and lean families serve the FP8 call as they serve bf16.

Everything else (shapes, dtypes, THD local columns, offsets, ``out``) goes to
`dsa_indexer.indexer_forward`, which raises ValueError where cuDNN-frontend's SM90 interface
raises AssertionError or ValueError. It accepts a superset: a padded-row ``out``, CPU
cu_seqlens. Importing this module imports neither torch nor the library.

``indexer_forward_top_k_wrapper`` has cuDNN-frontend 1.32's signature and result keys
(``indices``, ``logits``, ``softmax`` by default, ``lse`` when asked) and runs
`dsa_indexer.indexer_topk`; its docstring says what each argument does here.
"""

from __future__ import annotations

from . import _forward, _topk
from .errors import UnsupportedConfig

__all__ = ["TupleDict", "indexer_forward_wrapper", "indexer_forward_top_k_wrapper", "DEFAULT_TUNING"]

# cuDNN-frontend's SM90 wrapper runs only these values and refuses any other.
DEFAULT_TUNING = {"m_block_size": 128, "n_block_size": 128, "q_stage": 2, "kv_stage": 4}


class TupleDict(dict):
    """A dict that also unpacks and indexes like a tuple of its values, as cuDNN-frontend's
    ``cudnn.api_base.TupleDict``: ``res["scores"]``, ``res[0]`` (ints index the values in
    insertion order; out of range, negative included, raises IndexError), ``scores, lse =
    res`` (iteration yields values, not keys). Equality is the dict's; unhashable."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keys = list(self.keys())

    def __eq__(self, other):
        return dict.__eq__(self, other)

    __hash__ = None

    def __iter__(self):
        return (self[k] for k in self._keys)

    def __getitem__(self, key):
        if isinstance(key, int):
            if key < 0 or key >= len(self._keys):
                raise IndexError(f"index {key} out of range for TupleDict with {len(self._keys)} items")
            return super().__getitem__(self._keys[key])
        return super().__getitem__(key)


# Per wrapper: the precisions it runs, and those cuDNN-frontend knows that it does not run
# (UnsupportedConfig: they exist there, not here); any other name is a ValueError.
_FORWARD_SERVED, _FORWARD_OTHERS = ("bf16", "fp8"), ()  # SM90 indexer_forward_wrapper: both of its precisions
_TOP_K_SERVED, _TOP_K_OTHERS = ("bf16",), ("fp8", "mxfp8", "mxfp4")  # the top-k wrapper's block-scaled SM100 ones (and fp8)


def _check_cudnn_arguments(tuning: dict, precision, q_scale, k_scale, cu_seqlens_q_scale_padded, cu_seqlens_k_scale_padded,
                           where: str = "indexer_forward_wrapper", served: tuple = _FORWARD_SERVED,
                           others: tuple = _FORWARD_OTHERS) -> str:
    """The checks cuDNN-frontend's SM90 path makes before touching a tensor, in its order.
    Returns the precision, lower-cased."""
    if cu_seqlens_q_scale_padded is not None or cu_seqlens_k_scale_padded is not None:
        raise NotImplementedError(
            f"{where}: cu_seqlens_q_scale_padded / cu_seqlens_k_scale_padded: expected None on SM90 "
            "(block-scale padded cu_seqlens are an SM100 feature), got a tensor"
        )
    bad = [f"{name}={tuning[name]}" for name, want in DEFAULT_TUNING.items() if tuning[name] != want]
    if bad:
        raise ValueError(
            f"{where}: SM90 supports only the default tuning parameters "
            f"(m_block_size=128, n_block_size=128, q_stage=2, kv_stage=4); got {', '.join(bad)}"
        )
    known = " or ".join(repr(n) for n in (*served, *others))
    if not isinstance(precision, str):
        raise ValueError(f"{where}: precision: expected {known}, got {precision!r}")
    p = precision.lower()
    if p in others:
        implemented = " and ".join(repr(n) for n in served)
        raise UnsupportedConfig(f"{where}: precision: dsa-indexer implements {implemented} only here, got {p!r}")
    if p not in served:
        raise ValueError(f"{where}: precision: expected {known}, got {precision!r}")
    if p == "bf16":
        if q_scale is not None or k_scale is not None:
            raise ValueError(f"{where}: q_scale / k_scale: expected None with precision='bf16' (they are fp8 descales), got a tensor")
    elif p == "fp8":
        # cuDNN-frontend's SM90 FP8 path needs both descales, even where it does not read q_scale (fp32 w).
        missing = [n for n, v in (("q_scale", q_scale), ("k_scale", k_scale)) if v is None]
        if missing:
            raise ValueError(f"{where}: {' and '.join(missing)}: expected an fp32 tensor with precision='fp8' "
                             f"(q_scale (B, S_q, H) / (T_q, H), k_scale (B, S_k, 1) / (T_k, 1)), got None")
    return p


def _fp8_scaling(precision: str, w, sm_scale, q_scale, k_scale) -> tuple:
    """(sm_scale, q_scale, k_scale) for `indexer_forward`: cuDNN-frontend's SM90 FP8 path takes an
    fp32 w as already multiplied by q_scale * sm_scale and then applies neither; a bf16 w gets
    both (the library's contract is then the same formula). bf16 precision: unchanged."""
    if precision == "fp8" and _forward.dtype_name(w) == "float32":
        return 1.0, None, k_scale
    return sm_scale, q_scale, k_scale


def _check_qhead_per_kv_head(qhead_per_kv_head, q, k, where: str = "indexer_forward_wrapper") -> None:
    if qhead_per_kv_head is None:
        return
    h_q, h_kv = q.shape[-2], k.shape[-2]
    want = h_q // h_kv if h_kv else None
    if qhead_per_kv_head != want:
        raise ValueError(f"{where}: qhead_per_kv_head: expected None or H_q // H_kv = {want}, got {qhead_per_kv_head}")


def _stream_handle(stream):
    """cuDNN-frontend takes a cuda.bindings CUstream; int() of one is its handle."""
    if stream is None or hasattr(stream, "cuda_stream"):
        return stream
    return int(stream)


def indexer_forward_wrapper(
    q,
    k,
    w,
    ratio: int = 4,
    qhead_per_kv_head=None,
    m_block_size: int = 128,
    n_block_size: int = 128,
    q_stage: int = 2,
    kv_stage: int = 4,
    sm_scale: float = 1.0,
    out=None,
    stream=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    q_causal_offsets=None,
    precision: str = "bf16",
    q_scale=None,
    k_scale=None,
    cu_seqlens_q_scale_padded=None,
    cu_seqlens_k_scale_padded=None,
    sf_vec_size: int = 32,
    return_lse: bool = False,
    lse_out=None,
) -> TupleDict:
    """cuDNN-frontend 1.32's ``indexer_forward_wrapper`` on dsa-indexer (see the module
    docstring for what each argument does). Returns ``TupleDict(scores=...)``, or
    ``TupleDict(scores=..., lse=...)`` with ``return_lse``."""
    del sf_vec_size  # not read on SM90, by cuDNN-frontend either
    tuning = {"m_block_size": m_block_size, "n_block_size": n_block_size, "q_stage": q_stage, "kv_stage": kv_stage}
    p = _check_cudnn_arguments(tuning, precision, q_scale, k_scale, cu_seqlens_q_scale_padded, cu_seqlens_k_scale_padded)
    _check_qhead_per_kv_head(qhead_per_kv_head, q, k)
    sm_scale, q_scale, k_scale = _fp8_scaling(p, w, sm_scale, q_scale, k_scale)
    # The scales go only where given, so that a bf16 call is the same call as before.
    fp8 = {} if p == "bf16" else {"q_scale": q_scale, "k_scale": k_scale}
    res = _forward.indexer_forward(
        q,
        k,
        w,
        ratio=ratio,
        sm_scale=sm_scale,
        q_causal_offsets=q_causal_offsets,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        return_lse=bool(return_lse),
        out=out,
        lse_out=lse_out,
        stream=_stream_handle(stream),
        **fp8,
    )
    if return_lse:
        return TupleDict(scores=res["scores"], lse=res["lse"])
    return TupleDict(scores=res)


def indexer_forward_top_k_wrapper(
    q,
    k,
    w,
    top_k: int,
    ratio: int = 4,
    qhead_per_kv_head=None,
    m_block_size: int = 128,
    n_block_size: int = 128,
    q_stage: int = 2,
    kv_stage: int = 4,
    sm_scale: float = 1.0,
    stream=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    q_causal_offsets=None,
    precision: str = "bf16",
    q_scale=None,
    k_scale=None,
    cu_seqlens_q_scale_padded=None,
    cu_seqlens_k_scale_padded=None,
    sf_vec_size: int = 32,
    return_lse: bool = False,
    lse_out=None,
    return_softmax=None,
    softmax_out=None,
    microbatch_rows: int = -1,
    topk_indices_global: bool = True,
    cand_buffer=None,
    out_indices=None,
    out_logits=None,
    cand_batch_offsets=None,
    deterministic: bool = False,
) -> TupleDict:
    """cuDNN-frontend 1.32's ``indexer_forward_top_k_wrapper`` (scores and top-k selection
    without the dense score matrix) on dsa-indexer's `indexer_topk`, which runs it on Hopper;
    cuDNN-frontend's own raises NotImplementedError below SM100.

    Returns ``TupleDict(indices=, logits=, softmax=)`` by default, in that order, plus ``lse``
    when asked for: ``indices`` int32 (B, S_q, top_k) / THD (T_q, top_k), -1 in the padding of
    rows with fewer than ``top_k`` visible keys; ``logits`` fp32, the selected scores (post
    ``sm_scale``; -inf in padding); ``softmax`` fp32, softmax over the row's selected logits (0 in
    padding); ``lse`` fp32 (B, S_q) / (T_q,), log-sum-exp of the whole row's visible scores.

    What each argument does here:

    - ``q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k``: as in
      `indexer_forward_wrapper` (BSHD or THD, bf16 q/k, bf16 or fp32 w, H 16/32/64, D 128).
    - ``top_k``: 1 .. 2048, as cuDNN-frontend (required, no default).
    - ``max_seqlen_q`` / ``max_seqlen_k``: THD; derived from cu_seqlens when None, as
      cuDNN-frontend does (one synchronizing read).
    - ``topk_indices_global`` (default True, as there): BSHD ``b * S_k + local``, THD
      ``cu_seqlens_k[b] + local``; False: the key's index inside its batch entry / segment.
    - ``return_softmax``: None or True returns ``softmax``, False leaves it out (unless
      ``softmax_out`` is given, which is then filled and returned, as there).
    - ``return_lse`` / ``lse_out``: either one puts ``lse`` into the result (as there).
    - ``out_indices``, ``out_logits``, ``softmax_out``, ``lse_out``: caller buffers, filled in
      place and returned (identity kept).
    - ``deterministic``: accepted, True or False. dsa-indexer's selection is always the
      deterministic one: ties at the k-th place go to the smaller key index, the selected set is
      unique, and within a row the indices are in ascending key order (cuDNN-frontend leaves the
      combined path's slot order unspecified; its standalone deterministic top-k also returns
      ascending indices).
    - ``cand_buffer``: cuDNN-frontend's stage-1 scratch; here a workspace. A contiguous CUDA
      tensor of at least `dsa_indexer.indexer_topk_workspace_size` bytes is used as the call's
      workspace (nothing is allocated: CUDA-graph capture with caller buffers); a smaller one is
      not used and the workspace comes from PyTorch's caching allocator on the stream.
      ``cand_batch_offsets`` (its THD layout) is not read: the workspace needs none.
    - ``microbatch_rows``: not read; the unfused path always works on bounded blocks of rows,
      and the result does not depend on the blocking (cuDNN-frontend's neither).
    - ``m_block_size, n_block_size, q_stage, kv_stage``: accepted at their defaults only
      (ValueError naming the others, as `indexer_forward_wrapper`); ``qhead_per_kv_head``: None or
      H_q // H_kv (ValueError).
    - ``precision``: "bf16" (case-insensitive) runs; "mxfp8", "mxfp4" and "fp8" raise
      `dsa_indexer.UnsupportedConfig` (NotImplementedError and ValueError): cuDNN-frontend's
      block-scaled SM100 kernels have no counterpart here; another name, or ``q_scale`` /
      ``k_scale`` with bf16, ValueError; ``cu_seqlens_*_scale_padded`` NotImplementedError;
      ``sf_vec_size`` is not read.
    - ``stream``: as `indexer_forward_wrapper` (a cuda.bindings CUstream, a torch.cuda.Stream,
      an int handle, or None for the current stream).
    """
    del sf_vec_size, microbatch_rows, cand_batch_offsets  # see the docstring
    where = "indexer_forward_top_k_wrapper"
    tuning = {"m_block_size": m_block_size, "n_block_size": n_block_size, "q_stage": q_stage, "kv_stage": kv_stage}
    _check_cudnn_arguments(tuning, precision, q_scale, k_scale, cu_seqlens_q_scale_padded, cu_seqlens_k_scale_padded,
                           where, _TOP_K_SERVED, _TOP_K_OTHERS)
    _check_qhead_per_kv_head(qhead_per_kv_head, q, k, where)
    if cu_seqlens_q is not None and cu_seqlens_k is not None:
        if max_seqlen_q is None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item())
        if max_seqlen_k is None:
            max_seqlen_k = int((cu_seqlens_k[1:] - cu_seqlens_k[:-1]).max().item())
    want_softmax = return_softmax is not False or softmax_out is not None
    want_lse = bool(return_lse) or lse_out is not None
    workspace = None
    if cand_buffer is not None:
        need = _topk.indexer_topk_workspace_size(
            q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            global_indices=bool(topk_indices_global), return_lse=want_lse)
        if cand_buffer.is_contiguous() and cand_buffer.numel() * cand_buffer.element_size() >= need:
            workspace = cand_buffer
    res = _topk.indexer_topk(
        q,
        k,
        w,
        top_k,
        ratio=ratio,
        sm_scale=sm_scale,
        q_causal_offsets=q_causal_offsets,
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        global_indices=bool(topk_indices_global),
        return_values=True,
        return_softmax=want_softmax,
        return_lse=want_lse,
        indices_out=out_indices,
        values_out=out_logits,
        softmax_out=softmax_out,
        lse_out=lse_out,
        workspace=workspace,
        stream=_stream_handle(stream),
    )
    values = {"indices": res.indices, "logits": res.values}
    if want_softmax:
        values["softmax"] = res.softmax
    if want_lse:
        values["lse"] = res.lse
    return TupleDict(**values)
