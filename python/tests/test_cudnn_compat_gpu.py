"""dsa_indexer.cudnn_compat against the real cuDNN-frontend 1.32 on the same arguments (H200).

Every argument set goes through both `indexer_forward_wrapper`s; the results must have the same
keys in the same order, the same type behaviour (a dict that indexes and unpacks), shapes,
dtypes and identity of a given `out` / `lse_out`, the identical -inf pattern and rel-L2 <= 1e-6
between the two scores (each is also checked against the fp64 oracle, so that a shared mistake
cannot pass). Skipped without a Hopper GPU, or when cuDNN-frontend cannot be imported:

    python3 -m pytest -q python/tests/test_cudnn_compat_gpu.py --wheels /tmp/dsa_peers_stage .whl/parts/p2
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT, require_hopper

torch = require_hopper()

from dsa_indexer.cudnn_compat import indexer_forward_wrapper as ours
from test_gpu import DEV, bshd_inputs, thd_inputs
from dsa_indexer.reference import compare, indexer_forward_reference, reference_lse

SCORES_REL_L2 = 1e-6  # between the two implementations (issue 13)
ORACLE_REL_L2 = 1e-5  # each against fp64 (cuDNN-frontend's own tests allow 1e-4)
# LSE: cuDNN-frontend sums with a fast-math exp2; its tests allow 5e-3 against the oracle.
LSE_TOL = 1e-4


def _install_cudnn(wheel_dirs):
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")  # as bench/peers.py: no extension build on import
    if wheel_dirs:
        sys.path.insert(0, str(REPO_ROOT / "bench"))
        import peer_wheels

        ok, msg = peer_wheels.install([Path(d) for d in wheel_dirs], Path(tempfile.mkdtemp(prefix="dsa_cudnn_site.")))
        if not ok:
            pytest.skip(f"cuDNN-frontend not installed from {wheel_dirs}: {msg}")
    try:
        from cudnn.deepseek_sparse_attention import indexer_forward_wrapper
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"cuDNN-frontend not importable ({type(e).__name__}: {e}); pass --wheels DIR...")
    return indexer_forward_wrapper


@pytest.fixture(scope="module")
def theirs(request):
    return _install_cudnn(request.config.getoption("--wheels"))


def bshd(B, S_q, S_k, H, seed, w_dtype=torch.bfloat16):
    return bshd_inputs(B, S_q, S_k, H, seed, w_dtype)


def thd(seg_q, seg_k, H, seed):
    q, k, w, cu_q, cu_k = thd_inputs(seg_q, seg_k, H, seed)
    return q, k, w, dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(seg_q), max_seqlen_k=max(seg_k))


def _reference_kwargs(kw):
    keep = ("ratio", "sm_scale", "q_causal_offsets", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")
    return {n: kw[n] for n in keep if n in kw}


def _rel_l2_between(a, b):
    fin = torch.isfinite(a) & torch.isfinite(b)
    num = (a[fin].double() - b[fin].double()).norm()
    den = b[fin].double().norm()
    return float(num / den) if float(den) > 0 else float(num)


def side_by_side(theirs, q, k, w, make_out=None, **kw):
    """Runs both with the same arguments (fresh `out` / `lse_out` per side when make_out is
    given) and checks everything the module docstring lists. Returns both results."""
    results = []
    for fn in (theirs, ours):
        extra = make_out() if make_out else {}
        res = fn(q, k, w, **kw, **extra)
        results.append((res, extra))
    (rt, et), (ro, eo) = results
    assert type(ro).__name__ == type(rt).__name__ == "TupleDict"
    assert isinstance(ro, dict) and isinstance(rt, dict)
    assert list(ro.keys()) == list(rt.keys()), (list(ro.keys()), list(rt.keys()))
    assert len(ro) == len(rt) and all(a is b for a, b in zip(ro, ro.values()))  # unpacks to the values
    for i, key in enumerate(rt.keys()):
        a, b = ro[key], rt[key]
        assert ro[i] is a
        assert isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype == torch.float32
        assert a.device == b.device and a.is_contiguous() == b.is_contiguous()
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)), f"{key}: -inf patterns differ"
        assert not torch.isnan(a).any() and not torch.isnan(b).any()
    for name in ("out", "lse_out"):
        if name in eo:
            key = "scores" if name == "out" else "lse"
            if key in ro:
                assert ro[key] is eo[name] and rt[key] is et[name]
    ref = indexer_forward_reference(q, k, w, **_reference_kwargs(kw))
    for res in (ro, rt):
        c = compare(res["scores"], ref)
        assert c["pattern_mismatch"] == 0 and c["rel_l2"] <= ORACLE_REL_L2, c
    d = _rel_l2_between(ro["scores"], rt["scores"])
    assert d <= SCORES_REL_L2, f"scores rel-L2 between dsa-indexer and cuDNN-frontend: {d:.3g}"
    lse_pair = (ro.get("lse"), rt.get("lse"))
    if lse_pair[0] is None and "lse_out" in eo:
        lse_pair = (eo["lse_out"], et["lse_out"])
    if lse_pair[0] is not None:
        want = reference_lse(ref)
        a, b = lse_pair
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)) and torch.equal(torch.isneginf(a), torch.isneginf(want))
        fin = ~torch.isneginf(want)
        assert bool(((a.double() - b.double())[fin].abs() <= LSE_TOL * (1 + want[fin].abs())).all())
    return ro, rt


def test_same_signature(theirs):
    sig = lambda f: [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]
    assert sig(ours) == sig(theirs)


@pytest.mark.parametrize("H,ratio,sm_scale", [(64, 2, 0.125), (32, 1, 1.0), (16, 4, 0.5)])
def test_bshd(theirs, H, ratio, sm_scale):
    q, k, w = bshd(2, 192, 100, H, seed=H + ratio)
    side_by_side(theirs, q, k, w, ratio=ratio, sm_scale=sm_scale)


def test_bshd_fp32_w_and_default_ratio(theirs):
    q, k, w = bshd(1, 256, 64, 64, seed=3, w_dtype=torch.float32)
    side_by_side(theirs, q, k, w)  # ratio 4 is the default on both sides


def test_bshd_offsets_and_lse(theirs):
    q, k, w = bshd(3, 160, 96, 64, seed=5)
    offs = torch.tensor([0, 37, -100], dtype=torch.int32, device=DEV)  # row 0.. of batch 2 fully masked
    ro, _ = side_by_side(theirs, q, k, w, ratio=2, sm_scale=0.25, q_causal_offsets=offs, return_lse=True)
    assert torch.isneginf(ro["lse"][2, 0])
    scores, lse = ro
    assert scores is ro["scores"] and lse is ro["lse"]


def test_thd_local_columns_offsets_lse(theirs):
    q, k, w, meta = thd([37, 0, 130, 5], [20, 9, 64, 0], 64, seed=17)
    offs = torch.tensor([0, 4, 33, 2], dtype=torch.int32, device=DEV)
    ro, _ = side_by_side(theirs, q, k, w, ratio=2, sm_scale=0.25, q_causal_offsets=offs, return_lse=True, **meta)
    assert ro["scores"].shape == (q.shape[0], 64)


def test_out_and_lse_out(theirs):
    q, k, w = bshd(1, 128, 60, 64, seed=9)

    def fresh():
        return {"out": torch.full((1, 128, 60), float("nan"), device=DEV), "lse_out": torch.full((1, 128), float("nan"), device=DEV)}

    side_by_side(theirs, q, k, w, make_out=fresh, ratio=2, return_lse=True)
    ro, rt = side_by_side(theirs, q, k, w, make_out=fresh, ratio=2)  # lse_out filled, not returned
    assert list(ro.keys()) == ["scores"]


def test_thd_out(theirs):
    q, k, w, meta = thd([16, 40], [8, 30], 32, seed=21)
    side_by_side(theirs, q, k, w, make_out=lambda: {"out": torch.full((56, 30), float("nan"), device=DEV)}, ratio=1, **meta)


def test_explicit_stream(theirs):
    import cuda.bindings.driver as cuda

    q, k, w = bshd(1, 64, 32, 64, seed=12)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    ro = ours(q, k, w, ratio=2, stream=cuda.CUstream(side.cuda_stream))
    rt = theirs(q, k, w, ratio=2, stream=cuda.CUstream(side.cuda_stream))
    side.synchronize()
    assert _rel_l2_between(ro["scores"], rt["scores"]) <= SCORES_REL_L2


@pytest.mark.parametrize("kw", [{"m_block_size": 64}, {"kv_stage": 3}, {"q_stage": 1, "n_block_size": 64}])
def test_same_refusals(theirs, kw):
    q, k, w = bshd(1, 16, 8, 64, seed=1)
    with pytest.raises(ValueError) as a:
        theirs(q, k, w, **kw)
    with pytest.raises(ValueError) as b:
        ours(q, k, w, **kw)
    for name, value in kw.items():
        assert f"{name}={value}" in str(a.value) and f"{name}={value}" in str(b.value)


def test_scale_padded_refused_by_both(theirs):
    q, k, w, meta = thd([8], [4], 64, seed=2)
    pad = torch.tensor([0, 8], dtype=torch.int32, device=DEV)
    for fn in (theirs, ours):
        with pytest.raises(NotImplementedError):
            fn(q, k, w, cu_seqlens_q_scale_padded=pad, **meta)


# ------------------------------------------------------------------ precision="fp8" -------------
# cuDNN-frontend 1.32's SM90 FP8 contract (its fp8_sm90_matches_dequant_reference and
# fp8_sm90_thd_matches_dequant_reference cases): per-(token, head) E4M3 quantization, w =
# |randn| * 0.1; bf16 w gets q_scale and sm_scale, fp32 w is prescaled (neither applied). Ours
# against the fp64 oracle on the dequantized inputs (rel-L2 <= 2e-3, LSE 5e-3); with the wheels,
# against cuDNN-frontend's FP8 path (same keys, same -inf pattern, rel-L2 <= 2e-3 between them,
# LSE within 5e-3). Skipped (never passed) while no family computes from e4m3.

from test_gpu import FP8_LSE_TOL, FP8_REL_L2, check_fp8_lse, check_fp8_scores, fp8_call, quantize_rows  # noqa: E402


def fp8_cudnn_inputs(H, seed, w_dtype=torch.bfloat16, seg_q=(128,), seg_k=(128,), thd=False):
    """q8, k8, w, q_scale, k_scale (and the THD metadata): BSHD B 1, or THD segments."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    t_q, t_k = sum(seg_q), sum(seg_k)
    lead_q, lead_k = ((t_q,), (t_k,)) if thd else ((1, t_q), (1, t_k))
    q8, q_scale = quantize_rows(torch.randn(*lead_q, H, 128, generator=g, device=DEV))  # q_scale (.., H)
    k8, k_scale = quantize_rows(torch.randn(*lead_k, 1, 128, generator=g, device=DEV))  # k_scale (.., 1)
    w = torch.randn(*lead_q, H, generator=g, device=DEV).abs() * 0.1
    if w_dtype == torch.float32:
        w = w * q_scale * 0.5  # prescaled by q_scale * sm_scale (sm_scale 0.5 below), as cuDNN-frontend takes fp32 w
    meta = {}
    if thd:
        cu = lambda seg: torch.tensor([0, *torch.tensor(seg).cumsum(0).tolist()], dtype=torch.int32, device=DEV)  # noqa: E731
        meta = dict(cu_seqlens_q=cu(seg_q), cu_seqlens_k=cu(seg_k), max_seqlen_q=max(seg_q), max_seqlen_k=max(seg_k))
    return q8, k8, w.to(w_dtype), q_scale, k_scale, meta


