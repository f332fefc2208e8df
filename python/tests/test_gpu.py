"""GPU tests of the Python binding: every call against a PyTorch fp64 oracle on fresh random
inputs, with the exact -inf pattern and rel-L2 <= 2e-7 (1e-6 for cases with fewer than 256
visible cells, the policy of tests/gpu/gpu_cases.hpp). Skipped without torch or a CUDA device.

    DSA_INDEXER_LIBRARY=build/libdsa_indexer.so python3 -m pytest -q python/tests/test_gpu.py
"""

from __future__ import annotations

import pytest

from conftest import require_hopper

torch = require_hopper()

import dsa_indexer
from dsa_indexer import errors
from dsa_indexer.reference import compare, indexer_forward_reference, reference_lse

DEV = "cuda"
SCORE_TOL = 2e-7
SMALL_CASE_TOL = 1e-6
MIN_CELLS_FOR_TOL = 256
FAMILIES = ["auto", "generic", "reference"]


def _gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def _nonzero_bf16(shape, g):
    x = torch.randn(shape, generator=g, device=DEV).to(torch.bfloat16)
    return torch.where(x == 0, torch.ones_like(x), x)


def bshd_inputs(B, S_q, S_k, H, seed, w_dtype=torch.bfloat16):
    g = _gen(seed)
    q = _nonzero_bf16((B, S_q, H, 128), g)
    k = _nonzero_bf16((B, S_k, 1, 128), g)
    w = _nonzero_bf16((B, S_q, H), g).to(w_dtype)
    return q, k, w


def thd_inputs(seg_q, seg_k, H, seed):
    g = _gen(seed)
    cu_q = torch.tensor([0] + list(torch.tensor(seg_q).cumsum(0).tolist()), dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0] + list(torch.tensor(seg_k).cumsum(0).tolist()), dtype=torch.int32, device=DEV)
    q = _nonzero_bf16((int(cu_q[-1]), H, 128), g)
    k = _nonzero_bf16((int(cu_k[-1]), 1, 128), g)
    w = _nonzero_bf16((int(cu_q[-1]), H), g)
    return q, k, w, cu_q, cu_k


def check_scores(got, ref):
    c = compare(got, ref)
    tol = SCORE_TOL if c["visible"] >= MIN_CELLS_FOR_TOL else SMALL_CASE_TOL
    assert c["non_finite"] == 0, c
    assert c["pattern_mismatch"] == 0, c
    assert c["rel_l2"] <= tol, c
    return c


def check_lse(got, scores_ref, tol=2e-5):
    ref = reference_lse(scores_ref)
    assert torch.equal(torch.isneginf(got), torch.isneginf(ref))
    fin = ~torch.isneginf(ref)
    err = (got.double()[fin] - ref[fin]).abs()
    assert bool((err <= tol * (1 + ref[fin].abs())).all()), float(err.max())


# ------------------------------------------------------------------ BSHD ------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "B,S_q,S_k,H,ratio",
    [(1, 256, 128, 64, 2), (2, 300, 77, 64, 4), (1, 129, 129, 32, 1), (3, 64, 40, 16, 2), (1, 1, 1, 64, 1)],
)
def test_bshd_matches_fp64(family, B, S_q, S_k, H, ratio):
    q, k, w = bshd_inputs(B, S_q, S_k, H, seed=S_q * 7 + H)
    got = dsa_indexer.indexer_forward(q, k, w, ratio=ratio, family=family)
    assert got.shape == (B, S_q, S_k) and got.dtype == torch.float32 and got.is_contiguous()
    check_scores(got, indexer_forward_reference(q, k, w, ratio=ratio))


@pytest.mark.parametrize("family", ["generic", "reference"])
def test_offsets_and_sm_scale(family):
    B, S_q, S_k, ratio = 4, 200, 96, 2
    q, k, w = bshd_inputs(B, S_q, S_k, 64, seed=11)
    # zero, mid, negative (rows start masked), near INT32_MAX (every row sees all of S_k)
    offsets = torch.tensor([0, 37, -150, 2**31 - 1 - S_q], dtype=torch.int32, device=DEV)
    got = dsa_indexer.indexer_forward(q, k, w, ratio=ratio, sm_scale=0.125, q_causal_offsets=offsets, family=family)
    ref = indexer_forward_reference(q, k, w, ratio=ratio, sm_scale=0.125, q_causal_offsets=offsets)
    check_scores(got, ref)
    assert torch.isneginf(got[2, 0]).all()
    assert torch.isfinite(got[3]).all()


