"""The registered operator without a GPU: its fake kernels (FakeTensorMode, meta tensors),
torch.compile traces with no graph break, the backward error. Needs torch and the operator
library (libdsa_indexer_torch.so, CMake -DDSA_INDEXER_BUILD_TORCH_OP=ON); skipped otherwise.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dsa_indexer

if dsa_indexer.backend().name != "torch.ops":
    pytest.skip(f"the operator library is not loaded: {dsa_indexer.backend().reason}", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode

OPS = torch.ops.dsa_indexer
BF16 = torch.bfloat16


def bshd(device, B=2, S_q=64, S_k=32, H=64):
    return (torch.empty(B, S_q, H, 128, device=device, dtype=BF16), torch.empty(B, S_k, 1, 128, device=device, dtype=BF16),
            torch.empty(B, S_q, H, device=device, dtype=BF16))


def thd(device, T_q=60, T_k=30, H=64, segs=2):
    cu = lambda: torch.empty(segs + 1, device=device, dtype=torch.int32)
    return (torch.empty(T_q, H, 128, device=device, dtype=BF16), torch.empty(T_k, 1, 128, device=device, dtype=BF16),
            torch.empty(T_q, H, device=device, dtype=BF16), cu(), cu())


def test_backend_says_torch_ops_and_where():
    b = dsa_indexer.backend()
    assert b.name == "torch.ops" and b.path.endswith("libdsa_indexer_torch.so") and b.reason == ""
    assert all(op.default is not None for op in (OPS.indexer_forward, OPS.indexer_forward_lse, OPS.indexer_forward_out))


def test_schema_declares_mutation_of_out_and_lse_out():
    schema = OPS.indexer_forward_out.default._schema
    mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == {"out", "lse_out"}
    for op in (OPS.indexer_forward, OPS.indexer_forward_lse):
        assert not any(a.alias_info is not None for a in op.default._schema.arguments)
        assert "return_lse" not in {a.name for a in op.default._schema.arguments}
    assert len(OPS.indexer_forward.default._schema.returns) == 1
    assert [r.name for r in OPS.indexer_forward_lse.default._schema.returns] == ["scores", "lse"]


def test_short_ops_have_no_defaults_and_the_general_names():
    """indexer_forward_bshd / _thd: indexer_forward's arguments of the common calls, in its order
    and with its names and types, every one required (a default costs the dispatcher per call)."""
    general = {a.name: str(a.type) for a in OPS.indexer_forward.default._schema.arguments}
    for op, names in ((OPS.indexer_forward_bshd, ["q", "k", "w", "ratio", "sm_scale", "q_causal_offsets"]),
                      (OPS.indexer_forward_thd, ["q", "k", "w", "ratio", "sm_scale", "q_causal_offsets", "cu_seqlens_q",
                                                 "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "cu_seqlens_q_host",
                                                 "cu_seqlens_k_host"])):
        args = op.default._schema.arguments
        assert [a.name for a in args] == names
        assert not any(a.has_default_value() or a.kwarg_only or a.alias_info is not None for a in args)
        for a in args:  # the same types, but that THD's cu_seqlens and max_seqlen are required
            assert str(a.type) in (general[a.name], general[a.name].removeprefix("Optional[").removesuffix("]"))
        assert len(op.default._schema.returns) == 1


class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.name()))
        return func(*args, **(kwargs or {}))


def _ops_called(fn):
    with _Recorder() as r:
        fn()
    return [n for n in r.ops if n.startswith("dsa_indexer::")]


def test_common_calls_take_the_short_ops():
    q, k, w = bshd("meta")
    f = dsa_indexer.indexer_forward
    assert _ops_called(lambda: f(q, k, w, ratio=2, sm_scale=0.5)) == ["dsa_indexer::indexer_forward_bshd"]
    offs = torch.empty(2, device="meta", dtype=torch.int32)
    assert _ops_called(lambda: f(q, k, w, 2, 0.5, offs)) == ["dsa_indexer::indexer_forward_bshd"]
    tq, tk, tw, cu_q, cu_k = thd("meta")
    thd_kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20)
    hq, hk = torch.tensor([0, 20, 60], dtype=torch.int32), torch.tensor([0, 10, 30], dtype=torch.int32)
    assert _ops_called(lambda: f(tq, tk, tw, **thd_kw)) == ["dsa_indexer::indexer_forward_thd"]
    assert _ops_called(lambda: f(tq, tk, tw, **thd_kw, cu_seqlens_q_host=hq, cu_seqlens_k_host=hk)) == [
        "dsa_indexer::indexer_forward_thd"]
    # everything else: the general operators
    assert _ops_called(lambda: f(tq, tk, tw, **thd_kw, thd_columns="global")) == ["dsa_indexer::indexer_forward"]
    assert _ops_called(lambda: f(tq, tk, tw, **thd_kw, cu_seqlens_q_host=[0, 20, 60], cu_seqlens_k_host=[0, 10, 30])) == [
        "dsa_indexer::indexer_forward"]
    assert _ops_called(lambda: f(q, k, w, family="generic")) == ["dsa_indexer::indexer_forward"]
    assert _ops_called(lambda: f(q, k, w, return_lse=True)) == ["dsa_indexer::indexer_forward_lse"]


def _raised(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e).split(" (dsa_indexer::")[0]  # the dispatcher's own text names the op
    return None


def test_short_ops_raise_what_the_general_op_raises():
    q, k, w = bshd("meta")
    tq, tk, tw, cu_q, cu_k = thd("meta")
    thd_kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20)
    for bad in (dict(ratio=2.5), dict(sm_scale="x"), dict(q_causal_offsets=3)):
        short = _raised(lambda: dsa_indexer.indexer_forward(q, k, w, **bad))
        general = _raised(lambda: dsa_indexer.indexer_forward(q, k, w, family="generic", **bad))
        assert short is not None and short == general, (bad, short, general)
        short = _raised(lambda: dsa_indexer.indexer_forward(tq, tk, tw, **thd_kw, **bad))
        general = _raised(lambda: dsa_indexer.indexer_forward(tq, tk, tw, **thd_kw, family="generic", **bad))
        assert short is not None and short == general, (bad, short, general)
    with pytest.raises(ValueError, match="rank 3"):
        dsa_indexer.indexer_forward(q, k, w, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20)
    with pytest.raises(ValueError, match="rank 4"):
        OPS.indexer_forward_bshd(tq, tk, tw, 2, 1.0, None)


@pytest.mark.parametrize("return_lse", [False, True])
def test_fake_shapes_bshd(return_lse):
    with FakeTensorMode():
        q, k, w = bshd("cuda", B=3, S_q=50, S_k=20)
        res = dsa_indexer.indexer_forward(q, k, w, ratio=2, return_lse=return_lse)
        scores = res["scores"] if return_lse else res
        assert scores.shape == (3, 50, 20) and scores.dtype == torch.float32 and scores.device.type == "cuda"
        if return_lse:
            assert res["lse"].shape == (3, 50) and res["lse"].dtype == torch.float32
        assert OPS.indexer_forward(q, k, w).shape == (3, 50, 20)
        s, lse = OPS.indexer_forward_lse(q, k, w)
        assert s.shape == (3, 50, 20) and lse.shape == (3, 50)


@pytest.mark.parametrize("columns,cols", [("local", 17), ("global", 30)])
def test_fake_shapes_thd(columns, cols):
    with FakeTensorMode():
        q, k, w, cu_q, cu_k = thd("cuda")
        host = torch.tensor([0, 20, 60], dtype=torch.int32)
        res = dsa_indexer.indexer_forward(q, k, w, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=17,
                                          thd_columns=columns, return_lse=True, cu_seqlens_q_host=host,
                                          cu_seqlens_k_host=torch.tensor([0, 10, 30], dtype=torch.int32))
        assert res["scores"].shape == (60, cols) and res["lse"].shape == (60,)


def test_meta_tensors_and_out_variant():
    q, k, w = bshd("meta", S_q=16, S_k=8)
    assert dsa_indexer.indexer_forward(q, k, w).shape == (2, 16, 8)
    out, lse = torch.empty(2, 16, 8, device="meta"), torch.empty(2, 16, device="meta")
    res = dsa_indexer.indexer_forward(q, k, w, out=out, lse_out=lse, return_lse=True)
    assert res["scores"] is out and res["lse"] is lse
    with pytest.raises(ValueError, match="out: expected f32"):
        OPS.indexer_forward_out(q, k, w, out=torch.empty(2, 16, 9, device="meta"))


def test_fake_kernel_checks_what_shapes_depend_on():
    with FakeTensorMode():
        q, k, w = bshd("cuda")
        with pytest.raises(ValueError, match="rank 3 for THD"):
            OPS.indexer_forward(q, k, w, cu_seqlens_q=q, cu_seqlens_k=q, max_seqlen_q=1, max_seqlen_k=1)
        with pytest.raises(ValueError, match="thd_columns"):
            OPS.indexer_forward(q, k, w, thd_columns="global")
        with pytest.raises(ValueError, match="rank 3 for THD"):
            OPS.indexer_forward_lse(q, k, w, cu_seqlens_q=q, cu_seqlens_k=q, max_seqlen_q=1, max_seqlen_k=1)


def _explain(fn, *args):
    torch._dynamo.reset()
    e = torch._dynamo.explain(fn)(*args)
    return e.graph_count, e.graph_break_count, [str(r) for r in e.break_reasons]


def test_compile_bshd_no_graph_break():
    def f(q, k, w):
        return dsa_indexer.indexer_forward(q, k, w, ratio=2, sm_scale=0.5) * 2

    args = bshd("meta")
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    assert torch.compile(f, fullgraph=True, backend="aot_eager")(*args).shape == (2, 64, 32)


def test_compile_thd_host_mirrors_and_lse_no_graph_break():
    def f(q, k, w, cu_q, cu_k, hq, hk):
        r = dsa_indexer.indexer_forward(q, k, w, ratio=2, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20,
                                        cu_seqlens_q_host=hq, cu_seqlens_k_host=hk, return_lse=True)
        return r["scores"], r["lse"]

    args = (*thd("meta"), torch.tensor([0, 20, 60], dtype=torch.int32), torch.tensor([0, 10, 30], dtype=torch.int32))
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    scores, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert scores.shape == (60, 20) and lse.shape == (60,)


def test_compile_thd_common_call_no_graph_break():
    def f(q, k, w, cu_q, cu_k, hq, hk):
        return dsa_indexer.indexer_forward(q, k, w, ratio=2, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40,
                                           max_seqlen_k=20, cu_seqlens_q_host=hq, cu_seqlens_k_host=hk)

    args = (*thd("meta"), torch.tensor([0, 20, 60], dtype=torch.int32), torch.tensor([0, 10, 30], dtype=torch.int32))
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    assert torch.compile(f, fullgraph=True, backend="aot_eager")(*args).shape == (60, 20)


def test_make_fx_records_the_short_operator():
    """Tracers other than Dynamo (make_fx, as AOT autograd and non-strict export use) see the
    operator that eager calls enter through OpOverload._op."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, w):
        return dsa_indexer.indexer_forward(q, k, w, ratio=2, sm_scale=0.5)

    g = make_fx(f, tracing_mode="fake")(*bshd("meta"))
    targets = [str(n.target) for n in g.graph.nodes if n.op == "call_function"]
    assert targets == ["dsa_indexer.indexer_forward_bshd.default"], targets