def fp8_reference(q8, k8, w, q_scale, k_scale, sm_scale, **kw):
    """The scores cuDNN-frontend's SM90 FP8 path defines: fp32 w prescaled (k_scale only)."""
    if w.dtype == torch.float32:
        return indexer_forward_reference(q8, k8, w, k_scale=k_scale, **kw)
    return indexer_forward_reference(q8, k8, w, sm_scale=sm_scale, q_scale=q_scale, k_scale=k_scale, **kw)


FP8_CASES = [(64, torch.bfloat16), (32, torch.bfloat16), (64, torch.float32)]


@pytest.mark.parametrize("H,w_dtype", FP8_CASES)
def test_fp8_ours_against_dequantized_reference(H, w_dtype):
    q8, k8, w, q_scale, k_scale, _ = fp8_cudnn_inputs(H, seed=H, w_dtype=w_dtype)
    offs = torch.tensor([16], dtype=torch.int32, device=DEV)
    kw = dict(ratio=4, q_causal_offsets=offs)
    res = fp8_call(ours, q8, k8, w, sm_scale=0.5, precision="fp8", q_scale=q_scale, k_scale=k_scale, return_lse=True, **kw)
    assert list(res.keys()) == ["scores", "lse"] and res["scores"].shape == (1, 128, 128)
    ref = fp8_reference(q8, k8, w, q_scale, k_scale, 0.5, **kw)
    check_fp8_scores(res["scores"], ref)
    check_fp8_lse(res["lse"], ref)


