"""Tests of the Python binding that need neither a GPU nor PyTorch.

They load the real libdsa_indexer.so ($DSA_INDEXER_LIBRARY, else the in-tree build/) and
check the ctypes mirror against it, the loader's errors, the argument checks done in Python,
and raw dsa_indexer_forward calls on hand-made descriptors that the library must reject
(validation runs before the library touches any memory, so fake device addresses are safe).
Tests that use torch for CPU-side checks skip when it is not installed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import PYTHON_DIR, REPO_ROOT

import dsa_indexer
from dsa_indexer import _lib, errors

C_API_HEADER_DIR = REPO_ROOT / "include"


# ---------------------------------------------------------------- struct layout -------------


def test_options_struct_size_matches_library():
    raw = (ctypes.c_char * 4096)()
    _lib.library().dsa_options_init(ctypes.cast(raw, ctypes.POINTER(_lib.DsaOptions)))
    written = ctypes.c_uint32.from_buffer(raw).value
    assert written == ctypes.sizeof(_lib.DsaOptions)


def test_options_init_defaults_seen_through_mirror():
    o = _lib.new_options()
    assert o.struct_size == ctypes.sizeof(_lib.DsaOptions)
    assert (o.ratio, o.sm_scale, o.max_seqlen_q, o.max_seqlen_k) == (1, 1.0, -1, -1)
    assert (o.thd_columns, o.family) == (0, 0)
    for name in ("q_causal_offsets", "cu_seqlens_q", "cu_seqlens_k", "ks", "ke", "lse"):
        t = getattr(o, name)
        assert (t.data, t.rank) == (None, 0), name
    assert not o.cu_seqlens_q_host and not o.cu_seqlens_k_host


def _c_compiler():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def test_field_offsets_match_c_header(tmp_path):
    """offsetof/sizeof of every field as a C compiler sees c_api.h vs the ctypes mirror."""
    cc = _c_compiler()
    if cc is None:
        pytest.skip("no C compiler to compile the layout probe")
    structs = {
        "dsa_tensor": _lib.DsaTensor,
        "dsa_options": _lib.DsaOptions,
        "dsa_cache_stats": _lib.DsaCacheStats,
        "dsa_topk_options": _lib.DsaTopkOptions,
    }
    lines = []
    for cname, py in structs.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, _ in py._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    src = tmp_path / "probe.c"
    src.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"dsa_indexer/c_api.h\"\nint main(void) {\n"
        + "\n".join("  " + l for l in lines)
        + "\n  return 0;\n}\n"
    )
    exe = tmp_path / "probe"
    subprocess.run([cc, "-std=c11", "-I", str(C_API_HEADER_DIR), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    seen = {}
    for line in filter(None, out):
        cname, field, value = line.split()
        seen[(cname, field)] = int(value)
    for cname, py in structs.items():
        assert seen[(cname, "sizeof")] == ctypes.sizeof(py), cname
        for field, _ in py._fields_:
            assert seen[(cname, field)] == getattr(py, field).offset, f"{cname}.{field}"
    assert len(seen) == sum(len(py._fields_) + 1 for py in structs.values())


def test_dtype_codes_match_header():
    header = (C_API_HEADER_DIR / "dsa_indexer" / "c_api.h").read_text()
    enum = re.search(r"enum \{ (DSA_BF16 = 0[^}]*)\}", header).group(1)
    codes = {name: int(v) for name, v in re.findall(r"(DSA_\w+) = (\d+)", enum)}
    assert int(re.search(r"#define DSA_TOPK_MAX_K (\d+)", header).group(1)) == _lib.TOPK_MAX_K
    conventions = dict(re.findall(r"(DSA_TOPK_INDICES_\w+) = (\d+)", header))
    assert conventions == {"DSA_TOPK_INDICES_LOCAL": str(_lib.TOPK_INDICES_LOCAL), "DSA_TOPK_INDICES_GLOBAL": str(_lib.TOPK_INDICES_GLOBAL)}
    assert codes == {
        "DSA_BF16": _lib.DSA_BF16,
        "DSA_F16": _lib.DSA_F16,
        "DSA_F32": _lib.DSA_F32,
        "DSA_I32": _lib.DSA_I32,
        "DSA_I64": _lib.DSA_I64,
        "DSA_F64": _lib.DSA_F64,
        "DSA_E4M3": _lib.DSA_E4M3,
        "DSA_E5M2": _lib.DSA_E5M2,
    }


def test_status_names_match_library():
    for code, name in errors.STATUS_NAMES.items():
        assert _lib.status_name(code) == name


# ---------------------------------------------------------------- loading -------------------


def test_bogus_library_path_lists_what_was_tried(tmp_path):
    bogus = str(tmp_path / "nope" / "libdsa_indexer.so")
    with pytest.raises(errors.LibraryNotFoundError) as ei:
        _lib.load_library({_lib.ENV_LIBRARY: bogus})
    assert isinstance(ei.value, OSError)
    assert bogus in str(ei.value)
    assert ei.value.tried == [(bogus, "no such file")]  # with the variable set nothing else is tried


def test_library_path_that_is_not_a_library(tmp_path):
    fake = tmp_path / "libdsa_indexer.so"
    fake.write_bytes(b"not an ELF file")
    with pytest.raises(errors.LibraryNotFoundError) as ei:
        _lib.load_library({_lib.ENV_LIBRARY: str(fake)})
    (path, why), = ei.value.tried
    assert path == str(fake) and why != "no such file"


def test_library_directory_in_variable():
    lib_dir = os.path.dirname(_lib.library_path())
    lib, path = _lib.load_library({_lib.ENV_LIBRARY: lib_dir})
    first = next(n for n in _lib.LIBRARY_NAMES if os.path.exists(os.path.join(lib_dir, n)))
    assert path == os.path.join(lib_dir, first)
    assert lib.dsa_version().decode() == dsa_indexer.version()


def test_default_candidates_without_variable():
    cands = _lib.candidate_paths({})
    pkg_dir = os.path.dirname(os.path.abspath(dsa_indexer.__file__))
    pkg, pkg0 = (os.path.join(pkg_dir, n) for n in ("libdsa_indexer.so", "libdsa_indexer.so.0"))
    build = os.path.normpath(os.path.join(pkg_dir, "..", "..", "build", "libdsa_indexer.so"))
    assert cands.index(pkg) < cands.index(pkg0) < cands.index(build) < cands.index("libdsa_indexer.so.0")


@pytest.mark.skipif(os.environ.get("DSA_TEST_INSTALLED") != "1", reason="tests an installed package (DSA_TEST_INSTALLED=1)")
def test_installed_package_is_self_contained():
    """A wheel's package holds the library and the compile helper and finds the library
    without $DSA_INDEXER_LIBRARY."""
    assert not os.environ.get(_lib.ENV_LIBRARY), "unset DSA_INDEXER_LIBRARY to test the installed package"
    pkg_dir = os.path.dirname(os.path.abspath(dsa_indexer.__file__))
    assert not pkg_dir.startswith(str(PYTHON_DIR)), f"imported the source tree's package: {pkg_dir}"
    assert os.path.dirname(_lib.library_path()) == pkg_dir
    helper = os.path.join(pkg_dir, "dsa-indexer-nvrtc-helper")
    assert os.path.isfile(helper) and os.access(helper, os.X_OK)
    assert dsa_indexer.version() == re.search(r"project\(dsa_indexer VERSION ([0-9.]+)", (REPO_ROOT / "CMakeLists.txt").read_text()).group(1)


def test_import_needs_neither_torch_nor_library(tmp_path):
    """`import dsa_indexer` loads nothing; the first call raises the loader's error."""
    code = textwrap.dedent(
        """
        import sys
        import dsa_indexer
        assert "torch" not in sys.modules, "dsa_indexer imported torch"
        try:
            dsa_indexer.version()
        except dsa_indexer.LibraryNotFoundError as e:
            print("LOADERR", e)
        else:
            raise SystemExit("version() worked with a bogus DSA_INDEXER_LIBRARY")
        """
    )
    env = dict(os.environ, DSA_INDEXER_LIBRARY=str(tmp_path / "missing.so"), PYTHONPATH=str(PYTHON_DIR))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "LOADERR" in r.stdout and str(tmp_path / "missing.so") in r.stdout


