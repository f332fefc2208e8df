"""`indexer_forward` on PyTorch CUDA tensors, with cuDNN-frontend's argument names.

torch is imported inside the functions that need it, so `import dsa_indexer` and every
check that happens before a tensor is touched work without PyTorch installed.
"""

from __future__ import annotations

import ctypes
import operator

from . import _lib, _torch_op

# torch dtype name -> DSA code. Keyed by name so that the table (and what it refuses) is readable
# without torch; torch.float8_e5m2 has a code so that the library's own message refuses it.
DTYPE_CODES = {
    "bfloat16": _lib.DSA_BF16,
    "float16": _lib.DSA_F16,
    "float32": _lib.DSA_F32,
    "int32": _lib.DSA_I32,
    "int64": _lib.DSA_I64,
    "float64": _lib.DSA_F64,
    "float8_e4m3fn": _lib.DSA_E4M3,
    "float8_e5m2": _lib.DSA_E5M2,
}
_TORCH_DTYPES = None  # torch dtype -> DSA code, built from DTYPE_CODES on first use


def dtype_name(t) -> str:
    """The torch dtype name of a tensor ("float32", "float8_e4m3fn"), "" for an object without
    a dtype; reads no torch module, so it works on stand-ins too."""
    dt = getattr(t, "dtype", None)
    return "" if dt is None else str(dt).removeprefix("torch.")


def _dtype_code(t, name: str) -> int:
    global _TORCH_DTYPES
    import torch

    if _TORCH_DTYPES is None:
        # A torch without a dtype of the table (float8 types came in 2.1) simply lacks its row.
        _TORCH_DTYPES = {getattr(torch, n): code for n, code in DTYPE_CODES.items() if hasattr(torch, n)}
    code = _TORCH_DTYPES.get(t.dtype)
    if code is None:
        names = ", ".join(DTYPE_CODES)
        raise ValueError(f"indexer_forward: {name}.dtype: expected one of {names}, got {t.dtype}")
    return code


def _check_tensor(t, name: str):
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"indexer_forward: {name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def _desc(t, name: str) -> _lib.DsaTensor:
    """The dsa_tensor of a CUDA tensor (None: "not given"). Strides are torch's, in elements."""
    if t is None:
        return _lib.DsaTensor()
    _check_tensor(t, name)
    if not t.is_cuda:
        raise ValueError(f"indexer_forward: {name}: expected a CUDA tensor, got a tensor on {t.device}")
    return _lib.make_tensor(t.data_ptr(), _dtype_code(t, name), t.shape, t.stride(), t.device.index)


def _host_mirror(values, n: int, name: str):
    """A ctypes int32 array holding `values` (a CPU tensor or a sequence of ints) of length n."""
    if values is None:
        return None
    try:
        import torch

        if isinstance(values, torch.Tensor):
            if values.is_cuda:
                raise ValueError(f"indexer_forward: {name}: expected a host (CPU) tensor or a sequence, got a CUDA tensor")
            values = values.reshape(-1).tolist()
    except ImportError:
        pass
    values = [operator.index(v) for v in values]
    if len(values) != n:
        raise ValueError(f"indexer_forward: {name}: expected {n} values (as many as the device array), got {len(values)}")
    return (ctypes.c_int32 * n)(*values)


def _parse_choice(value, table: dict, name: str) -> int:
    if not isinstance(value, str) or value not in table:
        choices = ", ".join(repr(c) for c in table)
        raise ValueError(f"indexer_forward: {name}: expected one of {choices}, got {value!r}")
    return table[value]