def test_fp8_thd_ours_against_dequantized_reference():
    seg_q, seg_k = (5, 7), (67, 70)
    q8, k8, w, q_scale, k_scale, meta = fp8_cudnn_inputs(32, seed=7, seg_q=seg_q, seg_k=seg_k, thd=True)
    offs = torch.tensor([sk * 4 - sq for sq, sk in zip(seg_q, seg_k)], dtype=torch.int32, device=DEV)
    kw = dict(ratio=4, q_causal_offsets=offs, **meta)
    res = fp8_call(ours, q8, k8, w, sm_scale=0.5, precision="fp8", q_scale=q_scale, k_scale=k_scale, return_lse=True, **kw)
    assert res["scores"].shape == (12, 70) and res["lse"].shape == (12,)
    ref = fp8_reference(q8, k8, w, q_scale, k_scale, 0.5, **kw)
    check_fp8_scores(res["scores"], ref)
    check_fp8_lse(res["lse"], ref)
    assert torch.isneginf(res["scores"][:5, 67:]).all()  # columns past the first segment's keys


def fp8_side_by_side(theirs, q8, k8, w, **kw):
    ro = fp8_call(ours, q8, k8, w, **kw)  # first: skips before cuDNN-frontend runs while ours cannot
    rt = theirs(q8, k8, w, **kw)
    assert list(ro.keys()) == list(rt.keys())
    for key in rt.keys():
        a, b = ro[key], rt[key]
        assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
        assert torch.equal(torch.isneginf(a), torch.isneginf(b)), f"{key}: -inf patterns differ"
    d = _rel_l2_between(ro["scores"], rt["scores"])
    assert d <= FP8_REL_L2, f"FP8 scores rel-L2 between dsa-indexer and cuDNN-frontend: {d:.3g}"
    if "lse" in rt:
        fin = ~torch.isneginf(rt["lse"])
        err = (ro["lse"].double() - rt["lse"].double())[fin].abs()
        assert bool((err <= FP8_LSE_TOL * (1 + rt["lse"].double()[fin].abs())).all())
    return ro, rt


