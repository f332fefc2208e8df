"""ctypes mirror of include/dsa_indexer/c_api.h and the loader of libdsa_indexer.so.

Standard library only: nothing here imports torch, so the layout checks, the loader and
raw calls with hand-made descriptors work on machines without PyTorch or a GPU.

Where the library is looked for, in order (the first that loads wins):

1. ``$DSA_INDEXER_LIBRARY``: a path to the shared library, or a directory holding
   ``libdsa_indexer.so`` (or ``libdsa_indexer.so.0``, as an installed wheel does). When the variable is set nothing else is tried, so a wrong value
   is an error instead of silently loading another copy.
2. in this package: ``<package>/libdsa_indexer.so``, or ``libdsa_indexer.so.0`` (what
   ``pip install .`` puts there, with the compile helper and the operator library);
3. the build tree of a source checkout: ``<package>/../../build/libdsa_indexer.so``;
4. the system loader (``LD_LIBRARY_PATH``, ldconfig): ``libdsa_indexer.so.0``, then
   ``libdsa_indexer.so``.

libdsa_indexer.so needs NVRTC 13 (libnvrtc.so.13); when the system loader does not find it,
the copy of a pip-installed CUDA stack (``nvidia/cu13/lib``, as PyTorch's wheels bring) is
loaded first.

After loading, ``dsa_options_init`` is called and the ``struct_size`` it writes, and the
defaults it fills in, are compared with the ctypes mirror below; a mismatch raises
LibraryABIError rather than passing misplaced fields to the library.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from pathlib import Path
from typing import NamedTuple

from .errors import (
    STATUS_OK,
    LibraryABIError,
    LibraryDependencyError,
    LibraryNotFoundError,
    error_for_status,
)

MAX_RANK = 4

# dtype codes (enum DSA_BF16 ... in c_api.h, the same values as dsa_indexer::DType)
DSA_BF16, DSA_F16, DSA_F32, DSA_I32, DSA_I64, DSA_F64, DSA_E4M3, DSA_E5M2 = range(8)
DTYPE_NAMES = {DSA_BF16: "bf16", DSA_F16: "f16", DSA_F32: "f32", DSA_I32: "i32", DSA_I64: "i64", DSA_F64: "f64",
               DSA_E4M3: "e4m3", DSA_E5M2: "e5m2"}

THD_COLUMNS = {"local": 0, "global": 1}
WINDOW_COLUMNS = {"key": 0, "window_start": 1}

# top-k (DSA_TOPK_* in c_api.h)
TOPK_MAX_K = 2048
TOPK_INDICES_LOCAL, TOPK_INDICES_GLOBAL = 0, 1

ENV_LIBRARY = "DSA_INDEXER_LIBRARY"
LIBRARY_NAMES = ("libdsa_indexer.so", "libdsa_indexer.so.0")


class DsaTensor(ctypes.Structure):
    """struct dsa_tensor: rank 0 and data NULL mean "not given"; shape/strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
        ("device", ctypes.c_int32),
    ]


class DsaOptions(ctypes.Structure):
    """struct dsa_options; always start from `new_options()` (dsa_options_init)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("ratio", ctypes.c_int64),
        ("sm_scale", ctypes.c_float),
        ("q_causal_offsets", DsaTensor),
        ("cu_seqlens_q", DsaTensor),
        ("cu_seqlens_k", DsaTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_k", ctypes.c_int64),
        ("cu_seqlens_q_host", ctypes.POINTER(ctypes.c_int32)),
        ("cu_seqlens_k_host", ctypes.POINTER(ctypes.c_int32)),
        ("thd_columns", ctypes.c_int32),
        ("ks", DsaTensor),
        ("ke", DsaTensor),
        ("lse", DsaTensor),
        ("family", ctypes.c_int32),
        ("q_scale", DsaTensor),  # FP8: optional fp32 per-row scales (appended)
        ("k_scale", DsaTensor),
        ("window_columns", ctypes.c_int32),  # WINDOW_COLUMNS (appended after the scales)
    ]


class DsaTopkOptions(ctypes.Structure):
    """struct dsa_topk_options; always start from `new_topk_options()` (dsa_topk_options_init)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("k", ctypes.c_int32),
        ("sort_by_score", ctypes.c_int32),
        ("indices", ctypes.c_int32),
        ("values", DsaTensor),
        ("softmax", DsaTensor),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
    ]


