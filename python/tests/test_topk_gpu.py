"""dsa_indexer.indexer_topk on a Hopper GPU, through both backends (the registered operators and
the ctypes binding): indices and values equal to the contract's selection applied to our own
scores (`indexer_forward` with the same arguments, bitwise), softmax and lse against fp64; the
two backends bitwise equal; caller buffers and workspace; CUDA-graph capture with caller buffers;
torch.compile(fullgraph=True) bitwise equal to eager; no host synchronization; opcheck; bounded
peak memory. Skipped without a Hopper GPU; the operator tests without the operator library:

    DSA_INDEXER_LIBRARY=build/libdsa_indexer.so python3 -m pytest -q python/tests/test_topk_gpu.py
"""

from __future__ import annotations

import pytest

from conftest import require_hopper

torch = require_hopper()

import dsa_indexer  # noqa: E402
from dsa_indexer import errors  # noqa: E402
from dsa_indexer.reference import indexer_forward_reference, reference_lse, topk_reference, topk_softmax_reference  # noqa: E402
from test_gpu import DEV, bshd_inputs, thd_inputs  # noqa: E402

HAVE_OP = dsa_indexer.backend().name == "torch.ops"
needs_op = pytest.mark.skipif(not HAVE_OP, reason=f"the operator library is not loaded: {dsa_indexer.backend().reason}")
BACKENDS = ["torch.ops", "ctypes"] if HAVE_OP else ["ctypes"]
SEG_Q, SEG_K = [37, 0, 130, 5, 300], [20, 9, 64, 0, 700]
SOFTMAX_TOL, LSE_TOL = 1e-5, 2e-5


def bits(t):
    return t.view(torch.int32)


@pytest.fixture(params=BACKENDS)
def backend(request):
    dsa_indexer.use_backend(request.param)
    try:
        yield request.param
    finally:
        dsa_indexer.use_backend("auto")


def with_ties(q, k, w):
    """Repeated key rows and a zero-weight row: equal scores at the k-th place and all-zero rows."""
    k = k.clone()
    k[..., 40:90, :, :] = k[..., 7:8, :, :]
    w = w.clone()
    w[..., 5, :] = 0
    return q, k, w


def bshd_case(B=2, S_q=256, S_k=600, seed=1):
    q, k, w = with_ties(*bshd_inputs(B, S_q, S_k, 64, seed=seed))
    offs = torch.tensor([400, -3, 1000][:B], dtype=torch.int32, device=DEV)  # row windows 0 .. S_k
    return q, k, w, dict(ratio=2, sm_scale=0.25, q_causal_offsets=offs)


def thd_case(seed=3):
    q, k, w, cu_q, cu_k = thd_inputs(SEG_Q, SEG_K, 64, seed=seed)
    offs = torch.tensor([0, 4, 33, 2, 500], dtype=torch.int32, device=DEV)
    kw = dict(ratio=2, sm_scale=0.5, q_causal_offsets=offs, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(SEG_Q),
              max_seqlen_k=max(SEG_K))
    return q, k, w, kw, dict(cu_seqlens_q_host=cu_q.cpu(), cu_seqlens_k_host=cu_k.cpu())


def check_against_own_scores(res, scores, top_k, sort_by_score=False, global_offset=None):
    """indices and values exactly the contract's selection of `scores` (bitwise), softmax within
    SOFTMAX_TOL of fp64 on the selected values. global_offset: (rows..., 1) added to valid local
    indices (global conventions)."""
    want_idx, want_val = topk_reference(scores, top_k, sort_by_score)
    if global_offset is not None:
        want_idx = torch.where(want_idx >= 0, want_idx + global_offset.to(torch.int32), want_idx)
    assert res.indices.dtype == torch.int32 and res.indices.shape == want_idx.shape
    assert torch.equal(res.indices, want_idx)
    if res.values is not None:
        assert torch.equal(bits(res.values), bits(want_val))
    if res.softmax is not None:
        want = topk_softmax_reference(want_val)
        assert bool(((res.softmax.double() - want).abs() <= SOFTMAX_TOL).all())
        assert bool((res.softmax[want_idx < 0] == 0).all())


# ------------------------------------------------------------------ correctness ------------