def test_missing_dependency_is_named(tmp_path, monkeypatch):
    """A libdsa_indexer.so that exists but whose NVRTC cannot be loaded is reported as that (the
    dependency named, how to fix it), not as "libdsa_indexer.so not found"."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libraries")
    dep = "libnvrtc-dsa-test-missing.so.13"  # a name no system provides (libnvrtc.so.13 may be installed)
    (tmp_path / "dep.c").write_text("int dsa_test_dep(void) { return 1; }\n")
    (tmp_path / "lib.c").write_text("int dsa_test_dep(void);\nint dsa_version(void) { return dsa_test_dep(); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / dep), f"-Wl,-soname,{dep}", str(tmp_path / "dep.c")], check=True)
    (tmp_path / "lib").mkdir()
    fake = tmp_path / "lib" / "libdsa_indexer.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(fake), str(tmp_path / "lib.c"), "-Wl,--no-as-needed",
                    str(tmp_path / dep)], check=True)
    (tmp_path / dep).unlink()  # now the library exists and its dependency does not
    monkeypatch.setattr(_lib, "_preload_nvrtc", lambda: False)  # no pip NVRTC copy either
    for value in (str(fake), str(fake.parent)):  # the file, and its directory
        with pytest.raises(errors.LibraryDependencyError) as ei:
            _lib.load_library({_lib.ENV_LIBRARY: value})
        msg = str(ei.value)
        assert isinstance(ei.value, errors.LibraryNotFoundError)  # what callers already catch
        assert ei.value.dependency == dep
        assert "not found" not in msg.split(";")[0], msg
        assert f"{fake} was found but does not load" in msg and dep in msg, msg
        assert "NVRTC" in msg and "LD_LIBRARY_PATH" in msg, msg
    # A library that is simply absent is still "not found", not a dependency error.
    with pytest.raises(errors.LibraryNotFoundError) as ei:
        _lib.load_library({_lib.ENV_LIBRARY: str(tmp_path / "nope.so")})
    assert not isinstance(ei.value, errors.LibraryDependencyError)


def test_backend_reports_only_a_loaded_library(tmp_path):
    """backend() loads the C library before naming a backend: with the library missing it raises
    the loader's error instead of reporting "ctypes" (which could serve no call)."""
    code = textwrap.dedent(
        """
        import dsa_indexer
        try:
            b = dsa_indexer.backend()
        except dsa_indexer.LibraryNotFoundError as e:
            print("LOADERR", e)
        else:
            raise SystemExit(f"backend() reported {b} without a loadable library")
        """
    )
    for op in ("0", None):  # the operator refused by the variable, and the default search (torch or not)
        env = dict(os.environ, DSA_INDEXER_LIBRARY=str(tmp_path / "missing.so"), PYTHONPATH=str(PYTHON_DIR))
        env.pop("DSA_INDEXER_TORCH_OP", None)
        if op is not None:
            env["DSA_INDEXER_TORCH_OP"] = op
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "LOADERR" in r.stdout and str(tmp_path / "missing.so") in r.stdout
    b = dsa_indexer.backend()  # with the real library: a backend, and the library is loaded
    assert b.name in ("ctypes", "torch.ops") and _lib._loaded is not None