def test_all_masked_rows_and_lse():
    q, k, w = bshd_inputs(1, 64, 32, 64, seed=5)
    offsets = torch.tensor([-(64 + 4)], dtype=torch.int32, device=DEV)
    res = dsa_indexer.indexer_forward(q, k, w, ratio=1, q_causal_offsets=offsets, return_lse=True)
    assert torch.isneginf(res["scores"]).all()
    assert torch.isneginf(res["lse"]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_lse(family):
    q, k, w = bshd_inputs(2, 160, 64, 32, seed=21)
    offsets = torch.tensor([-3, 10], dtype=torch.int32, device=DEV)
    res = dsa_indexer.indexer_forward(q, k, w, ratio=2, sm_scale=0.5, q_causal_offsets=offsets, return_lse=True, family=family)
    assert set(res) == {"scores", "lse"}
    assert res["lse"].shape == (2, 160) and res["lse"].dtype == torch.float32
    ref = indexer_forward_reference(q, k, w, ratio=2, sm_scale=0.5, q_causal_offsets=offsets)
    check_scores(res["scores"], ref)
    check_lse(res["lse"], ref)


def test_fp32_w_bitwise_equal_to_bf16_w():
    q, k, w = bshd_inputs(1, 256, 128, 64, seed=3)
    a = dsa_indexer.indexer_forward(q, k, w, ratio=2)
    b = dsa_indexer.indexer_forward(q, k, w.float(), ratio=2)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    check_scores(b, indexer_forward_reference(q, k, w.float(), ratio=2))


def test_deterministic():
    q, k, w = bshd_inputs(2, 512, 256, 64, seed=8)
    a = dsa_indexer.indexer_forward(q, k, w, ratio=2)
    b = dsa_indexer.indexer_forward(q, k, w, ratio=2)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_out_is_filled_and_returned_even_with_padded_rows():
    q, k, w = bshd_inputs(1, 128, 60, 64, seed=9)
    storage = torch.full((1, 128, 64), float("nan"), device=DEV)
    out = storage[..., :60]  # row stride 64: a padded view
    got = dsa_indexer.indexer_forward(q, k, w, ratio=2, out=out)
    assert got is out
    check_scores(out, indexer_forward_reference(q, k, w, ratio=2))
    assert torch.isnan(storage[..., 60:]).all()  # the padding is not written


def test_lse_out_filled_in_place():
    q, k, w = bshd_inputs(1, 64, 32, 16, seed=10)
    lse = torch.full((1, 64), float("nan"), device=DEV)
    got = dsa_indexer.indexer_forward(q, k, w, ratio=1, lse_out=lse)
    assert isinstance(got, torch.Tensor)
    check_lse(lse, indexer_forward_reference(q, k, w, ratio=1))


def test_runs_on_current_stream():
    q, k, w = bshd_inputs(1, 1024, 512, 64, seed=12)
    ref = indexer_forward_reference(q, k, w, ratio=2)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = torch.empty((1, 1024, 512), device=DEV)  # allocated on `side`
        got = dsa_indexer.indexer_forward(q, k, w, ratio=2, out=out)
    side.synchronize()
    check_scores(got, ref)


def test_explicit_windows():
    q, k, w = bshd_inputs(2, 96, 80, 64, seed=13)
    g = _gen(99)
    ks = torch.randint(-5, 60, (2, 96), generator=g, device=DEV, dtype=torch.int32)
    ke = ks + torch.randint(0, 40, (2, 96), generator=g, device=DEV, dtype=torch.int32)
    got = dsa_indexer.indexer_forward(q, k, w, ks=ks, ke=ke)
    check_scores(got, indexer_forward_reference(q, k, w, ks=ks, ke=ke))


# ------------------------------------------------------------------ THD -------------------

SEG_Q = [37, 0, 130, 5]
SEG_K = [20, 9, 64, 0]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("columns", ["local", "global"])
def test_thd_matches_fp64(family, columns):
    q, k, w, cu_q, cu_k = thd_inputs(SEG_Q, SEG_K, 64, seed=17)
    offsets = torch.tensor([0, 4, 33, 2], dtype=torch.int32, device=DEV)
    kw = dict(
        ratio=2, sm_scale=0.25, q_causal_offsets=offsets, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=max(SEG_Q), max_seqlen_k=max(SEG_K), thd_columns=columns,
    )
    res = dsa_indexer.indexer_forward(q, k, w, return_lse=True, family=family, **kw)
    ref = indexer_forward_reference(q, k, w, **kw)
    want_cols = max(SEG_K) if columns == "local" else k.shape[0]
    assert res["scores"].shape == (q.shape[0], want_cols) and res["lse"].shape == (q.shape[0],)
    check_scores(res["scores"], ref)
    check_lse(res["lse"], ref)


@pytest.mark.parametrize("H", [16, 32])
def test_thd_other_heads(H):
    q, k, w, cu_q, cu_k = thd_inputs([1, 3, 7, 11], [1, 7, 67, 70], H, seed=H)
    kw = dict(ratio=1, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=11, max_seqlen_k=70)
    check_scores(dsa_indexer.indexer_forward(q, k, w, **kw), indexer_forward_reference(q, k, w, **kw))


def test_thd_host_mirrors_and_cpu_seqlens_agree_with_device_read():
    q, k, w, cu_q, cu_k = thd_inputs(SEG_Q, SEG_K, 64, seed=19)
    kw = dict(ratio=2, max_seqlen_q=max(SEG_Q), max_seqlen_k=max(SEG_K))
    a = dsa_indexer.indexer_forward(q, k, w, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw)
    b = dsa_indexer.indexer_forward(q, k, w, cu_seqlens_q=cu_q.cpu(), cu_seqlens_k=cu_k.cpu(), **kw)
    c = dsa_indexer.indexer_forward(
        q, k, w, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, cu_seqlens_q_host=cu_q.tolist(), cu_seqlens_k_host=cu_k.cpu(), **kw
    )
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    assert torch.equal(a.view(torch.int32), c.view(torch.int32))
    check_scores(a, indexer_forward_reference(q, k, w, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, **kw))


def test_thd_single_segment_equals_bshd():
    q, k, w = bshd_inputs(1, 300, 150, 64, seed=23)
    cu_q = torch.tensor([0, 300], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, 150], dtype=torch.int32, device=DEV)
    a = dsa_indexer.indexer_forward(q, k, w, ratio=2)
    b = dsa_indexer.indexer_forward(
        q[0], k[0], w[0], ratio=2, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=300, max_seqlen_k=150
    )
    assert torch.equal(a[0].view(torch.int32), b.view(torch.int32))