@pytest.mark.parametrize("top_k", [1, 64, 512, 2048])
@pytest.mark.parametrize("sort_by_score", [False, True])
def test_bshd_against_own_scores(backend, top_k, sort_by_score):
    q, k, w, kw = bshd_case()
    scores = dsa_indexer.indexer_forward(q, k, w, **kw)
    res = dsa_indexer.indexer_topk(q, k, w, top_k, **kw, sort_by_score=sort_by_score, return_values=True, return_softmax=True)
    assert res.lse is None
    check_against_own_scores(res, scores, top_k, sort_by_score)


def test_bshd_global_indices_and_lse(backend):
    q, k, w, kw = bshd_case(B=3)
    scores = dsa_indexer.indexer_forward(q, k, w, **kw)
    res = dsa_indexer.indexer_topk(q, k, w, 128, **kw, global_indices=True, return_values=True, return_lse=True)
    base = (torch.arange(3, device=DEV) * k.shape[1]).view(3, 1, 1)
    check_against_own_scores(res, scores, 128, global_offset=base)
    ref = indexer_forward_reference(q, k, w, **kw)
    want = reference_lse(ref)
    assert torch.equal(torch.isneginf(res.lse), torch.isneginf(want))
    fin = ~torch.isneginf(want)
    assert bool(((res.lse.double() - want)[fin].abs() <= LSE_TOL * (1 + want[fin].abs())).all())


@pytest.mark.parametrize("global_indices", [False, True])
def test_thd_against_own_scores(backend, global_indices):
    q, k, w, kw, host = thd_case()
    scores = dsa_indexer.indexer_forward(q, k, w, **kw, **host)  # local columns (T_q, max_seqlen_k)
    res = dsa_indexer.indexer_topk(q, k, w, 256, **kw, **host, global_indices=global_indices, return_values=True,
                                   return_softmax=True)
    assert res.indices.shape == (q.shape[0], 256)
    offset = None
    if global_indices:  # THD global: the packed key row, cu_seqlens_k[segment] + local
        cu_q, cu_k = kw["cu_seqlens_q"].long(), kw["cu_seqlens_k"].long()
        seg = torch.searchsorted(cu_q[1:], torch.arange(q.shape[0], device=DEV), right=True)
        offset = cu_k[seg].view(-1, 1)
    check_against_own_scores(res, scores, 256, global_offset=offset)


def test_thd_metadata_forms_agree(backend):
    """Host mirrors, device cu_seqlens alone (one read) and CPU cu_seqlens give the same bits."""
    q, k, w, kw, host = thd_case(seed=5)
    a = dsa_indexer.indexer_topk(q, k, w, 64, **kw, **host, return_values=True)
    b = dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True)
    kw_cpu = dict(kw, cu_seqlens_q=kw["cu_seqlens_q"].cpu(), cu_seqlens_k=kw["cu_seqlens_k"].cpu())
    c = dsa_indexer.indexer_topk(q, k, w, 64, **kw_cpu, return_values=True)
    for other in (b, c):
        assert torch.equal(a.indices, other.indices) and torch.equal(bits(a.values), bits(other.values))


def test_rows_shorter_than_k_and_empty_rows(backend):
    q, k, w = bshd_inputs(1, 64, 100, 32, seed=9)
    offs = torch.tensor([-10], dtype=torch.int32, device=DEV)  # the first rows see nothing
    res = dsa_indexer.indexer_topk(q, k, w, 2048, ratio=1, q_causal_offsets=offs, return_values=True, return_softmax=True)
    assert res.indices.shape == (1, 64, 2048)
    assert bool((res.indices[0, :10] == -1).all()) and bool(torch.isneginf(res.values[0, :10]).all())
    assert bool((res.softmax[0, :10] == 0).all())
    n = (res.indices >= 0).sum(-1)
    want = torch.clamp(torch.arange(64, device=DEV) - 10 + 1, 0, 100)
    assert torch.equal(n[0], want)
    check_against_own_scores(res, dsa_indexer.indexer_forward(q, k, w, ratio=1, q_causal_offsets=offs), 2048)


def test_same_bits_run_to_run_and_fp32_w(backend):
    q, k, w, kw = bshd_case(seed=11)
    a = dsa_indexer.indexer_topk(q, k, w, 512, **kw, return_values=True, return_softmax=True, return_lse=True)
    b = dsa_indexer.indexer_topk(q, k, w.float(), 512, **kw, return_values=True, return_softmax=True, return_lse=True)
    for x, y in zip(a, b):
        assert torch.equal(bits(x), bits(y))