def test_abi_mismatch_is_reported():
    bigger = type("Bigger", (ctypes.Structure,), {"_fields_": _lib.DsaOptions._fields_ + [("extra", ctypes.c_int64)]})
    with pytest.raises(errors.LibraryABIError, match="struct_size"):
        _lib.check_abi(_lib.library(), "the library", bigger)
    # Same size, two 8-byte fields swapped: the defaults are read from the wrong places.
    fields = list(_lib.DsaOptions._fields_)
    i, j = [n for n, _ in fields].index("max_seqlen_q"), [n for n, _ in fields].index("cu_seqlens_q_host")
    fields[i], fields[j] = fields[j], fields[i]
    swapped = type("Swapped", (ctypes.Structure,), {"_fields_": fields})
    assert ctypes.sizeof(swapped) == ctypes.sizeof(_lib.DsaOptions)
    with pytest.raises(errors.LibraryABIError, match="defaults"):
        _lib.check_abi(_lib.library(), "the library", swapped)
    _lib.check_abi(_lib.library(), "the library")  # the real mirror passes


# ---------------------------------------------------------------- misc entry points ---------


def test_version_matches_cmake_project():
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    want = re.search(r"project\(dsa_indexer VERSION ([0-9.]+)", cmake).group(1)
    assert dsa_indexer.version() == want