# ------------------------------------------------------------------ errors and stats ------


def test_errors_carry_library_message():
    q, k, w = bshd_inputs(1, 16, 8, 64, seed=1)
    with pytest.raises(ValueError, match=r"q\.dtype.*bf16"):
        dsa_indexer.indexer_forward(q.half(), k, w)
    with pytest.raises(ValueError, match="ratio"):
        dsa_indexer.indexer_forward(q, k, w, ratio=0)
    with pytest.raises(ValueError, match=r"scores\.shape"):
        dsa_indexer.indexer_forward(q, k, w, out=torch.empty(1, 16, 9, device=DEV))
    q48 = torch.zeros(1, 16, 48, 128, dtype=torch.bfloat16, device=DEV)
    with pytest.raises(NotImplementedError, match="48"):
        dsa_indexer.indexer_forward(q48, k, torch.zeros(1, 16, 48, dtype=torch.bfloat16, device=DEV))
    cu = torch.tensor([0, 16], dtype=torch.int32, device=DEV)
    bad_k = torch.tensor([0, 7], dtype=torch.int32, device=DEV)  # T_k is 8
    with pytest.raises(errors.InvalidArgument, match=r"cu_seqlens_k\[1\]"):
        dsa_indexer.indexer_forward(q[0], k[0], w[0], cu_seqlens_q=cu, cu_seqlens_k=bad_k, max_seqlen_q=16, max_seqlen_k=8)


def test_nothing_written_on_error():
    q, k, w = bshd_inputs(1, 16, 8, 64, seed=2)
    out = torch.full((1, 16, 8), 7.0, device=DEV)
    with pytest.raises(ValueError):
        dsa_indexer.indexer_forward(q, k, w, ratio=-1, out=out)
    assert (out == 7.0).all()


def test_kernel_cache_counts_calls():
    q, k, w = bshd_inputs(1, 64, 32, 64, seed=4)
    dsa_indexer.indexer_forward(q, k, w, ratio=2)
    before = dsa_indexer.kernel_cache_stats()
    dsa_indexer.indexer_forward(q, k, w, ratio=2)
    after = dsa_indexer.kernel_cache_stats()
    assert after.hits == before.hits + 1 and after.misses == before.misses