@needs_op
def test_backends_bitwise_equal():
    for q, k, w, kw, host in ((*bshd_case(seed=13), {}), thd_case(seed=14)):
        args = dict(kw, **host, return_values=True, return_softmax=True, return_lse=True, sort_by_score=True)
        ours = dsa_indexer.indexer_topk(q, k, w, 300, **args)
        dsa_indexer.use_backend("ctypes")
        try:
            theirs = dsa_indexer.indexer_topk(q, k, w, 300, **args)
        finally:
            dsa_indexer.use_backend("auto")
        for x, y in zip(ours, theirs):
            assert torch.equal(bits(x), bits(y))


# ------------------------------------------------------------------ FP8 (e4m3) inputs ------
# The top-k of FP8 scores: the same selection of `indexer_forward`'s FP8 scores (bitwise), on
# both backends (the unfused path, session 20).


def fp8_case(seed):
    from test_gpu import fp8_bshd_inputs

    q8, k8, w, q_scale, k_scale = fp8_bshd_inputs(2, 256, 600, 64, seed=seed)
    offs = torch.tensor([400, -3], dtype=torch.int32, device=DEV)
    return q8, k8, w, dict(ratio=2, sm_scale=0.25, q_causal_offsets=offs, q_scale=q_scale, k_scale=k_scale)


@pytest.mark.parametrize("top_k", [1, 512, 2048])
def test_fp8_against_own_fp8_scores(backend, top_k):
    from test_gpu import fp8_call

    q8, k8, w, kw = fp8_case(seed=21 + top_k)
    scores = fp8_call(dsa_indexer.indexer_forward, q8, k8, w, **kw)
    res = fp8_call(dsa_indexer.indexer_topk, q8, k8, w, top_k, **kw, return_values=True, return_softmax=True, return_lse=True)
    check_against_own_scores(res, scores, top_k)
    nbytes = dsa_indexer.indexer_topk_workspace_size(q8, k8, w, top_k, **kw, return_lse=True)
    assert nbytes >= 0


@needs_op
def test_fp8_backends_bitwise_equal():
    from test_gpu import fp8_call

    q8, k8, w, kw = fp8_case(seed=22)
    ours = fp8_call(dsa_indexer.indexer_topk, q8, k8, w, 300, **kw, return_values=True, return_lse=True, sort_by_score=True)
    dsa_indexer.use_backend("ctypes")
    try:
        theirs = dsa_indexer.indexer_topk(q8, k8, w, 300, **kw, return_values=True, return_lse=True, sort_by_score=True)
    finally:
        dsa_indexer.use_backend("auto")
    for x, y in zip(ours, theirs):
        if x is not None:
            assert torch.equal(bits(x), bits(y))


def test_fp8_topk_errors_name_the_parameter(backend):
    q8, k8, w, kw = fp8_case(seed=23)
    q, k, _ = bshd_inputs(2, 256, 600, 64, seed=23)
    with pytest.raises(errors.InvalidArgument, match=r"indexer_topk: k\.dtype"):
        dsa_indexer.indexer_topk(q8, k, w, 16)
    with pytest.raises(errors.InvalidArgument, match=r"indexer_topk: q_scale"):
        dsa_indexer.indexer_topk(q, k, w, 16, q_scale=kw["q_scale"])
    with pytest.raises(errors.InvalidArgument, match=r"indexer_topk: k_scale\.shape"):
        dsa_indexer.indexer_topk_workspace_size(q8, k8, w, 16, k_scale=kw["k_scale"][:, :100])


# ------------------------------------------------------------------ buffers, workspace -----


def caller_buffers(shape, rows, nbytes):
    nan = float("nan")
    return dict(indices_out=torch.full(shape, -7, dtype=torch.int32, device=DEV),
                values_out=torch.full(shape, nan, device=DEV), softmax_out=torch.full(shape, nan, device=DEV),
                lse_out=torch.full(rows, nan, device=DEV), workspace=torch.empty(max(nbytes, 1), dtype=torch.uint8, device=DEV))