def indexer_forward(
    q,
    k,
    w,
    ratio: int = 4,
    sm_scale: float = 1.0,
    q_causal_offsets=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    thd_columns: str = "local",
    return_lse: bool = False,
    out=None,
    *,
    lse_out=None,
    family: str = "auto",
    ks=None,
    ke=None,
    cu_seqlens_q_host=None,
    cu_seqlens_k_host=None,
    stream=None,
    q_scale=None,
    k_scale=None,
    window_columns: str = "key",
):
    """DSA lightning-indexer forward scores on the current CUDA stream.

    ``scores[b,i,j] = sm_scale * sum_h relu(q[b,i,h,:] . k[b,j,0,:]) * w[b,i,h]`` for visible
    ``j < clamp(floor((q_causal_offsets[b] + i + 1) / ratio), 0, S_k_b)``, ``-inf`` elsewhere.

    Arguments and results follow cuDNN-frontend's ``indexer_forward_wrapper``:

    - BSHD: q (B, S_q, H, D) bf16, k (B, S_k, 1, D) bf16, w (B, S_q, H) bf16 or fp32 ->
      scores (B, S_q, S_k) fp32, lse (B, S_q).
    - THD (pass ``cu_seqlens_q``, ``cu_seqlens_k`` int32 (n_seg + 1,) and both
      ``max_seqlen_*``): q (T_q, H, D), k (T_k, 1, D), w (T_q, H) -> scores
      (T_q, max_seqlen_k) with ``thd_columns="local"`` (cuDNN's layout) or (T_q, T_k) with
      ``"global"`` (absolute key columns), lse (T_q,).
    - ``q_causal_offsets``: int32 (B,) / (n_seg,), the global uncompressed token index of each
      batch's / segment's local q[0]; default all zero.
    - ``out``: an fp32 CUDA tensor of the result shape to fill (every cell is written);
      allocated when not given. Returned as the result.
    - ``return_lse``: also return ``lse[b,i] = log sum_{visible j} exp(scores[b,i,j])``
      (``-inf`` for empty rows): the result is then ``{'scores': ..., 'lse': ...}``.
      ``lse_out`` is filled in place when given (cuDNN's ``lse_out``).

    FP8 inputs: q and k ``torch.float8_e4m3fn`` (both; w stays bf16 or fp32), with optional
    keyword-only fp32 scales ``q_scale`` (B, S_q, H) / THD (T_q, H) and ``k_scale`` (B, S_k, 1)
    or (B, S_k) / THD (T_k, 1) or (T_k,) (absent: 1); then ``scores = sm_scale * sum_h w[h] *
    relu(q_scale[h] * k_scale[j] * (q8[h,:] . k8[j,:]))``. Scales must be finite and > 0 (the
    caller's duty: not checked on the device). The library validates them (dtype, shape,
    device; scales with bf16 q/k, mixed q/k dtypes and ``torch.float8_e5m2`` are refused with
    its message naming the parameter). The generic family serves every FP8 call, lean the
    ones its gates pass (as for bf16; lean FP8 gives generic FP8's bits).

    Differences from cuDNN-frontend: without ``return_lse`` the scores tensor itself is
    returned (cuDNN returns a TupleDict holding it); ``ratio`` defaults to 4 as there, the C
    API's default is 1. There are no tuning knobs; FP8 scales are keyword arguments here (the
    cuDNN-frontend drop-in, `dsa_indexer.cudnn_compat`, takes ``precision="fp8"``).

    Extensions (keyword-only): ``family`` ("auto" or a name of ``dsa_indexer.kernel_families()``:
    the C API's kernel-family choice; a named family raises when its gate fails), explicit per-row windows ``ks``/``ke`` (int32 (B, S_q) / (T_q,),
    absolute output columns, instead of the ratio-causal window), ``window_columns``
    ("key", the default: column j holds key j; "window_start", BSHD with ``ks``/``ke``: column c
    of row (b, i) holds key ``ks[b, i] + c`` and the scores are (B, S_q, N), N = ``max_seqlen_k``
    (or ``out``'s last dimension), a window longer than N keeping its first N keys: DeepGEMM's
    compressed logits), ``stream`` (a CUstream handle as int or a torch.cuda.Stream; default
    ``torch.cuda.current_stream(q.device)``).

    THD metadata: the library validates cu_seqlens on the host. With CUDA cu_seqlens and no
    host mirrors it reads them with one synchronizing device-to-host copy per call. To avoid
    that, pass ``cu_seqlens_q_host`` / ``cu_seqlens_k_host`` (CPU int32 tensors or int
    sequences, trusted to equal the device arrays), or pass ``cu_seqlens_q`` / ``_k`` as CPU
    int32 tensors: they are then copied to q's device on the stream and used as host mirrors.

    q, k and w whose innermost stride is not 1 are made contiguous first (one copy each), as
    in cuDNN-frontend; other strided layouts are passed to the library as they are.

    Raises ValueError (InvalidArgument) for malformed input, NotImplementedError and
    ValueError (UnsupportedConfig) for unsupported configurations, RuntimeError subclasses for
    compile, driver, cache and internal errors, all with the library's message; TypeError for
    non-tensor arguments. Nothing is launched when an error is raised.
    """
    o = _torch_op.ops()
    if o is not None:
        # The operators check every argument themselves; on an error the checks below run first,
        # so that both paths raise the same exception for malformed arguments. The common calls
        # (scores only, local columns, automatic family, no out=, no stream=) go straight to the
        # short operators, whose schemas have the fewest arguments: the host cost of a call.
        try:
            if (out is None and lse_out is None and stream is None and not return_lse and family == "auto" and ks is None
                    and ke is None and thd_columns == "local" and q_scale is None and k_scale is None
                    and window_columns == "key"):
                if cu_seqlens_q is None and cu_seqlens_k is None:
                    if cu_seqlens_q_host is None and cu_seqlens_k_host is None:
                        return (o.forward_bshd if o.dynamo_tracing() else o.bshd_entry)(q, k, w, ratio, sm_scale, q_causal_offsets)
                elif (cu_seqlens_q is not None and cu_seqlens_k is not None and max_seqlen_q is not None and max_seqlen_k is not None
                      and (cu_seqlens_q_host is None or isinstance(cu_seqlens_q_host, o.tensor_type))
                      and (cu_seqlens_k_host is None or isinstance(cu_seqlens_k_host, o.tensor_type))):
                    return (o.forward_thd if o.dynamo_tracing() else o.thd_entry)(
                        q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        cu_seqlens_q_host, cu_seqlens_k_host)
            return _torch_op.forward(o, q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                     max_seqlen_k, thd_columns, return_lse, out, lse_out, family, ks, ke, cu_seqlens_q_host,
                                     cu_seqlens_k_host, stream, q_scale, k_scale, window_columns)
        except Exception as e:
            _check_arguments(thd_columns, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             window_columns)
            translated = _torch_op.translate(e)
            if translated is e:
                raise
            raise translated from None
    thd_code, family_code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k = _check_arguments(
        thd_columns, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, window_columns)
    return _forward_ctypes(q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           thd_code, family_code, thd, return_lse, out, lse_out, ks, ke, cu_seqlens_q_host, cu_seqlens_k_host, stream,
                           q_scale, k_scale, window_columns)