# ------------------------------------------------------------------ FP8 (e4m3) inputs -----------
# Against the fp64 oracle on the dequantized inputs (q8 * q_scale, k8 * k_scale): rel-L2 <= 2e-3
# (cuDNN-frontend's tolerance for its FP8 path; issue 22), the exact -inf pattern, LSE within
# 5e-3. Until a kernel family computes from e4m3 the calls end in UnsupportedConfig and these
# tests report skipped (never passed); the error paths run now.

FP8_REL_L2 = 2e-3
FP8_LSE_TOL = 5e-3
E4M3_MAX = 448.0
F8 = torch.float8_e4m3fn


def quantize_rows(x):
    """Per-row E4M3 quantization over the last dimension (one scale per 128-element (token,
    head) row, cuDNN-frontend's "1x128" and DeepGEMM's per-token scheme): (x8, scale fp32 > 0),
    x ~ x8 * scale."""
    scale = x.float().abs().amax(-1).clamp_min(1e-4) / E4M3_MAX
    return (x.float() / scale.unsqueeze(-1)).to(F8), scale


def fp8_bshd_inputs(B, S_q, S_k, H, seed, w_dtype=torch.float32):
    """q8 (B, S_q, H, D), k8 (B, S_k, 1, D), w, q_scale (B, S_q, H), k_scale (B, S_k, 1)."""
    q, k, w = bshd_inputs(B, S_q, S_k, H, seed, w_dtype)
    q8, q_scale = quantize_rows(q)
    k8, k_scale = quantize_rows(k)
    return q8, k8, w, q_scale, k_scale


def fp8_thd_inputs(seg_q, seg_k, H, seed):
    q, k, w, cu_q, cu_k = thd_inputs(seg_q, seg_k, H, seed)
    q8, q_scale = quantize_rows(q)  # (T_q, H)
    k8, k_scale = quantize_rows(k)  # (T_k, 1)
    return q8, k8, w.float(), q_scale, k_scale, cu_q, cu_k


# ...or, for an automatic call, that the FP8 families serve e4m3 by name only until validated
_NO_FP8_FAMILY = ("q/k dtype: expected bf16, got e4m3", "that serves the call, got none", "serves them by name only")


def fp8_call(fn, *args, **kw):
    """fn(*args, **kw), or a skip while the library reports that no family serves the e4m3 call
    (what it says until the FP8 families land; also for an H or family they do not cover yet)."""
    try:
        return fn(*args, **kw)
    except errors.UnsupportedConfig as e:
        if any(s in str(e) for s in _NO_FP8_FAMILY):
            pytest.skip(f"no kernel family serves this e4m3 call yet: {e}")
        raise


def check_fp8_scores(got, ref):
    c = compare(got, ref)
    assert c["non_finite"] == 0 and c["pattern_mismatch"] == 0, c
    assert c["rel_l2"] <= FP8_REL_L2, c
    return c


def check_fp8_lse(got, scores_ref):
    check_lse(got, scores_ref, FP8_LSE_TOL)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("B,S_q,S_k,H,ratio", [(1, 256, 128, 64, 2), (2, 300, 77, 64, 4), (1, 129, 129, 32, 1), (3, 64, 40, 16, 2)])
def test_fp8_bshd_matches_dequantized_fp64(family, B, S_q, S_k, H, ratio):
    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(B, S_q, S_k, H, seed=S_q + H)
    offsets = torch.tensor([0, -40, 2**31 - 1 - S_q][:B], dtype=torch.int32, device=DEV)
    kw = dict(ratio=ratio, sm_scale=0.125, q_causal_offsets=offsets, q_scale=q_scale, k_scale=k_scale)
    res = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, family=family, return_lse=True, **kw)
    assert res["scores"].shape == (B, S_q, S_k) and res["scores"].dtype == torch.float32
    ref = indexer_forward_reference(q8, k8, w, **kw)
    check_fp8_scores(res["scores"], ref)
    check_fp8_lse(res["lse"], ref)


@pytest.mark.parametrize("columns", ["local", "global"])
@pytest.mark.parametrize("k_scale_rank", [1, 2])
def test_fp8_thd_matches_dequantized_fp64(columns, k_scale_rank):
    q8, k8, w, q_scale, k_scale, cu_q, cu_k = fp8_thd_inputs(SEG_Q, SEG_K, 64, seed=31)
    k_scale = k_scale if k_scale_rank == 2 else k_scale[:, 0]  # (T_k, 1) or (T_k,)
    kw = dict(ratio=2, sm_scale=0.25, q_causal_offsets=torch.tensor([0, 4, 33, 2], dtype=torch.int32, device=DEV),
              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(SEG_Q), max_seqlen_k=max(SEG_K), thd_columns=columns,
              q_scale=q_scale, k_scale=k_scale)
    res = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, return_lse=True, **kw)
    ref = indexer_forward_reference(q8, k8, w, **kw)
    assert res["scores"].shape == ref.shape
    check_fp8_scores(res["scores"], ref)
    check_fp8_lse(res["lse"], ref)


