"""`indexer_topk` on PyTorch CUDA tensors: the k best keys of every query row without the score
matrix (include/dsa_indexer/topk.hpp).

torch is imported inside the functions that need it, so every check made before a tensor is
touched works without PyTorch installed.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from . import _forward, _lib, _torch_op


class TopkResult(NamedTuple):
    """What `indexer_topk` returns; the optional results are None unless asked for (``return_*``
    or a ``*_out`` buffer). Unpacks as ``indices, values, softmax, lse = res``."""

    indices: object  # int32 (B, S_q, top_k) / THD (T_q, top_k); -1 pads rows with fewer visible keys
    values: object  # fp32, the shape of indices: the selected scores in the order of indices; -inf in padding
    softmax: object  # fp32, the shape of indices: softmax over the row's selected scores; 0 in padding
    lse: object  # fp32 (B, S_q) / (T_q,): log-sum-exp over the WHOLE row's visible scores


def indexer_topk(
    q,
    k,
    w,
    top_k: int = 2048,
    ratio: int = 4,
    sm_scale: float = 1.0,
    q_causal_offsets=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    *,
    global_indices: bool = False,
    sort_by_score: bool = False,
    return_values: bool = False,
    return_softmax: bool = False,
    return_lse: bool = False,
    indices_out=None,
    values_out=None,
    softmax_out=None,
    lse_out=None,
    workspace=None,
    family: str = "auto",
    cu_seqlens_q_host=None,
    cu_seqlens_k_host=None,
    stream=None,
    q_scale=None,
    k_scale=None,
) -> TopkResult:
    """The ``top_k`` largest visible scores of every query row, on the current CUDA stream.

    A score is bitwise what `indexer_forward` returns for that cell with the same arguments
    (``ratio``, ``sm_scale``, ``q_causal_offsets``, BSHD or THD); rows are ranked by (score
    descending, key index ascending), so a tie at the k-th place goes to the smaller index and the
    selected set is unique and the same run to run. The score matrix is never materialized: the
    device memory is the outputs plus a workspace that does not grow with S_q x S_k.

    - ``top_k``: 1 .. 2048 (UnsupportedConfig above); a row with fewer visible keys is padded
      with index -1 (value -inf, softmax 0).
    - Results (a `TopkResult`): ``indices`` int32 (B, S_q, top_k) / THD (T_q, top_k), ascending
      key order within a row by default, or by (score desc, index asc) with ``sort_by_score``;
      ``values`` (``return_values``): the selected scores, in the order of ``indices``;
      ``softmax`` (``return_softmax``): softmax over the row's selected scores (what
      cuDNN-frontend's top-k wrapper returns by default); ``lse`` (``return_lse``): log-sum-exp of
      the whole row's visible scores (-inf for a row without one).
    - ``global_indices``: False: the key's index inside its batch entry / THD segment; True:
      BSHD ``b * S_k + local`` (the row of k viewed as (B * S_k, D)), THD the packed key row
      (cuDNN-frontend's ``topk_indices_global``).
    - ``indices_out``, ``values_out``, ``softmax_out``, ``lse_out``: caller buffers to fill
      (contiguous, the result's shape and dtype); a given one is also returned. ``workspace``: a
      contiguous CUDA tensor of at least `indexer_topk_workspace_size` bytes, 256-byte aligned;
      without it the call takes one from PyTorch's caching allocator on the stream. All of them
      given (and THD host mirrors), a call allocates nothing: the form for CUDA-graph capture.
    - ``family``: "auto" or a name of ``dsa_indexer.kernel_families("topk")``; ``stream``: a
      CUstream handle as int or a torch.cuda.Stream (default: the current stream of q's device).
    - THD: as `indexer_forward` (local key columns only). The library validates cu_seqlens on the
      host: pass ``cu_seqlens_q_host`` / ``cu_seqlens_k_host`` (or CPU cu_seqlens) to avoid the one
      synchronizing device-to-host read of the device arrays per call.
    - FP8: q and k ``torch.float8_e4m3fn`` with the optional fp32 ``q_scale`` / ``k_scale`` of
      `indexer_forward` (same shapes, same contract); the scores ranked are those FP8 scores,
      through the unfused path (the fused sweep is bf16 only).

    NaN scores (only from non-finite inputs) rank above +inf; +0.0 ranks above -0.0. Raises as
    `indexer_forward` does (ValueError / NotImplementedError / RuntimeError subclasses with the
    library's message, TypeError for non-tensors); nothing is launched when it raises.
    """
    o = _torch_op.ops()
    if o is not None:
        # The operators check every argument themselves (the registry's family names included, in
        # C++: nothing here that torch.compile cannot trace); on an error the checks below run
        # first, so that both paths raise the same exception for malformed arguments.
        try:
            res = _torch_op.topk(o, q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, bool(global_indices), bool(sort_by_score), bool(return_values),
                                 bool(return_softmax), bool(return_lse), indices_out, values_out, softmax_out, lse_out,
                                 workspace, family, cu_seqlens_q_host, cu_seqlens_k_host, stream, q_scale, k_scale)
        except Exception as e:
            _check_topk_arguments(top_k, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
            translated = _torch_op.translate(e)
            if translated is e:
                raise
            raise translated from None
        return TopkResult(*res)
    top_k, family_code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k = _check_topk_arguments(
        top_k, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return _topk_ctypes(q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        family_code, thd, bool(global_indices), bool(sort_by_score), bool(return_values), bool(return_softmax),
                        bool(return_lse), indices_out, values_out, softmax_out, lse_out, workspace, cu_seqlens_q_host,
                        cu_seqlens_k_host, stream, q_scale, k_scale)


def _check_topk_arguments(top_k, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The checks that need neither torch nor a tensor; returns the normalized values (top_k,
    family code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k)."""
    top_k = _torch_op.check_top_k(top_k)
    family_code = _parse_topk_choice(family, _lib.families("topk"), "family")
    _, _, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k = _forward._check_arguments(
        "local", "auto", ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    return top_k, family_code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k


def _parse_topk_choice(value, table: dict, name: str) -> int:
    if not isinstance(value, str) or value not in table:
        choices = ", ".join(repr(c) for c in table)
        raise ValueError(f"indexer_topk: {name}: expected one of {choices}, got {value!r}")
    return table[value]


def _cuda_tensor(t, name: str):
    _cuda_tensors((name, t))
    return t


def _cuda_tensors(*named):
    """TypeError for the first non-tensor, then ValueError for the first non-CUDA tensor (the
    operator's dispatcher converts every argument before its kernel checks devices)."""
    import torch

    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"indexer_topk: {name}: expected a torch.Tensor, got {type(t).__name__}")
    for name, t in named:
        if not t.is_cuda:
            raise ValueError(f"indexer_topk: {name}: expected a CUDA tensor, got a tensor on {t.device}")


def _desc(t, name: str) -> _lib.DsaTensor:
    if t is None:
        return _lib.DsaTensor()
    _cuda_tensor(t, name)
    return _lib.make_tensor(t.data_ptr(), _forward._dtype_code(t, name), t.shape, t.stride(), t.device.index)


def _topk_ctypes(q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 family_code, thd, global_indices, sort_by_score, return_values, return_softmax, return_lse, indices_out,
                 values_out, softmax_out, lse_out, workspace, cu_seqlens_q_host, cu_seqlens_k_host, stream, q_scale=None,
                 k_scale=None):
    """`indexer_topk` through the ctypes binding of the C API, after the checks above. Everything
    it allocates (results, workspace, device copies of CPU cu_seqlens) comes from PyTorch's caching
    allocator on the stream the kernels run on."""
    import torch

    _cuda_tensors(("q", q), ("k", k), ("w", w))
    device = q.device
    if stream is None:
        stream = torch.cuda.current_stream(device)
    elif not isinstance(stream, torch.cuda.Stream):
        stream = torch.cuda.ExternalStream(int(stream), device=device)
    with torch.cuda.stream(stream):
        q, k, w = (t.contiguous() if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1 else t for t in (q, k, w))
        rank = 3 if thd else 4
        if q.dim() != rank or k.dim() != rank:
            raise ValueError(f"indexer_topk: q / k: expected rank {rank} for {'THD' if thd else 'BSHD (THD needs cu_seqlens_q/k)'}, "
                             f"got shapes {tuple(q.shape)} / {tuple(k.shape)}")
        opt = _lib.new_options()
        opt.ratio = ratio
        opt.sm_scale = sm_scale
        opt.family = family_code
        opt.q_causal_offsets = _desc(q_causal_offsets, "q_causal_offsets")
        opt.q_scale, opt.k_scale = _desc(q_scale, "q_scale"), _desc(k_scale, "k_scale")
        if thd:
            for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"indexer_topk: {name}: expected a torch.Tensor, got {type(t).__name__}")
            if (cu_seqlens_q_host is None) != (cu_seqlens_k_host is None):
                raise ValueError("indexer_topk: cu_seqlens_q_host / cu_seqlens_k_host: expected both or neither, got one")
            # Host mirrors for both the size query and the call: given, the CPU cu_seqlens, or one
            # read of the device arrays on this stream (the library would read them twice).
            if cu_seqlens_q_host is None:
                cu_seqlens_q_host, cu_seqlens_k_host = cu_seqlens_q.cpu(), cu_seqlens_k.cpu()
            cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.to(device), cu_seqlens_k.to(device)
            mirror_q = _forward._host_mirror(cu_seqlens_q_host, cu_seqlens_q.numel(), "cu_seqlens_q_host")
            mirror_k = _forward._host_mirror(cu_seqlens_k_host, cu_seqlens_k.numel(), "cu_seqlens_k_host")
            opt.cu_seqlens_q = _desc(cu_seqlens_q, "cu_seqlens_q")
            opt.cu_seqlens_k = _desc(cu_seqlens_k, "cu_seqlens_k")
            opt.max_seqlen_q, opt.max_seqlen_k = max_seqlen_q, max_seqlen_k
            opt.cu_seqlens_q_host = ctypes.cast(mirror_q, ctypes.POINTER(ctypes.c_int32))
            opt.cu_seqlens_k_host = ctypes.cast(mirror_k, ctypes.POINTER(ctypes.c_int32))
        elif cu_seqlens_q_host is not None or cu_seqlens_k_host is not None:
            raise ValueError("indexer_topk: cu_seqlens_q_host / cu_seqlens_k_host: expected none for a BSHD call, got a mirror")

        shape, rows = _torch_op.topk_shapes(q, k, thd, top_k)
        new = lambda s, dt: torch.empty(s, dtype=dt, device=device)  # noqa: E731
        indices = indices_out if indices_out is not None else new(shape, torch.int32)
        values = values_out if values_out is not None else (new(shape, torch.float32) if return_values else None)
        softmax = softmax_out if softmax_out is not None else (new(shape, torch.float32) if return_softmax else None)
        lse = lse_out if lse_out is not None else (new(rows, torch.float32) if return_lse else None)
        opt.lse = _desc(lse, "lse_out" if lse_out is not None else "lse")
        t = _lib.new_topk_options()
        t.k = top_k
        t.sort_by_score = int(sort_by_score)
        t.indices = _lib.TOPK_INDICES_GLOBAL if global_indices else _lib.TOPK_INDICES_LOCAL
        t.values = _desc(values, "values_out" if values_out is not None else "values")
        t.softmax = _desc(softmax, "softmax_out" if softmax_out is not None else "softmax")
        dq, dk, dw = _desc(q, "q"), _desc(k, "k"), _desc(w, "w")
        di = _desc(indices, "indices_out" if indices_out is not None else "indices")
        if workspace is None:
            # The size query validates the whole call: a malformed one raises before this allocates.
            nbytes = _lib.topk_workspace_size_raw(dq, dk, dw, di, opt, t)
            if nbytes:
                workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
        else:
            _cuda_tensor(workspace, "workspace")
            if not workspace.is_contiguous():
                raise ValueError(f"indexer_topk: workspace: expected a contiguous tensor, got strides {tuple(workspace.stride())}")
        if workspace is not None:
            t.workspace = workspace.data_ptr() or None
            t.workspace_bytes = workspace.numel() * workspace.element_size()
        _lib.topk_raw(dq, dk, dw, di, opt, t, stream.cuda_stream)
    return TopkResult(indices, values, softmax, lse)


def indexer_topk_workspace_size(q, k, w, top_k: int = 2048, ratio: int = 4, sm_scale: float = 1.0, q_causal_offsets=None,
                                cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q: int | None = None,
                                max_seqlen_k: int | None = None, *, global_indices: bool = False,
                                return_lse: bool = False, family: str = "auto", cu_seqlens_q_host=None,
                                cu_seqlens_k_host=None, q_scale=None, k_scale=None) -> int:
    """The bytes of ``workspace`` an `indexer_topk` call with these arguments needs (a function of
    the shapes, top_k and the device: allocate it once per shape). Validates the call as the call
    does, launches nothing; THD without host mirrors reads the device cu_seqlens once."""
    top_k, family_code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k = _check_topk_arguments(
        top_k, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _cuda_tensors(("q", q), ("k", k), ("w", w))
    opt = _lib.new_options()
    opt.ratio, opt.sm_scale, opt.family = ratio, sm_scale, family_code
    opt.q_causal_offsets = _desc(q_causal_offsets, "q_causal_offsets")
    # The FP8 scales are part of the call the size query validates (their shapes, dtypes).
    opt.q_scale, opt.k_scale = _desc(q_scale, "q_scale"), _desc(k_scale, "k_scale")
    keep = []
    if thd:
        if cu_seqlens_q_host is None or cu_seqlens_k_host is None:
            cu_seqlens_q_host, cu_seqlens_k_host = cu_seqlens_q.cpu(), cu_seqlens_k.cpu()
        cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.to(q.device), cu_seqlens_k.to(q.device)
        keep = [_forward._host_mirror(cu_seqlens_q_host, cu_seqlens_q.numel(), "cu_seqlens_q_host"),
                _forward._host_mirror(cu_seqlens_k_host, cu_seqlens_k.numel(), "cu_seqlens_k_host")]
        opt.cu_seqlens_q, opt.cu_seqlens_k = _desc(cu_seqlens_q, "cu_seqlens_q"), _desc(cu_seqlens_k, "cu_seqlens_k")
        opt.max_seqlen_q, opt.max_seqlen_k = max_seqlen_q, max_seqlen_k
        opt.cu_seqlens_q_host = ctypes.cast(keep[0], ctypes.POINTER(ctypes.c_int32))
        opt.cu_seqlens_k_host = ctypes.cast(keep[1], ctypes.POINTER(ctypes.c_int32))
    shape, rows = _torch_op.topk_shapes(q, k, thd, top_k)
    # The query reads descriptors only, never memory: the outputs are described at placeholder
    # addresses above any user-space virtual address (2^56), so that they overlap no input.
    def placeholder(nth, dims, dtype):
        return _lib.make_tensor(_PLACEHOLDER + nth * _PLACEHOLDER_STEP, dtype, dims, _lib.contiguous_strides(dims), q.device.index)

    if return_lse:
        opt.lse = placeholder(1, rows, _lib.DSA_F32)
    t = _lib.new_topk_options()
    t.k = top_k
    t.indices = _lib.TOPK_INDICES_GLOBAL if global_indices else _lib.TOPK_INDICES_LOCAL
    return _lib.topk_workspace_size_raw(_desc(q, "q"), _desc(k, "k"), _desc(w, "w"), placeholder(0, shape, _lib.DSA_I32), opt, t)


_PLACEHOLDER, _PLACEHOLDER_STEP = 1 << 56, 1 << 48


__all__ = ["TopkResult", "indexer_topk", "indexer_topk_workspace_size"]