def test_compile_out_variant_no_graph_break():
    def f(q, k, w, out):
        dsa_indexer.indexer_forward(q, k, w, ratio=2, out=out)
        return out

    args = (*bshd("meta"), torch.empty(2, 64, 32, device="meta"))
    assert _explain(f, *args) == (1, 0, [])


def test_backward_raises_naming_the_op():
    q, k, w = bshd("meta", S_q=8, S_k=4)
    q.requires_grad_(True)
    scores = dsa_indexer.indexer_forward(q, k, w)
    assert scores.requires_grad  # no silent detach
    with pytest.raises(RuntimeError, match="dsa_indexer::indexer_forward_bshd is not implemented"):
        scores.sum().backward()
    res = dsa_indexer.indexer_forward(q, k, w, return_lse=True)
    assert res["scores"].requires_grad and res["lse"].requires_grad
    with pytest.raises(RuntimeError, match="dsa_indexer::indexer_forward_lse"):
        res["lse"].sum().backward()


def test_one_copy_of_the_library_in_the_process():
    """The operator library's NEEDED libdsa_indexer.so.0 resolves to the copy the package loaded
    (one kernel cache), even when the operator comes from another directory."""
    import os

    mapped = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if line.rstrip().endswith(".so") or ".so." in line else ""
            if os.path.basename(path).startswith("libdsa_indexer.so"):
                mapped.add(os.path.realpath(path))
    assert mapped == {os.path.realpath(dsa_indexer.library_path())}, mapped


