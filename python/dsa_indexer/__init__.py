"""Python binding of dsa-indexer (DeepSeek sparse-attention lightning-indexer forward and top-k, Hopper).

A thin ctypes layer over the C API in include/dsa_indexer/c_api.h; PyTorch is needed only to
call `indexer_forward` on tensors and is imported lazily, so this package imports (and its
loader, ABI checks and raw calls work) without it.

    import torch, dsa_indexer
    scores = dsa_indexer.indexer_forward(q, k, w, ratio=2, sm_scale=0.125)
    res = dsa_indexer.indexer_forward(q, k, w, ratio=2, return_lse=True)  # {'scores', 'lse'}
    top = dsa_indexer.indexer_topk(q, k, w, top_k=2048, ratio=2)  # TopkResult: indices, values?, softmax?, lse?

The shared library is found through $DSA_INDEXER_LIBRARY, next to this package, in the
source tree's build/ directory, or by the system loader (see `dsa_indexer._lib`). Calls go
through the registered PyTorch operators (`torch.ops.dsa_indexer.indexer_forward`, `indexer_topk`) when their
library (libdsa_indexer_torch.so) is built, else through ctypes: `dsa_indexer.backend()` says
which (see `dsa_indexer._torch_op`).
"""

from __future__ import annotations

from . import errors
from ._forward import flops, indexer_forward, visible_pairs_bshd, visible_pairs_thd
from ._topk import TopkResult, indexer_topk, indexer_topk_workspace_size
from ._torch_op import Backend, backend, use_backend
from ._lib import (
    DSA_BF16,
    DSA_E4M3,
    DSA_E5M2,
    DSA_F16,
    DSA_F32,
    DSA_F64,
    DSA_I32,
    DSA_I64,
    CacheStats,
    families as kernel_families,
    kernel_cache_stats,
    library_path,
    load_library,
    version,
)
from .errors import (
    CacheError,
    CompileError,
    DriverError,
    Error,
    InternalError,
    InvalidArgument,
    LibraryABIError,
    LibraryError,
    LibraryNotFoundError,
    LibraryDependencyError,
    UnsupportedConfig,
)

__all__ = [
    "indexer_forward",
    "indexer_topk",
    "indexer_topk_workspace_size",
    "TopkResult",
    "backend",
    "use_backend",
    "Backend",
    "kernel_cache_stats",
    "kernel_families",
    "version",
    "library_path",
    "load_library",
    "CacheStats",
    "flops",
    "visible_pairs_bshd",
    "visible_pairs_thd",
    "errors",
    "Error",
    "InvalidArgument",
    "UnsupportedConfig",
    "CompileError",
    "DriverError",
    "CacheError",
    "InternalError",
    "LibraryError",
    "LibraryNotFoundError",
    "LibraryDependencyError",
    "LibraryABIError",
    "DSA_BF16",
    "DSA_F16",
    "DSA_F32",
    "DSA_I32",
    "DSA_I64",
    "DSA_F64",
    "DSA_E4M3",
    "DSA_E5M2",
]