class DsaCacheStats(ctypes.Structure):
    """struct dsa_cache_stats (version 2), filled by dsa_kernel_cache_stats_ex with its size."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "hits", "misses", "evictions", "compiles", "disk_hits", "entries", "capacity",
            "background_compiles", "async_fallbacks", "background_failures", "queue_rejections", "recorded_keys",
        )
    ]


class CacheStats(NamedTuple):
    """Counters of the library's in-memory kernel cache (all devices together), of the background
    compile worker (DSA_INDEXER_LEAN_COMPILE=async) and of the shape recording
    (DSA_INDEXER_RECORD_MANIFEST); see CacheStats in include/dsa_indexer/indexer.hpp."""

    hits: int
    misses: int
    evictions: int
    compiles: int
    disk_hits: int
    entries: int
    capacity: int
    background_compiles: int
    async_fallbacks: int
    background_failures: int
    queue_rejections: int
    recorded_keys: int


def make_tensor(data: int | None, dtype: int, shape, strides, device: int = 0) -> DsaTensor:
    """A dsa_tensor from plain values. Ranks above 4 are passed as such (with the first four
    extents) so that the library, not this helper, reports the offending rank."""
    shape = [int(s) for s in shape]
    strides = [int(s) for s in strides]
    if len(strides) != len(shape):
        raise ValueError(f"make_tensor: strides: expected {len(shape)} values (one per dimension), got {len(strides)}")
    t = DsaTensor()
    t.data = data or None
    t.dtype = dtype
    t.rank = len(shape)
    for i, (n, s) in enumerate(zip(shape[:MAX_RANK], strides[:MAX_RANK])):
        t.shape[i] = n
        t.strides[i] = s
    t.device = device
    return t


def contiguous_strides(shape) -> list[int]:
    """Row-major strides in elements."""
    strides, s = [], 1
    for n in reversed(list(shape)):
        strides.append(s)
        s *= max(int(n), 1)
    return strides[::-1]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p = ctypes.POINTER
    lib.dsa_options_init.argtypes = [p(DsaOptions)]
    lib.dsa_options_init.restype = None
    lib.dsa_indexer_forward.argtypes = [p(DsaTensor), p(DsaTensor), p(DsaTensor), p(DsaTensor), p(DsaOptions), ctypes.c_void_p]
    lib.dsa_indexer_forward.restype = ctypes.c_int
    lib.dsa_topk_options_init.argtypes = [p(DsaTopkOptions)]
    lib.dsa_topk_options_init.restype = None
    topk_args = [p(DsaTensor), p(DsaTensor), p(DsaTensor), p(DsaTensor), p(DsaOptions), p(DsaTopkOptions)]
    lib.dsa_indexer_topk.argtypes = topk_args + [ctypes.c_void_p]
    lib.dsa_indexer_topk.restype = ctypes.c_int
    lib.dsa_indexer_topk_workspace_size.argtypes = topk_args + [p(ctypes.c_size_t)]
    lib.dsa_indexer_topk_workspace_size.restype = ctypes.c_int
    lib.dsa_last_error.argtypes = []
    lib.dsa_last_error.restype = ctypes.c_char_p
    lib.dsa_status_name.argtypes = [ctypes.c_int]
    lib.dsa_status_name.restype = ctypes.c_char_p
    lib.dsa_kernel_cache_stats.argtypes = [p(DsaCacheStats)]
    lib.dsa_kernel_cache_stats.restype = ctypes.c_int
    lib.dsa_kernel_cache_stats_ex.argtypes = [p(DsaCacheStats), ctypes.c_size_t]
    lib.dsa_kernel_cache_stats_ex.restype = ctypes.c_int
    lib.dsa_version.argtypes = []
    lib.dsa_version.restype = ctypes.c_char_p
    lib.dsa_kernel_family_count.argtypes = []
    lib.dsa_kernel_family_count.restype = ctypes.c_int32
    lib.dsa_kernel_family_info.argtypes = [ctypes.c_int32, p(ctypes.c_char_p), p(ctypes.c_int32), p(ctypes.c_char_p)]
    lib.dsa_kernel_family_info.restype = ctypes.c_int
    return lib


def check_abi(lib: ctypes.CDLL, path: str, mirror: type = None, topk_mirror: type = None) -> None:
    """Compares what dsa_options_init and dsa_topk_options_init write with the ctypes mirrors
    (size and defaults); `mirror` / `topk_mirror` default to DsaOptions / DsaTopkOptions (tests
    pass deliberately wrong ones)."""
    _check_topk_abi(lib, path, DsaTopkOptions if topk_mirror is None else topk_mirror)
    mirror = DsaOptions if mirror is None else mirror
    # A buffer larger than the mirror, so that a library whose struct grew cannot write past it.
    raw = (ctypes.c_char * (ctypes.sizeof(mirror) + 512))()
    lib.dsa_options_init(ctypes.cast(raw, lib.dsa_options_init.argtypes[0]))
    struct_size = ctypes.c_uint32.from_buffer(raw).value
    if struct_size != ctypes.sizeof(mirror):
        raise LibraryABIError(
            f"{path}: dsa_options.struct_size: expected {ctypes.sizeof(mirror)} (this binding's ctypes mirror), "
            f"got {struct_size}: the library and python/dsa_indexer/_lib.py disagree on c_api.h"
        )
    o = mirror.from_buffer(raw)
    want = {"ratio": 1, "max_seqlen_q": -1, "max_seqlen_k": -1, "thd_columns": 0, "family": 0}
    got = {name: getattr(o, name) for name in want}
    if got != want or o.sm_scale != 1.0 or o.q_causal_offsets.rank != 0 or o.lse.rank != 0:
        raise LibraryABIError(
            f"{path}: dsa_options_init defaults seen through the ctypes mirror: expected {want} and sm_scale 1.0, "
            f"got {got} and sm_scale {o.sm_scale}: the field offsets differ from c_api.h"
        )


def _check_topk_abi(lib: ctypes.CDLL, path: str, mirror: type) -> None:
    raw = (ctypes.c_char * (ctypes.sizeof(mirror) + 512))()
    lib.dsa_topk_options_init(ctypes.cast(raw, lib.dsa_topk_options_init.argtypes[0]))
    struct_size = ctypes.c_uint32.from_buffer(raw).value
    if struct_size != ctypes.sizeof(mirror):
        raise LibraryABIError(
            f"{path}: dsa_topk_options.struct_size: expected {ctypes.sizeof(mirror)} (this binding's ctypes mirror), "
            f"got {struct_size}: the library and python/dsa_indexer/_lib.py disagree on c_api.h"
        )
    o = mirror.from_buffer(raw)
    want = {"k": TOPK_MAX_K, "sort_by_score": 0, "indices": TOPK_INDICES_LOCAL, "workspace": None, "workspace_bytes": 0}
    got = {name: getattr(o, name) for name in want}
    if got != want or o.values.rank != 0 or o.softmax.rank != 0:
        raise LibraryABIError(
            f"{path}: dsa_topk_options_init defaults seen through the ctypes mirror: expected {want}, got {got}: "
            "the field offsets differ from c_api.h"
        )


def candidate_paths(environ=None) -> list[str]:
    """The paths tried, in order (see the module docstring). With $DSA_INDEXER_LIBRARY set,
    only that one."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_LIBRARY, "")
    if explicit:
        p = Path(explicit)
        return [str(p / n) for n in LIBRARY_NAMES] if p.is_dir() else [explicit]
    here = Path(__file__).resolve().parent
    out = [str(here / n) for n in LIBRARY_NAMES]
    out += [os.path.normpath(here / ".." / ".." / "build" / n) for n in LIBRARY_NAMES]
    out += ["libdsa_indexer.so.0", "libdsa_indexer.so"]  # bare names: the system loader searches
    seen, unique = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