# ------------------------------------------------------------------ top-k -------------------


def test_topk_schemas():
    """indexer_topk returns a list whose length the return_* flags fix; indexer_topk_out declares
    every buffer it fills mutated (what torch.compile functionalizes and CUDA graphs rely on)."""
    allocating = OPS.indexer_topk.default._schema
    assert [str(r.type) for r in allocating.returns] == ["List[Tensor]"]
    assert not any(a.alias_info is not None for a in allocating.arguments)
    names = [a.name for a in allocating.arguments if not a.kwarg_only]
    assert names == ["q", "k", "w", "top_k", "ratio", "sm_scale", "q_causal_offsets", "cu_seqlens_q", "cu_seqlens_k",
                     "max_seqlen_q", "max_seqlen_k"]
    out = OPS.indexer_topk_out.default._schema
    mutated = {a.name for a in out.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == {"indices_out", "values_out", "softmax_out", "lse_out", "workspace"}
    assert len(out.returns) == 0


@pytest.mark.parametrize("flags", [(False, False, False), (True, False, False), (False, True, True), (True, True, True)])
def test_fake_topk_shapes_bshd(flags):
    rv, rs, rl = flags
    with FakeTensorMode():
        q, k, w = bshd("cuda", B=3, S_q=50, S_k=20)
        res = dsa_indexer.indexer_topk(q, k, w, top_k=16, ratio=2, return_values=rv, return_softmax=rs, return_lse=rl)
        assert isinstance(res, dsa_indexer.TopkResult)
        assert res.indices.shape == (3, 50, 16) and res.indices.dtype == torch.int32 and res.indices.device.type == "cuda"
        for t, wanted in ((res.values, rv), (res.softmax, rs)):
            assert (t is not None) == wanted
            if wanted:
                assert t.shape == (3, 50, 16) and t.dtype == torch.float32
        assert (res.lse is not None) == rl
        if rl:
            assert res.lse.shape == (3, 50) and res.lse.dtype == torch.float32
        raw = OPS.indexer_topk(q, k, w, 16, return_values=rv, return_softmax=rs, return_lse=rl)
        assert len(raw) == 1 + rv + rs + rl


def test_fake_topk_shapes_thd_top_k_larger_than_rows():
    with FakeTensorMode():
        q, k, w, cu_q, cu_k = thd("cuda")
        res = dsa_indexer.indexer_topk(q, k, w, top_k=2048, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20,
                                       cu_seqlens_q_host=torch.tensor([0, 20, 60], dtype=torch.int32),
                                       cu_seqlens_k_host=torch.tensor([0, 10, 30], dtype=torch.int32),
                                       return_values=True, return_lse=True, global_indices=True)
        assert res.indices.shape == (60, 2048) and res.values.shape == (60, 2048) and res.lse.shape == (60,)
        assert res.softmax is None


def test_topk_meta_tensors_and_out_variant():
    q, k, w = bshd("meta", S_q=16, S_k=8)
    assert dsa_indexer.indexer_topk(q, k, w, top_k=4).indices.shape == (2, 16, 4)
    idx = torch.empty(2, 16, 4, device="meta", dtype=torch.int32)
    val, lse = torch.empty(2, 16, 4, device="meta"), torch.empty(2, 16, device="meta")
    ws = torch.empty(1 << 16, device="meta", dtype=torch.uint8)
    res = dsa_indexer.indexer_topk(q, k, w, top_k=4, indices_out=idx, values_out=val, lse_out=lse, workspace=ws)
    assert res.indices is idx and res.values is val and res.lse is lse and res.softmax is None
    # a buffer given without its flag is filled and returned; the others are allocated
    res = dsa_indexer.indexer_topk(q, k, w, top_k=4, values_out=val, return_softmax=True)
    assert res.values is val and res.softmax.shape == (2, 16, 4) and res.indices.shape == (2, 16, 4)
    with pytest.raises(ValueError, match="indices_out: expected int32"):
        OPS.indexer_topk_out(q, k, w, 4, indices_out=torch.empty(2, 16, 4, device="meta"))
    with pytest.raises(ValueError, match="values_out: expected float32"):
        OPS.indexer_topk_out(q, k, w, 4, indices_out=idx, values_out=torch.empty(2, 16, 5, device="meta"))


def test_fake_topk_checks_what_shapes_depend_on():
    with FakeTensorMode():
        q, k, w = bshd("cuda")
        with pytest.raises(ValueError, match="top_k: expected >= 1"):
            OPS.indexer_topk(q, k, w, 0)
        with pytest.raises(NotImplementedError, match="top_k: expected <= 2048"):
            OPS.indexer_topk(q, k, w, 4096)
        with pytest.raises(ValueError, match="rank 3 for THD"):
            OPS.indexer_topk(q, k, w, 8, cu_seqlens_q=q, cu_seqlens_k=q, max_seqlen_q=1, max_seqlen_k=1)
        with pytest.raises(ValueError, match="THD needs"):
            OPS.indexer_topk(q, k, w, 8, cu_seqlens_q=q)
    # the binding's own checks name the public argument and raise the library's classes
    q, k, w = bshd("meta")
    with pytest.raises(dsa_indexer.UnsupportedConfig, match="top_k"):
        dsa_indexer.indexer_topk(q, k, w, top_k=4096)
    with pytest.raises(ValueError, match="family: expected one of 'auto'"):
        dsa_indexer.indexer_topk(q, k, w, family="lean")


def test_topk_errors_of_the_operator_are_the_binding_classes():
    q, k, w = bshd("cpu", S_q=8, S_k=4)
    with pytest.raises(dsa_indexer.InvalidArgument, match="indexer_topk: q: expected a CUDA tensor"):
        dsa_indexer.indexer_topk(q, k, w, top_k=4)
    with pytest.raises(TypeError, match="indexer_topk: k: expected a torch.Tensor"):
        dsa_indexer.indexer_topk(q, [1], w, top_k=4)
    with pytest.raises(TypeError, match=r"indexer_topk: q_causal_offsets: expected a value of type Optional\[Tensor\], got int"):
        dsa_indexer.indexer_topk(q, k, w, top_k=4, q_causal_offsets=3)


def test_compile_topk_no_graph_break():
    def f(q, k, w):
        res = dsa_indexer.indexer_topk(q, k, w, top_k=16, ratio=2, sm_scale=0.5, return_values=True, return_softmax=True)
        return res.indices + 1, res.values * 2, res.softmax

    args = bshd("meta")
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    idx, val, sm = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert idx.shape == (2, 64, 16) and idx.dtype == torch.int32 and val.shape == sm.shape == (2, 64, 16)


def test_compile_topk_thd_lse_no_graph_break():
    def f(q, k, w, cu_q, cu_k, hq, hk):
        res = dsa_indexer.indexer_topk(q, k, w, top_k=8, ratio=2, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40,
                                       max_seqlen_k=20, cu_seqlens_q_host=hq, cu_seqlens_k_host=hk, return_lse=True,
                                       global_indices=True, sort_by_score=True)
        return res.indices, res.lse

    args = (*thd("meta"), torch.tensor([0, 20, 60], dtype=torch.int32), torch.tensor([0, 10, 30], dtype=torch.int32))
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    idx, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert idx.shape == (60, 8) and lse.shape == (60,)


def test_compile_topk_out_variant_no_graph_break():
    def f(q, k, w, idx, val, sm, ws):
        dsa_indexer.indexer_topk(q, k, w, top_k=16, ratio=2, indices_out=idx, values_out=val, softmax_out=sm, workspace=ws)
        return idx, val, sm

    args = (*bshd("meta"), torch.empty(2, 64, 16, device="meta", dtype=torch.int32), torch.empty(2, 64, 16, device="meta"),
            torch.empty(2, 64, 16, device="meta"), torch.empty(1 << 20, device="meta", dtype=torch.uint8))
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert [tuple(t.shape) for t in out] == [(2, 64, 16)] * 3


def test_make_fx_records_the_topk_operator():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, w):
        return dsa_indexer.indexer_topk(q, k, w, top_k=8, return_values=True).values

    g = make_fx(f, tracing_mode="fake")(*bshd("meta"))
    targets = [str(n.target) for n in g.graph.nodes if n.op == "call_function" and "dsa_indexer" in str(n.target)]
    assert targets == ["dsa_indexer.indexer_topk.default"], targets