def _check_arguments(thd_columns, family, ratio, sm_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     window_columns="key"):
    """The checks that need neither torch nor the library; returns the normalized values
    (thd_columns code, family code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k)."""
    thd_code = _parse_choice(thd_columns, _lib.THD_COLUMNS, "thd_columns")
    _parse_choice(window_columns, _lib.WINDOW_COLUMNS, "window_columns")
    family_code = _parse_choice(family, _lib.families("scores"), "family")
    ratio = operator.index(ratio)
    sm_scale = float(sm_scale)
    thd = cu_seqlens_q is not None or cu_seqlens_k is not None
    if thd:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            given = "cu_seqlens_q" if cu_seqlens_q is not None else "cu_seqlens_k"
            raise ValueError(f"indexer_forward: cu_seqlens_q / cu_seqlens_k: expected both (THD) or neither (BSHD), got only {given}")
        missing = [n for n, v in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)) if v is None]
        if missing:
            raise ValueError(f"indexer_forward: {' and '.join(missing)}: expected an int for THD (cu_seqlens given), got None")
        max_seqlen_q = operator.index(max_seqlen_q)
        max_seqlen_k = operator.index(max_seqlen_k)
    elif thd_code != _lib.THD_COLUMNS["local"]:
        raise ValueError("indexer_forward: thd_columns: expected 'local' (the default) for a BSHD call, got 'global'")
    elif window_columns == "window_start" and max_seqlen_k is not None:
        max_seqlen_k = operator.index(max_seqlen_k)  # the width of the scores allocated (out= sets its own)
    return thd_code, family_code, ratio, sm_scale, thd, max_seqlen_q, max_seqlen_k