def _preload_nvrtc() -> bool:
    """Makes libnvrtc.so.13 resolvable when the system loader cannot find it, from the copy a
    pip-installed CUDA 13 stack ships (nvidia/cu13/lib or nvidia/cuda_nvrtc/lib, as torch's
    wheels bring). Returns whether one was loaded."""
    import glob
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        for pattern in ("cu13/lib/libnvrtc.so.13*", "cuda_nvrtc/lib/libnvrtc.so.13*"):
            for cand in sorted(glob.glob(os.path.join(root, pattern))):
                try:
                    ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                    return True
                except OSError:
                    continue
    return False


_CANNOT_OPEN = re.compile(r"([^\s:/]+\.so[^\s:/]*): cannot open shared object file")


def _missing_dependencies(tried: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(candidate, dependency, reason) for each candidate that exists but whose dlopen failed
    because another library it needs could not be opened (glibc names the file that failed)."""
    out = []
    for path, why in tried:
        m = _CANNOT_OPEN.search(why)
        if m and m.group(1) != os.path.basename(path):
            out.append((path, m.group(1), why))
    return out


def load_library(environ=None) -> tuple[ctypes.CDLL, str]:
    """Loads the first candidate that dlopen accepts and checks its ABI (uncached; most code
    wants `library()`). Raises LibraryNotFoundError listing every path tried and why."""
    env = os.environ if environ is None else environ
    tried: list[tuple[str, str]] = []
    for path in candidate_paths(env):
        is_bare = os.sep not in path
        if not is_bare and not os.path.exists(path):
            tried.append((path, "no such file"))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            lib = None
            if "libnvrtc" in str(e) and _preload_nvrtc():
                try:
                    lib = ctypes.CDLL(path)
                except OSError as e2:
                    e = e2
            if lib is None:
                tried.append((path, str(e)))
                continue
        try:
            _declare(lib)
        except AttributeError as e:
            tried.append((path, f"not libdsa_indexer (missing symbol: {e})"))
            continue
        check_abi(lib, path)
        return lib, path
    missing = _missing_dependencies(tried)
    if missing:
        # The library itself was found; what failed is a library it needs. Say that, not
        # "libdsa_indexer.so not found".
        path, dep, why = missing[0]
        fix = (
            "install NVRTC 13 (the CUDA 13 toolkit, or the pip CUDA 13 NVRTC package PyTorch's wheels bring, "
            "looked for under nvidia/cu13/lib and nvidia/cuda_nvrtc/lib) or add the directory holding it to LD_LIBRARY_PATH"
            if dep.startswith("libnvrtc")
            else "install it, or add the directory holding it to LD_LIBRARY_PATH"
        )
        lines = "\n".join(f"  {p}: {w}" for p, w in tried)
        raise LibraryDependencyError(
            f"{path} was found but does not load: the library it needs, {dep}, could not be loaded ({fix}); tried:\n{lines}",
            tried, dep)
    how = (
        f"${ENV_LIBRARY} is set, so only it was tried"
        if env.get(ENV_LIBRARY)
        else f"set ${ENV_LIBRARY} to the library's path, or build it (cmake --build build)"
    )
    lines = "\n".join(f"  {p}: {why}" for p, why in tried)
    raise LibraryNotFoundError(f"libdsa_indexer.so not found ({how}); tried:\n{lines}", tried)


_lock = threading.Lock()
_loaded: tuple[ctypes.CDLL, str] | None = None


def library() -> ctypes.CDLL:
    """The process-wide library handle, loaded on first use."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = load_library()
        return _loaded[0]


def library_path() -> str:
    """The path the library was loaded from (loads it if needed)."""
    library()
    assert _loaded is not None
    return _loaded[1]


def new_options() -> DsaOptions:
    """A dsa_options filled by the library's dsa_options_init."""
    o = DsaOptions()
    library().dsa_options_init(ctypes.byref(o))
    return o


def last_error() -> str:
    return (library().dsa_last_error() or b"").decode("utf-8", "replace")


def status_name(status: int) -> str:
    return library().dsa_status_name(status).decode()


def check(status: int) -> None:
    """Raises the Error subclass for a non-OK status, with the library's message."""
    if status != STATUS_OK:
        raise error_for_status(status, last_error())


def forward_raw(q: DsaTensor, k: DsaTensor, w: DsaTensor, scores: DsaTensor, options: DsaOptions, stream: int | None = None) -> None:
    """dsa_indexer_forward on descriptors; raises on any non-OK status. `stream` is a CUstream
    handle as an integer (None or 0: the legacy default stream)."""
    lib = library()
    status = lib.dsa_indexer_forward(
        ctypes.byref(q), ctypes.byref(k), ctypes.byref(w), ctypes.byref(scores), ctypes.byref(options), stream or None
    )
    # dsa_last_error is per thread; ctypes runs the call and this read on the calling thread.
    check(status)


def new_topk_options() -> DsaTopkOptions:
    """A dsa_topk_options filled by the library's dsa_topk_options_init."""
    o = DsaTopkOptions()
    library().dsa_topk_options_init(ctypes.byref(o))
    return o


def topk_raw(q: DsaTensor, k: DsaTensor, w: DsaTensor, indices: DsaTensor, options: DsaOptions, topk: DsaTopkOptions,
             stream: int | None = None) -> None:
    """dsa_indexer_topk on descriptors; raises on any non-OK status (`stream` as in forward_raw)."""
    status = library().dsa_indexer_topk(ctypes.byref(q), ctypes.byref(k), ctypes.byref(w), ctypes.byref(indices),
                                        ctypes.byref(options), ctypes.byref(topk), stream or None)
    check(status)


def topk_workspace_size_raw(q: DsaTensor, k: DsaTensor, w: DsaTensor, indices: DsaTensor, options: DsaOptions,
                            topk: DsaTopkOptions) -> int:
    """dsa_indexer_topk_workspace_size on descriptors: the bytes the same call needs."""
    out = ctypes.c_size_t(0)
    status = library().dsa_indexer_topk_workspace_size(ctypes.byref(q), ctypes.byref(k), ctypes.byref(w), ctypes.byref(indices),
                                                       ctypes.byref(options), ctypes.byref(topk), ctypes.byref(out))
    check(status)
    return out.value


def kernel_cache_stats() -> CacheStats:
    """The library's kernel-cache, background-compile and recording counters."""
    s = DsaCacheStats()
    check(library().dsa_kernel_cache_stats_ex(ctypes.byref(s), ctypes.sizeof(s)))
    return CacheStats(*(getattr(s, f) for f, _ in DsaCacheStats._fields_))


_families: dict[str, dict[str, int]] = {}
_families_lock = threading.Lock()


def families(operation: str = "scores") -> dict[str, int]:
    """{"auto": 0, name: id, ...} of the families of one operation, from the library's registry
    (dsa_kernel_family_info): the names ``family=`` accepts."""
    with _families_lock:
        if operation not in _families:
            lib = library()
            table = {"auto": 0}
            for i in range(lib.dsa_kernel_family_count()):
                name, fid, op = ctypes.c_char_p(), ctypes.c_int32(), ctypes.c_char_p()
                check(lib.dsa_kernel_family_info(i, ctypes.byref(name), ctypes.byref(fid), ctypes.byref(op)))
                if op.value.decode() == operation:
                    table[name.value.decode()] = fid.value
            _families[operation] = table
        return _families[operation]


def version() -> str:
    """The library's version string, e.g. "0.1.0"."""
    return library().dsa_version().decode()