def test_topk_backward_raises_naming_the_op():
    q, k, w = bshd("meta", S_q=8, S_k=4)
    q.requires_grad_(True)
    res = dsa_indexer.indexer_topk(q, k, w, top_k=4, return_values=True)
    assert res.values.requires_grad and not res.indices.requires_grad
    with pytest.raises(RuntimeError, match="dsa_indexer::indexer_topk is not implemented"):
        res.values.sum().backward()


# ------------------------------------------------------------------ FP8 (e4m3) inputs -----------

F8 = torch.float8_e4m3fn


def fp8_bshd(device, B=2, S_q=64, S_k=32, H=64):
    q, k, w = (torch.empty(B, S_q, H, 128, device=device, dtype=F8), torch.empty(B, S_k, 1, 128, device=device, dtype=F8),
               torch.empty(B, S_q, H, device=device, dtype=torch.float32))
    return q, k, w, torch.empty(B, S_q, H, device=device), torch.empty(B, S_k, 1, device=device)


def test_scale_arguments_keyword_only_and_last():
    """q_scale / k_scale came after the other arguments, and the scores operators' window_columns
    after them: keyword-only, with defaults (None, "key"), at the end of every general schema, so
    that calls written against the earlier schemas still bind; the short operators have none (such
    a call takes the general ones)."""
    for op in (OPS.indexer_forward, OPS.indexer_forward_lse, OPS.indexer_forward_out, OPS.indexer_topk, OPS.indexer_topk_out):
        args = op.default._schema.arguments
        scores_op = op in (OPS.indexer_forward, OPS.indexer_forward_lse, OPS.indexer_forward_out)
        scales = args[-3:-1] if scores_op else args[-2:]
        assert [a.name for a in scales] == ["q_scale", "k_scale"], op
        for a in scales:
            assert a.kwarg_only and str(a.type) == "Optional[Tensor]" and a.has_default_value() and a.default_value is None
            assert a.alias_info is None
        if scores_op:
            last = args[-1]
            assert last.name == "window_columns" and last.kwarg_only and str(last.type) == "str", op
            assert last.has_default_value() and last.default_value == "key"
    for op in (OPS.indexer_forward_bshd, OPS.indexer_forward_thd):
        assert not {"q_scale", "k_scale", "window_columns"} & {a.name for a in op.default._schema.arguments}