def test_kernel_cache_stats_shape():
    s = dsa_indexer.kernel_cache_stats()
    assert isinstance(s, dsa_indexer.CacheStats)
    want_capacity = int(os.environ.get("DSA_INDEXER_CACHE_CAPACITY", "256"))
    assert s.capacity == want_capacity
    assert s.entries <= s.capacity and s.compiles <= s.misses
    # No call ran here: the worker and the recorder have nothing to count.
    assert (s.background_compiles, s.async_fallbacks, s.background_failures, s.queue_rejections, s.recorded_keys) == (0,) * 5


# ---------------------------------------------------------------- raw calls -----------------

FAKE = 0x7F0000000000  # 16-byte aligned, never dereferenced: validation rejects the call first


def _t(addr, dtype, shape):
    return _lib.make_tensor(addr, dtype, shape, _lib.contiguous_strides(shape))


def _bshd(H=64, S_q=8, S_k=4, D=128, q_dtype=_lib.DSA_BF16, w_dtype=_lib.DSA_BF16):
    return (
        _t(FAKE, q_dtype, [1, S_q, H, D]),
        _t(FAKE + 0x1000000, _lib.DSA_BF16, [1, S_k, 1, D]),
        _t(FAKE + 0x2000000, w_dtype, [1, S_q, H]),
        _t(FAKE + 0x3000000, _lib.DSA_F32, [1, S_q, S_k]),
    )


def test_raw_invalid_dtype_is_value_error_with_library_message():
    q, k, w, s = _bshd(q_dtype=_lib.DSA_F16)
    with pytest.raises(ValueError) as ei:
        _lib.forward_raw(q, k, w, s, _lib.new_options())
    e = ei.value
    assert isinstance(e, errors.InvalidArgument) and e.status == errors.STATUS_INVALID_ARGUMENT
    assert "q.dtype" in str(e) and "bf16" in str(e) and "f16" in str(e)
    assert str(e) == _lib.last_error()


def test_raw_bad_scores_shape_names_parameter():
    q, k, w, _ = _bshd()
    s = _t(FAKE + 0x3000000, _lib.DSA_F32, [1, 8, 5])
    with pytest.raises(errors.InvalidArgument, match=r"scores\.shape\[2\]"):
        _lib.forward_raw(q, k, w, s, _lib.new_options())


def test_raw_rank_above_four_rejected_by_library():
    q = _lib.make_tensor(FAKE, _lib.DSA_BF16, [1, 1, 8, 64, 128], _lib.contiguous_strides([1, 1, 8, 64, 128]))
    _, k, w, s = _bshd()
    with pytest.raises(errors.InvalidArgument, match=r"q\.rank"):
        _lib.forward_raw(q, k, w, s, _lib.new_options())


def test_raw_ratio_and_scale_checks():
    q, k, w, s = _bshd()
    o = _lib.new_options()
    o.ratio = 0
    with pytest.raises(errors.InvalidArgument, match="ratio"):
        _lib.forward_raw(q, k, w, s, o)
    o = _lib.new_options()
    o.sm_scale = float("nan")
    with pytest.raises(errors.InvalidArgument, match="sm_scale"):
        _lib.forward_raw(q, k, w, s, o)


def test_raw_unsupported_heads_is_not_implemented_and_value_error():
    q, k, w, s = _bshd(H=48)
    with pytest.raises(NotImplementedError) as ei:
        _lib.forward_raw(q, k, w, s, _lib.new_options())
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, errors.UnsupportedConfig)
    assert ei.value.status_name == "DSA_STATUS_UNSUPPORTED_CONFIG"
    assert "48" in str(ei.value)


