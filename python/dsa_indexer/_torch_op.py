"""The registered PyTorch operators, when built, and which backend `indexer_forward` uses.

`libdsa_indexer_torch.so` (python/csrc/torch_op.cpp, CMake option DSA_INDEXER_BUILD_TORCH_OP)
registers ``torch.ops.dsa_indexer.indexer_forward`` (scores), ``indexer_forward_lse`` (scores
and lse), ``indexer_forward_out`` (into given tensors) and the short forms of the common calls,
``indexer_forward_bshd`` and ``indexer_forward_thd`` (local columns, automatic family, every
argument required: fewer arguments for the dispatcher to convert), and the top-k operators
``indexer_topk`` (-> [indices, values?, softmax?, lse?]) and ``indexer_topk_out`` (into given
tensors; python/csrc/torch_topk_op.cpp), with CUDA, Meta (fake) and Autograd kernels. It is looked for, in order:

1. ``$DSA_INDEXER_TORCH_OP``: its path (when set, only it is tried and a failure is an error;
   ``0`` means "do not use the operator": the ctypes binding serves every call);
2. beside the loaded libdsa_indexer.so (the build tree and the installed package keep them
   together);
3. beside this package.

The C library is loaded first (through ctypes, `_lib.library()`), so the operator library's
dependency on libdsa_indexer.so.0 resolves to the same copy: one kernel cache, one set of
counters. When none is found, or torch is not installed, `indexer_forward` uses the ctypes
binding; `backend()` says which one serves calls and why.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from typing import NamedTuple

from . import _lib
from .errors import STATUS_NAMES, LibraryError, error_for_status

ENV_TORCH_OP = "DSA_INDEXER_TORCH_OP"
OP_LIBRARY = "libdsa_indexer_torch.so"
TORCH_OPS, CTYPES = "torch.ops", "ctypes"


class Backend(NamedTuple):
    """Which implementation `dsa_indexer.indexer_forward` calls: ``name`` is "torch.ops" (the
    registered operator: torch.compile and CUDA graphs see one op) or "ctypes" (the ctypes
    binding: opaque to torch.compile); ``path`` the operator library loaded (or ""); ``reason``
    why the operator is not used (or "")."""

    name: str
    path: str
    reason: str


class _Ops(NamedTuple):
    forward: object  # torch.ops.dsa_indexer.indexer_forward.default
    forward_lse: object  # torch.ops.dsa_indexer.indexer_forward_lse.default
    forward_out: object  # torch.ops.dsa_indexer.indexer_forward_out.default
    forward_bshd: object  # torch.ops.dsa_indexer.indexer_forward_bshd.default (the common BSHD call)
    forward_thd: object  # torch.ops.dsa_indexer.indexer_forward_thd.default (the common THD call)
    tensor_type: type  # torch.Tensor
    # The short operators' C++ entry points (OpOverload._op, which OpOverload.__call__ calls):
    # eager calls skip one Python frame; calls Dynamo traces use the OpOverloads (other tracers
    # see the operator through the dispatcher either way).
    bshd_entry: object
    thd_entry: object
    dynamo_tracing: object  # torch.compiler.is_dynamo_compiling (one call returning a constant in eager mode)
    topk: object  # torch.ops.dsa_indexer.indexer_topk.default (-> [indices, values?, softmax?, lse?])
    topk_out: object  # torch.ops.dsa_indexer.indexer_topk_out.default (into given tensors)


_SCHEMA_TYPE_ERROR = re.compile(r"^dsa_indexer::(\w+)\(\) Expected a value of type '([^']+)' for argument '(\w+)' but instead found type '([^']+)'")

_lock = threading.Lock()
_state: tuple | None = None  # (_Ops or None, Backend) once resolved


def candidate_paths(environ=None) -> list[str]:
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_TORCH_OP, "")
    if explicit:
        return [] if explicit == "0" else [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(os.path.dirname(os.path.realpath(_lib.library_path())), OP_LIBRARY), os.path.join(here, OP_LIBRARY)]
    return list(dict.fromkeys(out))


def _resolve(environ=None):
    env = os.environ if environ is None else environ
    # The C library first, whichever backend results: "ctypes" is reported only once the library
    # it calls has loaded (a loader error is raised, not hidden behind a backend name), and the
    # operator's NEEDED entry resolves to this copy.
    _lib.library()
    if env.get(ENV_TORCH_OP) == "0":
        return None, Backend(CTYPES, "", f"${ENV_TORCH_OP}=0")
    try:
        import torch
    except ImportError as e:
        return None, Backend(CTYPES, "", f"torch is not importable ({e})")
    tried = []
    for path in candidate_paths(env):
        if not os.path.exists(path):
            if env.get(ENV_TORCH_OP):
                raise LibraryError(f"${ENV_TORCH_OP}={path}: no such file")
            tried.append(f"{path}: no such file")
            continue
        try:
            torch.ops.load_library(path)
            _register_fakes(torch)
            ops = torch.ops.dsa_indexer
            return (_Ops(ops.indexer_forward.default, ops.indexer_forward_lse.default, ops.indexer_forward_out.default,
                         ops.indexer_forward_bshd.default, ops.indexer_forward_thd.default, torch.Tensor,
                         ops.indexer_forward_bshd.default._op, ops.indexer_forward_thd.default._op, torch.compiler.is_dynamo_compiling,
                         ops.indexer_topk.default, ops.indexer_topk_out.default),
                    Backend(TORCH_OPS, path, ""))
        except (OSError, RuntimeError, AttributeError) as e:
            tried.append(f"{path}: {e}")
            if env.get(ENV_TORCH_OP):
                raise LibraryError(f"${ENV_TORCH_OP}={path}: the operator library does not load: {e}") from e
            warnings.warn(f"dsa_indexer: {path} does not load ({e}); using the ctypes binding", RuntimeWarning, stacklevel=3)
    return None, Backend(CTYPES, "", "operator library not found or not loadable: " + "; ".join(tried))


def ops():
    """The operator handles, or None when the ctypes binding serves calls (resolved once).

    torch.compile traces through this: resolve it before tracing with `fullgraph=True` (any
    eager call, or `backend()`), since loading a library cannot be traced."""
    global _state
    s = _state
    if s is None:
        with _lock:
            if _state is None:
                _state = _resolve()
            s = _state
    return s[0]


def backend() -> Backend:
    """Which implementation serves `dsa_indexer.indexer_forward` (loads the libraries: the C
    library always, so a backend is never reported for a library that did not load; raises the
    loader's LibraryError when it does not)."""
    ops()
    return _state[1]


def use_backend(name: str) -> Backend:
    """Chooses the backend of later calls: "auto" (the operator when it loads, else ctypes, as
    at start-up), "ctypes", or "torch.ops" (raises LibraryError when the operator does not
    load). Returns the backend now in use."""
    global _state
    if name not in ("auto", CTYPES, TORCH_OPS):
        raise ValueError(f"use_backend: name: expected 'auto', 'ctypes' or 'torch.ops', got {name!r}")
    with _lock:
        resolved = _resolve()
        if name == CTYPES:
            resolved = (None, Backend(CTYPES, "", "use_backend('ctypes')"))
        elif name == TORCH_OPS and resolved[0] is None:
            raise LibraryError(f"use_backend('torch.ops'): the operator is not available: {resolved[1].reason}")
        _state = resolved
    return _state[1]


def translate(e: Exception) -> Exception:
    """The binding's exception for an error the operator raised with a "[DSA_STATUS_...] "
    prefix (the C++ side's convention); other exceptions are returned unchanged."""
    msg = str(e)
    m = _SCHEMA_TYPE_ERROR.search(msg)
    if m:  # the dispatcher's argument conversion: a TypeError, as in the ctypes binding
        want = "a torch.Tensor" if m.group(2).startswith("Tensor") else f"a value of type {m.group(2)}"
        where = "indexer_topk" if m.group(1).startswith("indexer_topk") else "indexer_forward"
        return TypeError(f"{where}: {m.group(3)}: expected {want}, got {m.group(4)} ({msg.splitlines()[0]})")
    if not msg.startswith("[DSA_STATUS_"):
        return e
    name, _, rest = msg[1:].partition("] ")
    status = next((code for code, n in STATUS_NAMES.items() if n == name), None)
    if status is None:
        return e
    return error_for_status(status, rest.split("\nException raised from ")[0])


def host_mirror_tensor(values):
    import torch

    if values is None or isinstance(values, torch.Tensor):
        return values
    return torch.tensor([int(v) for v in values], dtype=torch.int32)


def _stream_context(stream, device):
    import torch

    if isinstance(stream, torch.cuda.Stream):
        return torch.cuda.stream(stream)
    return torch.cuda.stream(torch.cuda.ExternalStream(int(stream), device=device))


def forward(o: _Ops, q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            thd_columns, return_lse, out, lse_out, family, ks, ke, cu_seqlens_q_host, cu_seqlens_k_host, stream,
            q_scale=None, k_scale=None, window_columns="key"):
    """`indexer_forward` through the registered operators (same arguments and results), for
    the calls with out=, lse_out=, stream=, FP8 scales or window columns (the others call the
    operator directly).
    Errors are the operator's (see `translate`)."""
    if stream is not None:
        with _stream_context(stream, q.device):
            return forward(o, q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           thd_columns, return_lse, out, lse_out, family, ks, ke, cu_seqlens_q_host, cu_seqlens_k_host, None,
                           q_scale, k_scale, window_columns)
    extra = {}
    if family != "auto" or ks is not None or ke is not None or cu_seqlens_q_host is not None or cu_seqlens_k_host is not None:
        extra = dict(family=family, ks=ks, ke=ke, cu_seqlens_q_host=host_mirror_tensor(cu_seqlens_q_host),
                     cu_seqlens_k_host=host_mirror_tensor(cu_seqlens_k_host))
    # Only when given: a call without them keeps the schema's defaults (no extra argument to convert).
    if q_scale is not None:
        extra["q_scale"] = q_scale
    if k_scale is not None:
        extra["k_scale"] = k_scale
    if window_columns != "key":
        extra["window_columns"] = window_columns
    args = (q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, thd_columns)
    if out is None and lse_out is None:
        if return_lse:
            scores, lse = o.forward_lse(*args, **extra)
            return {"scores": scores, "lse": lse}
        return o.forward(*args, **extra)
    if out is None or (lse_out is None and return_lse):
        scores_shape, rows_shape = result_shapes(q, k, cu_seqlens_q is not None, scores_width(out, max_seqlen_k, window_columns),
                                                 thd_columns, window_columns)
        if out is None:
            out = q.new_empty(scores_shape, dtype=_float32())
        if lse_out is None:
            lse_out = q.new_empty(rows_shape, dtype=_float32())
    o.forward_out(*args, out=out, lse_out=lse_out, **extra)
    return {"scores": out, "lse": lse_out} if return_lse else out


def topk(o: _Ops, q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
         global_indices, sort_by_score, return_values, return_softmax, return_lse, indices_out, values_out, softmax_out,
         lse_out, workspace, family, cu_seqlens_q_host, cu_seqlens_k_host, stream, q_scale=None, k_scale=None):
    """`indexer_topk` through the registered operators: the allocating one without caller buffers,
    else `indexer_topk_out` (the results it is not given are allocated here, on the stream).
    Returns (indices, values, softmax, lse), None for what was not asked for."""
    if stream is not None:
        with _stream_context(stream, q.device):
            return topk(o, q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        max_seqlen_k, global_indices, sort_by_score, return_values, return_softmax, return_lse, indices_out,
                        values_out, softmax_out, lse_out, workspace, family, cu_seqlens_q_host, cu_seqlens_k_host, None,
                        q_scale, k_scale)
    args = (q, k, w, top_k, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    extra = dict(global_indices=global_indices, sort_by_score=sort_by_score)
    if family != "auto" or cu_seqlens_q_host is not None or cu_seqlens_k_host is not None:
        extra.update(family=family, cu_seqlens_q_host=host_mirror_tensor(cu_seqlens_q_host),
                     cu_seqlens_k_host=host_mirror_tensor(cu_seqlens_k_host))
    if q_scale is not None:
        extra["q_scale"] = q_scale
    if k_scale is not None:
        extra["k_scale"] = k_scale
    want = (return_values or values_out is not None, return_softmax or softmax_out is not None, return_lse or lse_out is not None)
    if indices_out is None and values_out is None and softmax_out is None and lse_out is None and workspace is None:
        got = iter(o.topk(*args, return_values=want[0], return_softmax=want[1], return_lse=want[2], **extra))
        indices = next(got)
        return (indices, *(next(got) if w_ else None for w_ in want))
    shape, rows = topk_shapes(q, k, cu_seqlens_q is not None or cu_seqlens_k is not None, top_k)
    if indices_out is None:
        indices_out = q.new_empty(shape, dtype=_int32())
    if want[0] and values_out is None:
        values_out = q.new_empty(shape, dtype=_float32())
    if want[1] and softmax_out is None:
        softmax_out = q.new_empty(shape, dtype=_float32())
    if want[2] and lse_out is None:
        lse_out = q.new_empty(rows, dtype=_float32())
    o.topk_out(*args, indices_out=indices_out, values_out=values_out, softmax_out=softmax_out, lse_out=lse_out,
               workspace=workspace, **extra)
    return indices_out, values_out, softmax_out, lse_out


def _int32():
    import torch

    return torch.int32


def _float32():
    import torch

    return torch.float32


_fakes_registered = False


def _register_fakes(torch) -> None:
    """The fake kernels of the operators (shapes and dtypes only; FakeTensorMode, meta
    tensors and torch.compile's tracing run them). They check what the shapes depend on; the
    FP8 scales (q_scale, k_scale) do not change a result's shape or dtype."""
    global _fakes_registered
    if _fakes_registered:
        return

    def shapes(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, thd_columns, window_columns="key"):
        thd = cu_seqlens_q is not None or cu_seqlens_k is not None
        if thd and (cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None):
            raise ValueError("indexer_forward: THD needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k")
        if thd_columns not in ("local", "global") or (not thd and thd_columns != "local"):
            raise ValueError(f"indexer_forward: thd_columns: expected 'local' (or 'global' for THD), got {thd_columns!r}")
        if window_columns not in ("key", "window_start"):
            raise ValueError(f"indexer_forward: window_columns: expected 'key' or 'window_start', got {window_columns!r}")
        if thd and window_columns == "window_start":  # as the library refuses it (its UnsupportedConfig)
            from .errors import UnsupportedConfig

            raise UnsupportedConfig("indexer_forward: window_columns: expected key for THD (window_start columns, DeepGEMM's "
                                    "compressed logits, are BSHD's), got window_start")
        rank = 3 if thd else 4
        if q.dim() != rank or k.dim() != rank:
            raise ValueError(f"indexer_forward: q / k: expected rank {rank} for {'THD' if thd else 'BSHD'}, got shapes {tuple(q.shape)} / {tuple(k.shape)}")
        return result_shapes(q, k, thd, max_seqlen_k, thd_columns, window_columns)

    @torch.library.register_fake("dsa_indexer::indexer_forward")
    def _fake_forward(q, k, w, ratio=4, sm_scale=1.0, q_causal_offsets=None, cu_seqlens_q=None, cu_seqlens_k=None,
                      max_seqlen_q=None, max_seqlen_k=None, thd_columns="local", *, family="auto",
                      ks=None, ke=None, cu_seqlens_q_host=None, cu_seqlens_k_host=None, q_scale=None, k_scale=None,
                      window_columns="key"):
        scores, _ = shapes(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, thd_columns, window_columns)
        return q.new_empty(scores, dtype=torch.float32)

    @torch.library.register_fake("dsa_indexer::indexer_forward_lse")
    def _fake_forward_lse(q, k, w, ratio=4, sm_scale=1.0, q_causal_offsets=None, cu_seqlens_q=None, cu_seqlens_k=None,
                          max_seqlen_q=None, max_seqlen_k=None, thd_columns="local", *, family="auto",
                          ks=None, ke=None, cu_seqlens_q_host=None, cu_seqlens_k_host=None, q_scale=None, k_scale=None,
                          window_columns="key"):
        scores, rows = shapes(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, thd_columns, window_columns)
        return q.new_empty(scores, dtype=torch.float32), q.new_empty(rows, dtype=torch.float32)

    @torch.library.register_fake("dsa_indexer::indexer_forward_bshd")
    def _fake_forward_bshd(q, k, w, ratio, sm_scale, q_causal_offsets):
        scores, _ = shapes(q, k, None, None, None, None, "local")
        return q.new_empty(scores, dtype=torch.float32)

    @torch.library.register_fake("dsa_indexer::indexer_forward_thd")
    def _fake_forward_thd(q, k, w, ratio, sm_scale, q_causal_offsets, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          cu_seqlens_q_host, cu_seqlens_k_host):
        scores, _ = shapes(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, "local")
        return q.new_empty(scores, dtype=torch.float32)

    @torch.library.register_fake("dsa_indexer::indexer_forward_out")
    def _fake_forward_out(q, k, w, ratio=4, sm_scale=1.0, q_causal_offsets=None, cu_seqlens_q=None, cu_seqlens_k=None,
                          max_seqlen_q=None, max_seqlen_k=None, thd_columns="local", *, out, lse_out=None, family="auto",
                          ks=None, ke=None, cu_seqlens_q_host=None, cu_seqlens_k_host=None, q_scale=None, k_scale=None,
                          window_columns="key"):
        scores, rows = shapes(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, scores_width(out, max_seqlen_k, window_columns),
                              thd_columns, window_columns)
        for name, t, want in (("out", out, scores), ("lse_out", lse_out, rows)):
            if t is not None and (tuple(t.shape) != tuple(want) or t.dtype != torch.float32):
                raise ValueError(f"indexer_forward: {name}: expected f32{list(want)}, got {t.dtype}{list(t.shape)}")
        return None

    def topk_checked_shapes(q, k, top_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, family):
        # The family name too (the registry's, as the CUDA kernel checks it), so that a traced
        # call fails where the eager one would; fake kernels run as plain Python, never traced.
        if family not in _lib.families("topk"):
            names = ", ".join(repr(n) for n in _lib.families("topk"))
            raise ValueError(f"indexer_topk: family: expected one of {names}, got {family!r}")
        thd = cu_seqlens_q is not None or cu_seqlens_k is not None
        if thd and (cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None):
            raise ValueError("indexer_topk: THD needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k")
        check_top_k(top_k)
        rank = 3 if thd else 4
        if q.dim() != rank or k.dim() != rank:
            raise ValueError(f"indexer_topk: q / k: expected rank {rank} for {'THD' if thd else 'BSHD'}, got shapes {tuple(q.shape)} / {tuple(k.shape)}")
        return topk_shapes(q, k, thd, top_k)

    @torch.library.register_fake("dsa_indexer::indexer_topk")
    def _fake_topk(q, k, w, top_k=2048, ratio=4, sm_scale=1.0, q_causal_offsets=None, cu_seqlens_q=None, cu_seqlens_k=None,
                   max_seqlen_q=None, max_seqlen_k=None, *, global_indices=False, sort_by_score=False, return_values=False,
                   return_softmax=False, return_lse=False, family="auto", cu_seqlens_q_host=None, cu_seqlens_k_host=None,
                   q_scale=None, k_scale=None):
        shape, rows = topk_checked_shapes(q, k, top_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, family)
        out = [q.new_empty(shape, dtype=torch.int32)]
        out += [q.new_empty(shape, dtype=torch.float32) for wanted in (return_values, return_softmax) if wanted]
        if return_lse:
            out.append(q.new_empty(rows, dtype=torch.float32))
        return out

    @torch.library.register_fake("dsa_indexer::indexer_topk_out")
    def _fake_topk_out(q, k, w, top_k=2048, ratio=4, sm_scale=1.0, q_causal_offsets=None, cu_seqlens_q=None, cu_seqlens_k=None,
                       max_seqlen_q=None, max_seqlen_k=None, *, indices_out, values_out=None, softmax_out=None, lse_out=None,
                       workspace=None, global_indices=False, sort_by_score=False, family="auto", cu_seqlens_q_host=None,
                       cu_seqlens_k_host=None, q_scale=None, k_scale=None):
        shape, rows = topk_checked_shapes(q, k, top_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, family)
        for name, t, want, dtype in (("indices_out", indices_out, shape, torch.int32), ("values_out", values_out, shape, torch.float32),
                                     ("softmax_out", softmax_out, shape, torch.float32), ("lse_out", lse_out, rows, torch.float32)):
            if t is not None and (tuple(t.shape) != tuple(want) or t.dtype != dtype):
                raise ValueError(f"indexer_topk: {name}: expected {str(dtype).removeprefix('torch.')}{list(want)}, got {t.dtype}{list(t.shape)}")
        return None

    _fakes_registered = True


def scores_width(out, max_seqlen_k, window_columns: str):
    """The max_seqlen_k that `result_shapes` takes: with window_start columns (BSHD), a given
    ``out``'s width is the call's (the library takes N from the scores), else max_seqlen_k."""
    if window_columns == "window_start" and out is not None and out.dim() == 3:
        return out.shape[-1]
    return max_seqlen_k


def result_shapes(q, k, thd: bool, max_seqlen_k, thd_columns: str, window_columns: str = "key"):
    """(scores shape, lse shape) of a call: BSHD (B, S_q, S_k) / (B, S_q), with
    ``window_columns="window_start"`` (B, S_q, max_seqlen_k); THD (T_q, max_seqlen_k) with local
    columns or (T_q, T_k) with global ones / (T_q,)."""
    if thd:
        return (q.shape[0], max_seqlen_k if thd_columns == "local" else k.shape[0]), (q.shape[0],)
    if window_columns == "window_start":
        if max_seqlen_k is None or max_seqlen_k < 1:
            raise ValueError("indexer_forward: max_seqlen_k: expected the width N >= 1 of the scores (B, S_q, N) with "
                             f"window_columns='window_start', got {max_seqlen_k}")
        return (q.shape[0], q.shape[1], max_seqlen_k), (q.shape[0], q.shape[1])
    return (q.shape[0], q.shape[1], k.shape[1]), (q.shape[0], q.shape[1])


def check_top_k(top_k) -> int:
    """top_k as an int in [1, 2048] (the library's bounds, checked here too because the outputs'
    shape depends on it): InvalidArgument below, UnsupportedConfig above, as the library raises."""
    import operator

    from .errors import InvalidArgument, UnsupportedConfig

    top_k = operator.index(top_k)
    if top_k < 1:
        raise InvalidArgument(f"indexer_topk: top_k: expected >= 1, got {top_k}")
    if top_k > _lib.TOPK_MAX_K:
        raise UnsupportedConfig(f"indexer_topk: top_k: expected <= {_lib.TOPK_MAX_K}, got {top_k}")
    return top_k


def topk_shapes(q, k, thd: bool, top_k: int):
    """(indices / values / softmax shape, lse shape) of a top-k call: BSHD (B, S_q, top_k) /
    (B, S_q); THD (T_q, top_k) / (T_q,)."""
    if thd:
        return (q.shape[0], top_k), (q.shape[0],)
    return (q.shape[0], q.shape[1], top_k), (q.shape[0], q.shape[1])