def test_fp8_calls_take_the_general_ops_when_scaled():
    q, k, w, qs, ks = fp8_bshd("meta")
    f = dsa_indexer.indexer_forward
    assert _ops_called(lambda: f(q, k, w, ratio=2)) == ["dsa_indexer::indexer_forward_bshd"]  # no scales: the short op
    assert _ops_called(lambda: f(q, k, w, q_scale=qs, k_scale=ks)) == ["dsa_indexer::indexer_forward"]
    assert _ops_called(lambda: f(q, k, w, k_scale=ks, return_lse=True)) == ["dsa_indexer::indexer_forward_lse"]
    out = torch.empty(2, 64, 32, device="meta")
    assert _ops_called(lambda: f(q, k, w, q_scale=qs, out=out)) == ["dsa_indexer::indexer_forward_out"]
    assert _ops_called(lambda: dsa_indexer.indexer_topk(q, k, w, top_k=8, q_scale=qs, k_scale=ks)) == ["dsa_indexer::indexer_topk"]


def test_fake_shapes_fp8():
    with FakeTensorMode():
        q, k, w, qs, ks = fp8_bshd("cuda", B=3, S_q=50, S_k=20)
        res = dsa_indexer.indexer_forward(q, k, w, ratio=2, q_scale=qs, k_scale=ks, return_lse=True)
        assert res["scores"].shape == (3, 50, 20) and res["scores"].dtype == torch.float32 and res["lse"].shape == (3, 50)
        assert OPS.indexer_forward(q, k, w, q_scale=qs, k_scale=ks[..., 0]).shape == (3, 50, 20)
        top = dsa_indexer.indexer_topk(q, k, w, top_k=16, q_scale=qs, k_scale=ks, return_values=True)
        assert top.indices.shape == (3, 50, 16) and top.values.dtype == torch.float32
        tq, tk = torch.empty(60, 32, 128, device="cuda", dtype=F8), torch.empty(30, 1, 128, device="cuda", dtype=F8)
        cu = torch.empty(3, device="cuda", dtype=torch.int32)
        res = dsa_indexer.indexer_forward(tq, tk, torch.empty(60, 32, device="cuda"), cu_seqlens_q=cu, cu_seqlens_k=cu,
                                          max_seqlen_q=40, max_seqlen_k=17, thd_columns="global",
                                          cu_seqlens_q_host=torch.tensor([0, 20, 60], dtype=torch.int32),
                                          cu_seqlens_k_host=torch.tensor([0, 10, 30], dtype=torch.int32),
                                          q_scale=torch.empty(60, 32, device="cuda"), k_scale=torch.empty(30, device="cuda"))
        assert res.shape == (60, 30)