def test_fp8_explicit_windows_and_bf16_w():
    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(2, 96, 80, 64, seed=13, w_dtype=torch.bfloat16)
    g = _gen(98)
    ks = torch.randint(-5, 60, (2, 96), generator=g, device=DEV, dtype=torch.int32)
    ke = ks + torch.randint(0, 40, (2, 96), generator=g, device=DEV, dtype=torch.int32)
    kw = dict(ks=ks, ke=ke, q_scale=q_scale, k_scale=k_scale)
    check_fp8_scores(fp8_call(dsa_indexer.indexer_forward, q8, k8, w, **kw), indexer_forward_reference(q8, k8, w, **kw))


def test_fp8_scales_not_given_are_one():
    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(1, 128, 96, 64, seed=14)
    a = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, ratio=2)
    b = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, ratio=2, q_scale=torch.ones_like(q_scale), k_scale=torch.ones_like(k_scale))
    check_fp8_scores(a, indexer_forward_reference(q8, k8, w, ratio=2))
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_fp8_deterministic_and_lean_equals_generic():
    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(1, 2048, 1024, 64, seed=15)  # 256 q-tiles: a lean shape
    kw = dict(ratio=2, q_scale=q_scale, k_scale=k_scale)
    a = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, **kw)
    b = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, **kw)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    check_fp8_scores(a, indexer_forward_reference(q8, k8, w, **kw))
    generic = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, family="generic", **kw)
    lean = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, family="lean", **kw)
    assert torch.equal(lean.view(torch.int32), generic.view(torch.int32))


def test_fp8_errors_name_the_parameter():
    """Validation runs whether or not a family serves e4m3: nothing here is skipped."""
    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(1, 16, 8, 64, seed=1)
    q, k, _ = bshd_inputs(1, 16, 8, 64, seed=1)
    with pytest.raises(errors.InvalidArgument, match=r"k\.dtype: expected e4m3, as q, got bf16"):
        dsa_indexer.indexer_forward(q8, k, w)
    with pytest.raises(errors.InvalidArgument, match=r"k\.dtype"):
        dsa_indexer.indexer_forward(q, k8, w)
    with pytest.raises(errors.UnsupportedConfig, match=r"q\.dtype.*e5m2"):
        dsa_indexer.indexer_forward(q8.to(torch.float8_e5m2), k8.to(torch.float8_e5m2), w)
    with pytest.raises(errors.InvalidArgument, match="q_scale"):
        dsa_indexer.indexer_forward(q, k, w, q_scale=q_scale)
    with pytest.raises(errors.InvalidArgument, match=r"q_scale\.shape"):
        dsa_indexer.indexer_forward(q8, k8, w, q_scale=q_scale[..., :32])
    with pytest.raises(errors.InvalidArgument, match=r"k_scale\.dtype"):
        dsa_indexer.indexer_forward(q8, k8, w, k_scale=k_scale.double())
    with pytest.raises(ValueError, match="k_scale"):
        dsa_indexer.indexer_forward(q8, k8, w, k_scale=k_scale.cpu())
    with pytest.raises(ValueError, match=r"q\.dtype.*float8_e4m3fn"):
        dsa_indexer.indexer_forward(q8.view(torch.uint8), k8, w)