def test_raw_wrong_struct_size_rejected():
    q, k, w, s = _bshd()
    o = _lib.new_options()
    o.struct_size = 8
    with pytest.raises(errors.InvalidArgument, match="struct_size"):
        _lib.forward_raw(q, k, w, s, o)


def test_raw_thd_requires_max_seqlen():
    q = _t(FAKE, _lib.DSA_BF16, [8, 64, 128])
    k = _t(FAKE + 0x1000000, _lib.DSA_BF16, [4, 1, 128])
    w = _t(FAKE + 0x2000000, _lib.DSA_BF16, [8, 64])
    s = _t(FAKE + 0x3000000, _lib.DSA_F32, [8, 4])
    o = _lib.new_options()
    o.cu_seqlens_q = _t(FAKE + 0x4000000, _lib.DSA_I32, [2])
    o.cu_seqlens_k = _t(FAKE + 0x5000000, _lib.DSA_I32, [2])
    with pytest.raises(errors.InvalidArgument, match="max_seqlen_q"):
        _lib.forward_raw(q, k, w, s, o)


def test_raw_thd_host_mirror_checked():
    """Host mirrors are read (they are host memory) and a wrong total is reported."""
    q = _t(FAKE, _lib.DSA_BF16, [8, 64, 128])
    k = _t(FAKE + 0x1000000, _lib.DSA_BF16, [4, 1, 128])
    w = _t(FAKE + 0x2000000, _lib.DSA_BF16, [8, 64])
    s = _t(FAKE + 0x3000000, _lib.DSA_F32, [8, 4])
    o = _lib.new_options()
    o.cu_seqlens_q = _t(FAKE + 0x4000000, _lib.DSA_I32, [2])
    o.cu_seqlens_k = _t(FAKE + 0x5000000, _lib.DSA_I32, [2])
    o.max_seqlen_q, o.max_seqlen_k = 8, 4
    host_q = (ctypes.c_int32 * 2)(0, 7)  # T_q is 8
    host_k = (ctypes.c_int32 * 2)(0, 4)
    o.cu_seqlens_q_host = ctypes.cast(host_q, ctypes.POINTER(ctypes.c_int32))
    o.cu_seqlens_k_host = ctypes.cast(host_k, ctypes.POINTER(ctypes.c_int32))
    with pytest.raises(errors.InvalidArgument, match=r"cu_seqlens_q\[1\]"):
        _lib.forward_raw(q, k, w, s, o)


def _driver_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_raw_valid_call_without_driver_is_runtime_error():
    if _driver_loadable():
        pytest.skip("a CUDA driver is present: this test needs a machine without one")
    q, k, w, s = _bshd()
    with pytest.raises(RuntimeError) as ei:
        _lib.forward_raw(q, k, w, s, _lib.new_options())
    assert isinstance(ei.value, errors.DriverError) and not isinstance(ei.value, ValueError)
    assert "libcuda" in str(ei.value)


def test_error_for_unknown_status():
    e = errors.error_for_status(99, "boom")
    assert isinstance(e, errors.InternalError) and "99" in str(e) and "boom" in str(e)


# ---------------------------------------------------------------- Python-side checks --------


def test_thd_columns_string_checked_before_anything_else():
    with pytest.raises(ValueError, match="thd_columns.*'local', 'global'.*'middle'"):
        dsa_indexer.indexer_forward(None, None, None, thd_columns="middle")


def test_family_string_checked():
    with pytest.raises(ValueError, match="family"):
        dsa_indexer.indexer_forward(None, None, None, family="fastest")


def test_family_names_come_from_the_library_registry():
    # The library's registry is the one list; the scores families keep their C API ids.
    assert dsa_indexer._lib.families("scores") == {"auto": 0, "generic": 1, "reference": 2, "lean": 3}
    assert dsa_indexer._lib.families("no such operation") == {"auto": 0}


def test_ratio_must_be_integer():
    with pytest.raises(TypeError):
        dsa_indexer.indexer_forward(None, None, None, ratio=2.5)