def test_caller_buffers_and_workspace(backend):
    q, k, w, kw = bshd_case(seed=15)
    nbytes = dsa_indexer.indexer_topk_workspace_size(q, k, w, 512, **kw, return_lse=True)
    assert nbytes > 0
    bufs = caller_buffers((2, 256, 512), (2, 256), nbytes)
    res = dsa_indexer.indexer_topk(q, k, w, 512, **kw, **bufs)
    assert res.indices is bufs["indices_out"] and res.values is bufs["values_out"]
    assert res.softmax is bufs["softmax_out"] and res.lse is bufs["lse_out"]
    want = dsa_indexer.indexer_topk(q, k, w, 512, **kw, return_values=True, return_softmax=True, return_lse=True)
    for x, y in zip(res, want):
        assert torch.equal(bits(x), bits(y))


def test_errors_launch_nothing_and_leave_buffers(backend):
    q, k, w, kw = bshd_case(seed=16)
    nbytes = dsa_indexer.indexer_topk_workspace_size(q, k, w, 64, **kw)
    small = torch.empty(nbytes // 2, dtype=torch.uint8, device=DEV)
    idx = torch.full((2, 256, 64), -7, dtype=torch.int32, device=DEV)
    with pytest.raises(errors.InvalidArgument, match="workspace_bytes"):
        dsa_indexer.indexer_topk(q, k, w, 64, **kw, indices_out=idx, workspace=small)
    with pytest.raises(errors.InvalidArgument, match="does not overlap"):
        dsa_indexer.indexer_topk(q, k, w, 64, **kw, indices_out=idx, values_out=idx.view(torch.float32))
    with pytest.raises(errors.InvalidArgument, match="indices"):
        dsa_indexer.indexer_topk(q, k, w, 64, **kw, indices_out=idx[..., :32])
    with pytest.raises(errors.UnsupportedConfig, match="top_k"):
        dsa_indexer.indexer_topk(q, k, w, 4096, **kw)
    with pytest.raises(ValueError, match="family"):
        dsa_indexer.indexer_topk(q, k, w, 64, **kw, family="generic")
    torch.cuda.synchronize()
    assert bool((idx == -7).all())


def test_explicit_stream(backend):
    q, k, w, kw = bshd_case(seed=17)
    want = dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    got = dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True, stream=side)
    side.synchronize()
    assert torch.equal(got.indices, want.indices) and torch.equal(bits(got.values), bits(want.values))
    with torch.cuda.stream(side):
        got = dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True)
    side.synchronize()
    assert torch.equal(got.indices, want.indices)


def test_peak_memory_is_outputs_and_a_bounded_workspace():
    """Peak device memory of a call (everything from the caching allocator): the indices plus the
    workspace, which does not grow with S_q; far below the dense score matrix it replaces."""
    S_k = 32768
    q, k, w = bshd_inputs(1, 8192, S_k, 64, seed=19)
    offs = torch.tensor([S_k - 8192 - 1], dtype=torch.int32, device=DEV)
    nbytes = dsa_indexer.indexer_topk_workspace_size(q, k, w, 2048, ratio=1, q_causal_offsets=offs)
    assert nbytes == dsa_indexer.indexer_topk_workspace_size(q[:, :4096], k, w[:, :4096], 2048, ratio=1, q_causal_offsets=offs)
    dsa_indexer.indexer_topk(q[:, :64], k, w[:, :64], 2048, ratio=1, q_causal_offsets=offs)  # compiles first
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    res = dsa_indexer.indexer_topk(q, k, w, 2048, ratio=1, q_causal_offsets=offs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    outputs = res.indices.numel() * 4
    assert peak <= outputs + nbytes + (4 << 20), (peak, outputs, nbytes)
    assert peak <= 8192 * S_k * 4 // 2, peak
    print(f"top-k peak {peak / 2**20:.0f} MiB (indices {outputs / 2**20:.0f} MiB, workspace {nbytes / 2**20:.0f} MiB) "
          f"vs scores {8192 * S_k * 4 / 2**20:.0f} MiB")


# ------------------------------------------------------------------ the operators ----------


@needs_op
def test_no_host_sync():
    q, k, w, kw = bshd_case(seed=21)
    # Inputs are made (host-to-device copies synchronize) and both variants compiled outside the check.
    q2, k2, w2, kw2, host = thd_case(seed=22)
    dsa_indexer.indexer_topk(q, k, w, 64, **kw)
    dsa_indexer.indexer_topk(q2, k2, w2, 64, **kw2, **host)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True, return_softmax=True, return_lse=True)
        dsa_indexer.indexer_topk(q2, k2, w2, 64, **kw2, **host)  # THD with host mirrors
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_op
def test_opcheck():
    q, k, w, kw = bshd_case(B=1, seed=23)
    ops = torch.ops.dsa_indexer
    args = (q, k, w, 64, kw["ratio"], kw["sm_scale"], kw["q_causal_offsets"])
    torch.library.opcheck(ops.indexer_topk.default, args, dict(return_values=True, return_lse=True))
    torch.library.opcheck(ops.indexer_topk.default, args, dict(return_softmax=True, global_indices=True, sort_by_score=True))
    nbytes = dsa_indexer.indexer_topk_workspace_size(q, k, w, 64, **kw)
    bufs = caller_buffers((1, 256, 64), (1, 256), nbytes)
    torch.library.opcheck(ops.indexer_topk_out.default, args, bufs)
    q, k, w, kw, host = thd_case(seed=24)
    targs = (q, k, w, 32, kw["ratio"], kw["sm_scale"], kw["q_causal_offsets"], kw["cu_seqlens_q"], kw["cu_seqlens_k"],
             kw["max_seqlen_q"], kw["max_seqlen_k"])
    torch.library.opcheck(ops.indexer_topk.default, targs, dict(host, return_values=True))