def test_meta_fp8_out_variants():
    q, k, w, qs, ks = fp8_bshd("meta", S_q=16, S_k=8)
    out, lse = torch.empty(2, 16, 8, device="meta"), torch.empty(2, 16, device="meta")
    res = dsa_indexer.indexer_forward(q, k, w, out=out, lse_out=lse, return_lse=True, q_scale=qs, k_scale=ks)
    assert res["scores"] is out and res["lse"] is lse
    idx = torch.empty(2, 16, 4, device="meta", dtype=torch.int32)
    assert dsa_indexer.indexer_topk(q, k, w, top_k=4, indices_out=idx, q_scale=qs, k_scale=ks).indices is idx


def test_compile_fp8_with_scales_no_graph_break():
    def f(q, k, w, qs, ks):
        scores = dsa_indexer.indexer_forward(q, k, w, ratio=2, sm_scale=0.5, q_scale=qs, k_scale=ks)
        top = dsa_indexer.indexer_topk(q, k, w, top_k=8, q_scale=qs, k_scale=ks, return_values=True)
        return scores * 2, top.indices, top.values

    args = fp8_bshd("meta")
    assert _explain(f, *args) == (1, 0, [])
    torch._dynamo.reset()
    scores, idx, val = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert scores.shape == (2, 64, 32) and idx.shape == val.shape == (2, 64, 8)