def test_deepgemm_fp8_mqa_logits_layout():
    """dsa_indexer.deepgemm_compat: (S, S_kv) fp32, the window [ks, ke) clipped to the keys, -inf
    elsewhere (also with clean_logits=False), kv_scale per key row, no q scale (folded into
    weights)."""
    from dsa_indexer.deepgemm_compat import fp8_fp4_mqa_logits, fp8_mqa_logits

    S, S_kv, H = 96, 200, 64
    g = _gen(77)
    q8, q_scale = quantize_rows(torch.randn(S, H, 128, generator=g, device=DEV))
    kv8, kv_scale = quantize_rows(torch.randn(S_kv, 128, generator=g, device=DEV))
    weights = torch.randn(S, H, generator=g, device=DEV) * q_scale  # the per-token q scale folded in, as DeepGEMM wants
    ks = torch.randint(-8, S_kv, (S,), generator=g, device=DEV, dtype=torch.int32)
    ke = ks + torch.randint(0, 120, (S,), generator=g, device=DEV, dtype=torch.int32)  # some past S_kv
    logits = fp8_call(fp8_mqa_logits, (q8, None), (kv8, kv_scale), weights, ks, ke)
    assert logits.shape == (S, S_kv) and logits.dtype == torch.float32 and logits.is_contiguous()
    ref = indexer_forward_reference(q8[None], kv8[None, :, None], weights[None], ks=ks[None], ke=ke[None],
                                    k_scale=kv_scale[None])[0]
    col = torch.arange(S_kv, device=DEV)[None, :]
    assert torch.equal(~torch.isneginf(ref), (col >= ks[:, None].long()) & (col < ke[:, None].long()))
    check_fp8_scores(logits, ref)
    again = fp8_fp4_mqa_logits((q8, None), (kv8, kv_scale), weights, ks, ke, clean_logits=False, logits_dtype=torch.float32)
    assert torch.equal(again.view(torch.int32), logits.view(torch.int32))
    # the compressed layout: column c of row i is key ks[i] + c; the full matrix's cells bit for bit
    for width in (1, 64, 130):
        packed = fp8_mqa_logits((q8, None), (kv8, kv_scale), weights, ks, ke, max_seqlen_k=width)
        assert packed.shape == (S, width) and packed.dtype == torch.float32 and packed.is_contiguous()
        key = ks[:, None].long() + torch.arange(width, device=DEV)[None, :]
        inside = (key >= 0) & (key < S_kv)
        want = torch.where(inside, logits.gather(1, key.clamp(0, S_kv - 1)), torch.full_like(packed, float("-inf")))
        assert torch.equal(packed.view(torch.int32), want.view(torch.int32)), width
        vis = (key >= ks[:, None].long().clamp(min=0)) & (key < ke[:, None].long().clamp(max=S_kv))
        assert torch.equal(~torch.isneginf(packed), vis)
        native = fp8_fp4_mqa_logits((q8, None), (kv8, kv_scale), weights, ks, ke, width)  # 2.8.2's positional form
        assert torch.equal(native.view(torch.int32), packed.view(torch.int32)), width


@pytest.mark.parametrize("torch_op", [False, True])
def test_window_start_columns_bf16_and_lse(torch_op, monkeypatch):
    """indexer_forward(window_columns="window_start"): BSHD bf16 through both backends (when the
    operator is built), against the fp64 reference in that layout, LSE of the compressed rows,
    the generic family and the reference kernel; out= takes its own width."""
    from dsa_indexer import _torch_op

    if torch_op and _torch_op.ops() is None:
        pytest.skip("the PyTorch operator is not built")
    if not torch_op:
        monkeypatch.setattr(_torch_op, "_state", (None, _torch_op.Backend(_torch_op.CTYPES, "", "test: ctypes")))
    B, S_q, S_k, H, N = 2, 77, 300, 64, 96
    q, k, w = bshd_inputs(B, S_q, S_k, H, 5150, torch.float32)
    g = _gen(5151)
    ks = torch.randint(-20, S_k + 10, (B, S_q), generator=g, device=DEV, dtype=torch.int32)
    ke = ks + torch.randint(0, 160, (B, S_q), generator=g, device=DEV, dtype=torch.int32)  # some longer than N
    ref = indexer_forward_reference(q, k, w, sm_scale=0.5, ks=ks, ke=ke, max_seqlen_k=N, window_columns="window_start")
    for family in ("auto", "generic", "reference"):
        res = dsa_indexer.indexer_forward(q, k, w, sm_scale=0.5, ks=ks, ke=ke, family=family, return_lse=True,
                                          window_columns="window_start", max_seqlen_k=N)
        assert res["scores"].shape == (B, S_q, N)
        check_scores(res["scores"], ref)
        check_lse(res["lse"], ref)
    out = torch.full((B, S_q, 40), float("nan"), device=DEV)
    assert dsa_indexer.indexer_forward(q, k, w, sm_scale=0.5, ks=ks, ke=ke, window_columns="window_start", out=out) is out
    check_scores(out, ref[..., :40])
    with pytest.raises(ValueError, match="window_columns"):
        dsa_indexer.indexer_forward(q, k, w, window_columns="window_start", max_seqlen_k=N)  # no ks / ke