@pytest.mark.parametrize("H,w_dtype", FP8_CASES)
def test_fp8_bshd_side_by_side(theirs, H, w_dtype):
    q8, k8, w, q_scale, k_scale, _ = fp8_cudnn_inputs(H, seed=100 + H, w_dtype=w_dtype)
    offs = torch.tensor([16], dtype=torch.int32, device=DEV)
    fp8_side_by_side(theirs, q8, k8, w, ratio=4, sm_scale=0.5, q_causal_offsets=offs, precision="fp8", q_scale=q_scale,
                     k_scale=k_scale, return_lse=True)


def test_fp8_thd_side_by_side(theirs):
    seg_q, seg_k = (5, 7), (67, 70)
    q8, k8, w, q_scale, k_scale, meta = fp8_cudnn_inputs(32, seed=8, seg_q=seg_q, seg_k=seg_k, thd=True)
    offs = torch.tensor([sk * 4 - sq for sq, sk in zip(seg_q, seg_k)], dtype=torch.int32, device=DEV)
    fp8_side_by_side(theirs, q8, k8, w, ratio=4, sm_scale=0.5, q_causal_offsets=offs, precision="fp8", q_scale=q_scale,
                     k_scale=k_scale, return_lse=True, **meta)


def test_fp8_missing_scale_refused_by_both(theirs):
    q8, k8, w, q_scale, _, _ = fp8_cudnn_inputs(64, seed=3)
    for fn in (theirs, ours):
        with pytest.raises(ValueError):
            fn(q8, k8, w, precision="fp8", q_scale=q_scale)


# ------------------------------------------------------------------ top-k ----------------------
# cuDNN-frontend's indexer_forward_top_k_wrapper is SM100-only (NotImplementedError on Hopper);
# its standalone radix top-k (indexer_top_k_wrapper) runs on SM90. dsa_indexer's wrapper must
# select what that standalone top-k, deterministic, selects from our own scores: the same
# indices in the same order (ascending; -1 padding) and the same values, bit for bit.