def test_deepgemm_entry_on_fake_tensors():
    """The DeepGEMM drop-in's views reach the operator: (S, S_kv) fp32 logits."""
    from dsa_indexer.deepgemm_compat import fp8_mqa_logits

    with FakeTensorMode():
        S, S_kv = 24, 40
        q, kv = torch.empty(S, 64, 128, device="cuda", dtype=F8), torch.empty(S_kv, 128, device="cuda", dtype=F8)
        ks = torch.empty(S, device="cuda", dtype=torch.int32)
        logits = fp8_mqa_logits((q, None), (kv, torch.empty(S_kv, device="cuda")), torch.empty(S, 64, device="cuda"), ks, ks)
        assert logits.shape == (S, S_kv) and logits.dtype == torch.float32
        packed = fp8_mqa_logits((q, None), (kv, torch.empty(S_kv, device="cuda")), torch.empty(S, 64, device="cuda"), ks, ks,
                                max_seqlen_k=16)
        assert packed.shape == (S, 16) and packed.dtype == torch.float32


def test_window_start_columns_on_fake_tensors():
    """window_columns="window_start": scores (B, S_q, max_seqlen_k) from the allocating operators,
    out='s own width for the out variant; THD and unknown values refused as the library does."""
    with FakeTensorMode():
        q, k, w = bshd("cuda")
        ks = torch.empty(2, 64, device="cuda", dtype=torch.int32)
        s = OPS.indexer_forward(q, k, w, max_seqlen_k=48, ks=ks, ke=ks, window_columns="window_start")
        assert s.shape == (2, 64, 48) and s.dtype == torch.float32
        s, lse = OPS.indexer_forward_lse(q, k, w, max_seqlen_k=7, ks=ks, ke=ks, window_columns="window_start")
        assert s.shape == (2, 64, 7) and lse.shape == (2, 64)
        OPS.indexer_forward_out(q, k, w, ks=ks, ke=ks, window_columns="window_start", out=torch.empty(2, 64, 5, device="cuda"))
        res = dsa_indexer.indexer_forward(q, k, w, ks=ks, ke=ks, window_columns="window_start", max_seqlen_k=9, return_lse=True)
        assert res["scores"].shape == (2, 64, 9) and res["lse"].shape == (2, 64)
        with pytest.raises(ValueError, match="max_seqlen_k: expected the width N >= 1"):
            OPS.indexer_forward(q, k, w, ks=ks, ke=ks, window_columns="window_start")
        with pytest.raises(ValueError, match="window_columns: expected 'key' or 'window_start'"):
            OPS.indexer_forward(q, k, w, max_seqlen_k=8, ks=ks, ke=ks, window_columns="start")
        tq, tk, tw, cu_q, cu_k = thd("cuda")
        tks = torch.empty(60, device="cuda", dtype=torch.int32)
        with pytest.raises(NotImplementedError, match="window_columns: expected key for THD"):
            OPS.indexer_forward(tq, tk, tw, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40, max_seqlen_k=20, ks=tks, ke=tks,
                                window_columns="window_start")
