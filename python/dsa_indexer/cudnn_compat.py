"""A drop-in for cuDNN-frontend 1.32's ``indexer_forward_wrapper`` (its SM90 path).

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
- ``precision`` is case-insensitive; ``"bf16"`` runs; ``"fp8"`` raises
  ``dsa_indexer.UnsupportedConfig`` (NotImplementedError and ValueError: cuDNN has an fp8 path,
  this library does not); anything else, or ``q_scale`` / ``k_scale`` with bf16, ValueError;
- ``qhead_per_kv_head`` must be None or ``H_q // H_kv`` (ValueError; cuDNN asserts);
- ``stream``: a ``cuda.bindings`` ``CUstream``, a ``torch.cuda.Stream``, an int handle, or None
  for the current stream;
- the result is a `TupleDict` holding ``'scores'``, plus ``'lse'`` when ``return_lse`` is true;
  a given ``lse_out`` is filled in place, and without ``return_lse`` it is not in the result
  (as in cuDNN-frontend).

Everything else (shapes, dtypes, THD local columns, offsets, ``out``) goes to
`dsa_indexer.indexer_forward`, which raises ValueError where cuDNN-frontend's SM90 interface
raises AssertionError or ValueError. It accepts a superset: a padded-row ``out``, CPU
cu_seqlens. Importing this module imports neither torch nor the library.
"""

from __future__ import annotations

from . import _forward
from .errors import UnsupportedConfig

__all__ = ["TupleDict", "indexer_forward_wrapper", "DEFAULT_TUNING"]

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


def _check_cudnn_arguments(tuning: dict, precision, q_scale, k_scale, cu_seqlens_q_scale_padded, cu_seqlens_k_scale_padded) -> None:
    """The checks cuDNN-frontend's SM90 path makes before touching a tensor, in its order."""
    if cu_seqlens_q_scale_padded is not None or cu_seqlens_k_scale_padded is not None:
        raise NotImplementedError(
            "indexer_forward_wrapper: cu_seqlens_q_scale_padded / cu_seqlens_k_scale_padded: expected None on SM90 "
            "(block-scale padded cu_seqlens are an SM100 feature), got a tensor"
        )
    bad = [f"{name}={tuning[name]}" for name, want in DEFAULT_TUNING.items() if tuning[name] != want]
    if bad:
        raise ValueError(
            "indexer_forward_wrapper: SM90 supports only the default tuning parameters "
            f"(m_block_size=128, n_block_size=128, q_stage=2, kv_stage=4); got {', '.join(bad)}"
        )
    if not isinstance(precision, str):
        raise ValueError(f"indexer_forward_wrapper: precision: expected 'bf16' or 'fp8', got {precision!r}")
    p = precision.lower()
    if p == "bf16":
        if q_scale is not None or k_scale is not None:
            raise ValueError("indexer_forward_wrapper: q_scale / k_scale: expected None with precision='bf16' (they are fp8 descales), got a tensor")
    elif p == "fp8":
        raise UnsupportedConfig("indexer_forward_wrapper: precision: dsa-indexer implements 'bf16' only, got 'fp8'")
    else:
        raise ValueError(f"indexer_forward_wrapper: precision: expected 'bf16' or 'fp8', got {precision!r}")


def _check_qhead_per_kv_head(qhead_per_kv_head, q, k) -> None:
    if qhead_per_kv_head is None:
        return
    h_q, h_kv = q.shape[-2], k.shape[-2]
    want = h_q // h_kv if h_kv else None
    if qhead_per_kv_head != want:
        raise ValueError(f"indexer_forward_wrapper: qhead_per_kv_head: expected None or H_q // H_kv = {want}, got {qhead_per_kv_head}")


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
    _check_cudnn_arguments(tuning, precision, q_scale, k_scale, cu_seqlens_q_scale_padded, cu_seqlens_k_scale_padded)
    _check_qhead_per_kv_head(qhead_per_kv_head, q, k)
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
    )
    if return_lse:
        return TupleDict(scores=res["scores"], lse=res["lse"])
    return TupleDict(scores=res)