class TopkIndexer(torch.nn.Module):
    def forward(self, q, k, w, offs):
        res = dsa_indexer.indexer_topk(q, k, w, 512, ratio=2, sm_scale=0.25, q_causal_offsets=offs, return_values=True,
                                       return_softmax=True)
        return res.indices, res.values * 2.0, res.softmax


@needs_op
def test_compile_fullgraph_bitwise_equal_to_eager():
    q, k, w, kw = bshd_case(seed=25)
    m = TopkIndexer()
    eager = m(q, k, w, kw["q_causal_offsets"])
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    for x, y in zip(compiled(q, k, w, kw["q_causal_offsets"]), eager):
        assert torch.equal(bits(x), bits(y))
    q2, k2, w2, _ = bshd_case(seed=26)
    for x, y in zip(compiled(q2, k2, w2, kw["q_causal_offsets"]), m(q2, k2, w2, kw["q_causal_offsets"])):
        assert torch.equal(bits(x), bits(y))


def _capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


@needs_op
def test_cuda_graph_with_caller_buffers_replays_eager():
    """Every buffer the caller's (indices, values, softmax, lse, workspace): the captured call
    allocates nothing; replays on new inputs equal eager calls bit for bit."""
    q, k, w, kw = bshd_case(seed=27)
    nbytes = dsa_indexer.indexer_topk_workspace_size(q, k, w, 512, **kw, return_lse=True)
    bufs = caller_buffers((2, 256, 512), (2, 256), nbytes)
    g, res = _capture(lambda: dsa_indexer.indexer_topk(q, k, w, 512, **kw, **bufs))
    assert res.indices is bufs["indices_out"]
    for seed in (28, 29):
        nq, nk, nw, _ = bshd_case(seed=seed)
        q.copy_(nq), k.copy_(nk), w.copy_(nw)
        g.replay()
        torch.cuda.synchronize()
        want = dsa_indexer.indexer_topk(q, k, w, 512, **kw, return_values=True, return_softmax=True, return_lse=True)
        for x, y in zip(res, want):
            assert torch.equal(bits(x), bits(y))


@needs_op
def test_cuda_graph_thd_allocating_form():
    """The allocating form captures too (results and workspace from the graph's pool), THD with
    host mirrors."""
    q, k, w, kw, host = thd_case(seed=31)
    g, res = _capture(lambda: dsa_indexer.indexer_topk(q, k, w, 64, **kw, **host, return_values=True))
    nq, nk, nw, _, _ = thd_inputs(SEG_Q, SEG_K, 64, seed=32)
    q.copy_(nq), k.copy_(nk), w.copy_(nw)
    g.replay()
    torch.cuda.synchronize()
    want = dsa_indexer.indexer_topk(q, k, w, 64, **kw, **host, return_values=True)
    assert torch.equal(res.indices, want.indices) and torch.equal(bits(res.values), bits(want.values))


@needs_op
def test_backward_raises_naming_the_op():
    q, k, w, kw = bshd_case(B=1, seed=33)
    q.requires_grad_(True)
    res = dsa_indexer.indexer_topk(q, k, w, 64, **kw, return_values=True)
    assert res.values.requires_grad
    with pytest.raises(RuntimeError, match="dsa_indexer::indexer_topk is not implemented"):
        res.values.sum().backward()