def _forward_ctypes(q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    thd_code, family_code, thd, return_lse, out, lse_out, ks, ke, cu_seqlens_q_host, cu_seqlens_k_host, stream,
                    q_scale=None, k_scale=None, window_columns="key"):
    """`indexer_forward` through the ctypes binding of the C API, after the checks above."""
    import torch

    for name, t in (("q", q), ("k", k), ("w", w)):
        _check_tensor(t, name)
    for name, t in (("q", q), ("k", k), ("w", w)):
        if not t.is_cuda:
            raise ValueError(f"indexer_forward: {name}: expected a CUDA tensor, got a tensor on {t.device}")
    # As cuDNN-frontend does, inputs whose innermost dimension is strided are made contiguous
    # (one copy on the stream); other strides go to the library as they are.
    q, k, w = (t.contiguous() if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1 else t for t in (q, k, w))
    device = q.device

    # ---- THD metadata on the device, host mirrors where cheap ----
    if thd:
        for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            _check_tensor(t, name)
        if not cu_seqlens_q.is_cuda and cu_seqlens_q_host is None:
            cu_seqlens_q_host = cu_seqlens_q
        if not cu_seqlens_k.is_cuda and cu_seqlens_k_host is None:
            cu_seqlens_k_host = cu_seqlens_k
        if not cu_seqlens_q.is_cuda:
            cu_seqlens_q = cu_seqlens_q.to(device)
        if not cu_seqlens_k.is_cuda:
            cu_seqlens_k = cu_seqlens_k.to(device)
        mirror_q = _host_mirror(cu_seqlens_q_host, cu_seqlens_q.numel(), "cu_seqlens_q_host")
        mirror_k = _host_mirror(cu_seqlens_k_host, cu_seqlens_k.numel(), "cu_seqlens_k_host")
        if (mirror_q is None) != (mirror_k is None):
            raise ValueError("indexer_forward: cu_seqlens_q_host / cu_seqlens_k_host: expected both or neither, got one")
    elif cu_seqlens_q_host is not None or cu_seqlens_k_host is not None:
        raise ValueError("indexer_forward: cu_seqlens_q_host / cu_seqlens_k_host: expected none for a BSHD call, got a mirror")

    # ---- outputs ----
    if thd and (q.dim() != 3 or k.dim() != 3):
        raise ValueError(
            f"indexer_forward: q / k: expected rank 3 ((T_q, H, D), (T_k, 1, D)) for THD, got shapes {tuple(q.shape)} / {tuple(k.shape)}"
        )
    if not thd and (q.dim() != 4 or k.dim() != 4):
        raise ValueError(
            f"indexer_forward: q / k: expected rank 4 ((B, S_q, H, D), (B, S_k, 1, D)) for BSHD "
            f"(THD needs cu_seqlens_q/k), got shapes {tuple(q.shape)} / {tuple(k.shape)}"
        )
    columns = "local" if thd_code == _lib.THD_COLUMNS["local"] else "global"
    scores_shape, rows_shape = _torch_op.result_shapes(q, k, thd, _torch_op.scores_width(out, max_seqlen_k, window_columns), columns,
                                                       window_columns)
    if out is None:
        out = torch.empty(scores_shape, dtype=torch.float32, device=device)
    lse = lse_out
    if lse is None and return_lse:
        lse = torch.empty(rows_shape, dtype=torch.float32, device=device)

    # ---- descriptors ----
    opt = _lib.new_options()
    opt.ratio = ratio
    opt.sm_scale = sm_scale
    opt.thd_columns = thd_code
    opt.window_columns = _lib.WINDOW_COLUMNS[window_columns]
    opt.family = family_code
    opt.q_causal_offsets = _desc(q_causal_offsets, "q_causal_offsets")
    opt.ks = _desc(ks, "ks")
    opt.ke = _desc(ke, "ke")
    opt.lse = _desc(lse, "lse_out" if lse_out is not None else "lse")
    # FP8 scales go as they are (the library takes their strides); its validation names them.
    opt.q_scale = _desc(q_scale, "q_scale")
    opt.k_scale = _desc(k_scale, "k_scale")
    if thd:
        opt.cu_seqlens_q = _desc(cu_seqlens_q, "cu_seqlens_q")
        opt.cu_seqlens_k = _desc(cu_seqlens_k, "cu_seqlens_k")
        opt.max_seqlen_q = max_seqlen_q
        opt.max_seqlen_k = max_seqlen_k
        if mirror_q is not None:
            opt.cu_seqlens_q_host = ctypes.cast(mirror_q, ctypes.POINTER(ctypes.c_int32))
            opt.cu_seqlens_k_host = ctypes.cast(mirror_k, ctypes.POINTER(ctypes.c_int32))
    dq, dk, dw, dout = _desc(q, "q"), _desc(k, "k"), _desc(w, "w"), _desc(out, "out")

    if stream is None:
        stream = torch.cuda.current_stream(device).cuda_stream
    elif isinstance(stream, torch.cuda.Stream):
        stream = stream.cuda_stream
    # The locals (device copies of CPU cu_seqlens, host mirrors) live until the call returns;
    # freeing a device copy afterwards is safe because the caching allocator is stream-ordered.
    _lib.forward_raw(dq, dk, dw, dout, opt, int(stream))

    if return_lse:
        return {"scores": out, "lse": lse}
    return out


def flops(heads: int, visible_pairs: int, head_dim: int = 128) -> float:
    """Useful FLOPs of a forward: 2 * H * D per visible (query, key) pair."""
    return 2.0 * heads * head_dim * visible_pairs


def visible_pairs_bshd(batch: int, s_q: int, s_k: int, ratio: int, offset: int = 0) -> int:
    """Number of visible (i, j) cells of a BSHD problem with one offset for every batch."""
    return batch * sum(min(max((offset + i + 1) // ratio, 0), s_k) for i in range(s_q))


def visible_pairs_thd(cu_q, cu_k, ratio: int, offsets=None) -> int:
    """Number of visible cells of a THD problem (segment-local windows)."""
    total = 0
    for b in range(len(cu_q) - 1):
        sq, sk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
        off = offsets[b] if offsets is not None else 0
        total += sum(min(max((off + i + 1) // ratio, 0), sk) for i in range(sq))
    return total


__all__ = ["indexer_forward", "flops", "visible_pairs_bshd", "visible_pairs_thd"]