def test_thd_needs_both_max_seqlen():
    with pytest.raises(ValueError, match="max_seqlen_k"):
        dsa_indexer.indexer_forward(None, None, None, cu_seqlens_q=object(), cu_seqlens_k=object(), max_seqlen_q=4)
    with pytest.raises(ValueError, match="max_seqlen_q and max_seqlen_k"):
        dsa_indexer.indexer_forward(None, None, None, cu_seqlens_q=object(), cu_seqlens_k=object())


def test_thd_needs_both_cu_seqlens():
    with pytest.raises(ValueError, match="only cu_seqlens_k"):
        dsa_indexer.indexer_forward(None, None, None, cu_seqlens_k=object(), max_seqlen_q=1, max_seqlen_k=1)


def test_global_columns_only_for_thd():
    with pytest.raises(ValueError, match="BSHD"):
        dsa_indexer.indexer_forward(None, None, None, thd_columns="global")


def test_visible_pairs_helpers():
    # ratio 2, S_q 8, S_k 4: windows 0,1,1,2,2,3,3,4 -> 16
    assert dsa_indexer.visible_pairs_bshd(1, 8, 4, 2) == 16
    assert dsa_indexer.visible_pairs_bshd(3, 8, 4, 2) == 48
    assert dsa_indexer.visible_pairs_bshd(1, 4, 4, 1, offset=-2) == 0 + 0 + 1 + 2
    assert dsa_indexer.visible_pairs_thd([0, 8, 12], [0, 4, 6], 2) == 16 + (0 + 1 + 1 + 2)
    assert dsa_indexer.flops(64, 10) == 2 * 64 * 128 * 10


# ---------------------------------------------------------------- with torch (CPU only) -----


def test_cpu_tensors_rejected():
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 8, 64, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16)
    w = torch.zeros(1, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="q: expected a CUDA tensor"):
        dsa_indexer.indexer_forward(q, k, w)
    with pytest.raises(TypeError, match="k: expected a torch.Tensor"):
        dsa_indexer.indexer_forward(q, [1, 2], w)