from dsa_indexer.cudnn_compat import indexer_forward_top_k_wrapper as ours_top_k  # noqa: E402
from dsa_indexer.reference import topk_softmax_reference  # noqa: E402

import dsa_indexer  # noqa: E402


@pytest.fixture(scope="module")
def theirs_top_k(theirs):  # theirs: cuDNN-frontend importable (skips otherwise)
    from cudnn.deepseek_sparse_attention import indexer_forward_top_k_wrapper, indexer_top_k_wrapper

    return indexer_forward_top_k_wrapper, indexer_top_k_wrapper


def test_top_k_same_signature_and_theirs_refuses_hopper(theirs_top_k):
    combined, _ = theirs_top_k
    sig = lambda f: [(p.name, p.default, p.kind) for p in inspect.signature(f).parameters.values()]  # noqa: E731
    assert sig(ours_top_k) == sig(combined)
    q, k, w = bshd(1, 64, 128, 64, seed=2)
    with pytest.raises(NotImplementedError):
        combined(q, k, w, 16)
    res = ours_top_k(q, k, w, 16)
    assert list(res.keys()) == ["indices", "logits", "softmax"]


def _standalone(standalone, scores, top_k):
    """cuDNN-frontend's standalone deterministic top-k on the rows of `scores` (local columns,
    -inf outside each row's window [0, n)): n per row is its seq_len."""
    rows = scores.reshape(-1, scores.shape[-1]).contiguous()
    seq_lens = (~torch.isneginf(rows)).sum(-1).to(torch.int32)
    r = standalone(rows, seq_lens, top_k, deterministic=True)
    return r["indices"], r["values"]


def _check_top_k_side_by_side(theirs_top_k, q, k, w, top_k, **kw):
    _, standalone = theirs_top_k
    fwd = {n: kw[n] for n in ("ratio", "sm_scale", "q_causal_offsets", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                              "max_seqlen_k") if n in kw}
    scores = dsa_indexer.indexer_forward(q, k, w, **fwd)
    res = ours_top_k(q, k, w, top_k, topk_indices_global=False, deterministic=True, **kw)
    idx, val = _standalone(standalone, scores, top_k)
    ours_idx, ours_val = res["indices"].reshape(-1, top_k), res["logits"].reshape(-1, top_k)
    assert torch.equal(ours_idx, idx.to(torch.int32)), "indices differ from cuDNN-frontend's deterministic top-k"
    assert torch.equal(ours_val.view(torch.int32), val.to(torch.float32).view(torch.int32))
    want_sm = topk_softmax_reference(val.to(torch.float32))
    assert bool(((res["softmax"].reshape(-1, top_k).double() - want_sm).abs() <= 1e-5).all())
    return res


@pytest.mark.parametrize("top_k", [1, 64, 512, 2048])
def test_top_k_bshd_equals_cudnn_standalone_on_our_scores(theirs_top_k, top_k):
    q, k, w = bshd(2, 512, 4096, 64, seed=40 + top_k)
    k[:, 100:300] = k[:, 5:6]  # repeated key rows: ties at the k-th place
    offs = torch.tensor([4096 - 512 - 1, 300], dtype=torch.int32, device=DEV)
    _check_top_k_side_by_side(theirs_top_k, q, k, w, top_k, ratio=1, sm_scale=0.125, q_causal_offsets=offs)


@pytest.mark.parametrize("ratio", [2, 4])
def test_top_k_bshd_ratio_and_short_rows(theirs_top_k, ratio):
    q, k, w = bshd(1, 256, 1500, 32, seed=50 + ratio)
    _check_top_k_side_by_side(theirs_top_k, q, k, w, 512, ratio=ratio, sm_scale=0.5)


def test_top_k_thd_equals_cudnn_standalone_on_our_scores(theirs_top_k):
    q, k, w, meta = thd([37, 0, 300, 5, 600], [20, 9, 900, 0, 2500], 64, seed=60)
    offs = torch.tensor([0, 4, 700, 2, 2000], dtype=torch.int32, device=DEV)
    res = _check_top_k_side_by_side(theirs_top_k, q, k, w, 256, ratio=1, sm_scale=0.25, q_causal_offsets=offs,
                                    return_lse=True, **meta)
    assert list(res.keys()) == ["indices", "logits", "softmax", "lse"] and res["lse"].shape == (q.shape[0],)