def _naive_scores(q, k, w, ratio, sm_scale, offsets):
    """Cell-by-cell fp64 evaluation of the contract's formula (BSHD), for tiny shapes."""
    B, S_q, H, _ = q.shape
    S_k = k.shape[1]
    out = [[[float("-inf")] * S_k for _ in range(S_q)] for _ in range(B)]
    for b in range(B):
        for i in range(S_q):
            end = min(max((offsets[b] + i + 1) // ratio, 0), S_k)
            for j in range(end):
                acc = 0.0
                for h in range(H):
                    dot = sum(float(q[b, i, h, d]) * float(k[b, j, 0, d]) for d in range(q.shape[3]))
                    acc += max(dot, 0.0) * float(w[b, i, h])
                out[b][i][j] = sm_scale * acc
    return out


def test_reference_matches_naive_formula():
    torch = pytest.importorskip("torch")
    from dsa_indexer.reference import compare, indexer_forward_reference

    g = torch.Generator().manual_seed(0)
    B, S_q, S_k, H, D = 2, 7, 5, 3, 4
    q = torch.randn(B, S_q, H, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, S_k, 1, D, generator=g, dtype=torch.float64)
    w = torch.randn(B, S_q, H, generator=g, dtype=torch.float64)
    offs = torch.tensor([3, -2], dtype=torch.int32)
    got = indexer_forward_reference(q, k, w, ratio=2, sm_scale=0.5, q_causal_offsets=offs)
    want = torch.tensor(_naive_scores(q, k, w, 2, 0.5, [3, -2]), dtype=torch.float64)
    c = compare(got, want)
    assert c["pattern_mismatch"] == 0 and c["rel_l2"] < 1e-12 and c["visible"] > 0
    # THD: two segments of the same data reproduce the per-batch blocks (local columns) and
    # place them at the segment's key rows (global columns).
    cu_q = torch.tensor([0, S_q, 2 * S_q], dtype=torch.int32)
    cu_k = torch.tensor([0, S_k, 2 * S_k], dtype=torch.int32)
    kw = dict(ratio=2, sm_scale=0.5, q_causal_offsets=offs, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=S_q, max_seqlen_k=S_k)
    local = indexer_forward_reference(q.reshape(-1, H, D), k.reshape(-1, 1, D), w.reshape(-1, H), **kw)
    assert compare(local, want.reshape(-1, S_k))["rel_l2"] < 1e-12
    glob = indexer_forward_reference(q.reshape(-1, H, D), k.reshape(-1, 1, D), w.reshape(-1, H), thd_columns="global", **kw)
    assert torch.equal(glob[:S_q, :S_k], local[:S_q]) and torch.equal(glob[S_q:, S_k:], local[S_q:])
    assert torch.isneginf(glob[:S_q, S_k:]).all() and torch.isneginf(glob[S_q:, :S_k]).all()


# ---------------------------------------------------------------- top-k (no GPU, no torch) ---


def test_topk_options_init_defaults_seen_through_mirror():
    t = _lib.new_topk_options()
    assert t.struct_size == ctypes.sizeof(_lib.DsaTopkOptions)
    assert (t.k, t.sort_by_score, t.indices) == (_lib.TOPK_MAX_K, 0, _lib.TOPK_INDICES_LOCAL)
    assert (t.values.data, t.values.rank, t.softmax.data, t.softmax.rank) == (None, 0, None, 0)
    assert (t.workspace, t.workspace_bytes) == (None, 0)


def test_topk_abi_mismatch_is_reported():
    bigger = type("BiggerTopk", (ctypes.Structure,), {"_fields_": _lib.DsaTopkOptions._fields_ + [("extra", ctypes.c_int64)]})
    with pytest.raises(errors.LibraryABIError, match="dsa_topk_options.struct_size"):
        _lib.check_abi(_lib.library(), "the library", topk_mirror=bigger)
    fields = list(_lib.DsaTopkOptions._fields_)
    fields[1], fields[3] = fields[3], fields[1]  # k and indices swapped: same size, defaults misread
    swapped = type("SwappedTopk", (ctypes.Structure,), {"_fields_": fields})
    with pytest.raises(errors.LibraryABIError, match="dsa_topk_options_init defaults"):
        _lib.check_abi(_lib.library(), "the library", topk_mirror=swapped)


def _topk_call(S_q=8, S_k=4, k=4):
    q, kk, w, _ = _bshd(S_q=S_q, S_k=S_k)
    indices = _t(FAKE + 0x3000000, _lib.DSA_I32, [1, S_q, k])
    t = _lib.new_topk_options()
    t.k = k
    return q, kk, w, indices, _lib.new_options(), t


def _both_raise(cls, match, args):
    """dsa_indexer_topk and its workspace-size query reject the call with the same error."""
    with pytest.raises(cls, match=match):
        _lib.topk_raw(*args)
    with pytest.raises(cls, match=match):
        _lib.topk_workspace_size_raw(*args)


def test_raw_topk_bad_k():
    q, k, w, i, o, t = _topk_call()
    t.k = 0
    _both_raise(errors.InvalidArgument, r"indexer_topk: k: expected >= 1, got 0", (q, k, w, i, o, t))
    t.k = _lib.TOPK_MAX_K + 1
    with pytest.raises(NotImplementedError) as ei:
        _lib.topk_raw(q, k, w, i, o, t)
    assert isinstance(ei.value, errors.UnsupportedConfig) and "2048" in str(ei.value)


def test_raw_topk_outputs_checked():
    q, k, w, i, o, t = _topk_call()
    bad = _t(FAKE + 0x3000000, _lib.DSA_I32, [1, 8, 5])  # last dim is not k
    _both_raise(errors.InvalidArgument, r"indices\.shape\[2\]", (q, k, w, bad, o, t))
    t.values = _t(FAKE + 0x6000000, _lib.DSA_BF16, [1, 8, 4])
    _both_raise(errors.InvalidArgument, r"values\.dtype", (q, k, w, i, o, t))
    t = _lib.new_topk_options()
    t.k = 4
    t.softmax = _t(FAKE + 0x3000000 + 16, _lib.DSA_F32, [1, 8, 4])  # overlaps indices
    _both_raise(errors.InvalidArgument, "does not overlap", (q, k, w, i, o, t))
    t = _lib.new_topk_options()
    t.k, t.indices = 4, 9
    _both_raise(errors.InvalidArgument, r"topk\.indices", (q, k, w, i, o, t))
    t = _lib.new_topk_options()
    t.k, t.workspace, t.workspace_bytes = 4, FAKE + 0x7000000 + 8, 4096
    with pytest.raises(errors.InvalidArgument, match="256-byte aligned"):
        _lib.topk_raw(q, k, w, i, o, t)


def test_raw_topk_struct_sizes_and_unsupported_options():
    q, k, w, i, o, t = _topk_call()
    t.struct_size = 8
    _both_raise(errors.InvalidArgument, "topk.struct_size", (q, k, w, i, o, t))
    q, k, w, i, o, t = _topk_call()
    o.thd_columns = _lib.THD_COLUMNS["global"]
    _both_raise(errors.InvalidArgument, "thd_columns", (q, k, w, i, o, t))


def test_raw_topk_valid_call_without_driver_is_runtime_error():
    if _driver_loadable():
        pytest.skip("a CUDA driver is present: this test needs a machine without one")
    args = _topk_call()
    for fn in (_lib.topk_raw, _lib.topk_workspace_size_raw):
        with pytest.raises(errors.DriverError, match="libcuda"):
            fn(*args)


def test_topk_family_names_come_from_the_library_registry():
    assert _lib.families("topk") == {"auto": 0, "topk_unfused": 4, "topk_fused": 5}
    with pytest.raises(ValueError, match=r"indexer_topk: family: expected one of 'auto', 'topk_unfused', 'topk_fused', got 'generic'"):
        dsa_indexer.indexer_topk(None, None, None, family="generic")


def test_topk_python_checks_before_any_tensor():
    with pytest.raises(errors.InvalidArgument, match="indexer_topk: top_k: expected >= 1, got 0"):
        dsa_indexer.indexer_topk(None, None, None, top_k=0)
    with pytest.raises(NotImplementedError, match="top_k: expected <= 2048, got 4096") as ei:
        dsa_indexer.indexer_topk(None, None, None, top_k=4096)
    assert isinstance(ei.value, errors.UnsupportedConfig) and isinstance(ei.value, ValueError)
    with pytest.raises(TypeError):
        dsa_indexer.indexer_topk(None, None, None, top_k=2.5)
    with pytest.raises(TypeError):
        dsa_indexer.indexer_topk(None, None, None, ratio=1.5)
    with pytest.raises(ValueError, match="only cu_seqlens_k"):
        dsa_indexer.indexer_topk(None, None, None, cu_seqlens_k=object(), max_seqlen_q=1, max_seqlen_k=1)
    with pytest.raises(ValueError, match="max_seqlen_q and max_seqlen_k"):
        dsa_indexer.indexer_topk(None, None, None, cu_seqlens_q=object(), cu_seqlens_k=object())
    with pytest.raises(errors.InvalidArgument, match="top_k"):
        dsa_indexer.indexer_topk_workspace_size(None, None, None, top_k=-1)


def test_topk_signature():
    import inspect

    params = inspect.signature(dsa_indexer.indexer_topk).parameters
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == ["q", "k", "w", "top_k", "ratio", "sm_scale", "q_causal_offsets", "cu_seqlens_q", "cu_seqlens_k",
                          "max_seqlen_q", "max_seqlen_k"]
    assert (params["top_k"].default, params["ratio"].default, params["global_indices"].default) == (2048, 4, False)
    assert dsa_indexer.TopkResult._fields == ("indices", "values", "softmax", "lse")


def test_topk_cpu_tensors_rejected():
    torch = pytest.importorskip("torch")
    q = torch.zeros(1, 8, 64, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16)
    w = torch.zeros(1, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="indexer_topk: q: expected a CUDA tensor"):
        dsa_indexer.indexer_topk(q, k, w, top_k=4)
    with pytest.raises(TypeError, match="indexer_topk: k: expected a torch.Tensor"):
        dsa_indexer.indexer_topk(q, [1, 2], w, top_k=4)
