"""Pure tests of dsa_indexer.cudnn_compat (no GPU, no torch): the signature, the TupleDict
result, the argument checks cuDNN-frontend's SM90 path makes, and what reaches the binding
(a recorder replaces dsa_indexer's forward, so no tensor is touched).

The side-by-side test against the real cuDNN-frontend is test_cudnn_compat_gpu.py.
"""

from __future__ import annotations

import inspect
import sys

import pytest

import dsa_indexer
from dsa_indexer import _forward, cudnn_compat
from dsa_indexer.cudnn_compat import TupleDict, indexer_forward_wrapper

# cuDNN-frontend 1.32.0, cudnn/deepseek_sparse_attention/indexer_forward/api.py: every
# parameter of indexer_forward_wrapper in order, with its default (q, k, w have none).
CUDNN_1_32_PARAMETERS = [
    ("q", inspect.Parameter.empty), ("k", inspect.Parameter.empty), ("w", inspect.Parameter.empty),
    ("ratio", 4), ("qhead_per_kv_head", None), ("m_block_size", 128), ("n_block_size", 128),
    ("q_stage", 2), ("kv_stage", 4), ("sm_scale", 1.0), ("out", None), ("stream", None),
    ("cu_seqlens_q", None), ("cu_seqlens_k", None), ("max_seqlen_q", None), ("max_seqlen_k", None),
    ("q_causal_offsets", None), ("precision", "bf16"), ("q_scale", None), ("k_scale", None),
    ("cu_seqlens_q_scale_padded", None), ("cu_seqlens_k_scale_padded", None), ("sf_vec_size", 32),
    ("return_lse", False), ("lse_out", None),
]


class Shaped:
    """Stands in for a tensor where only .shape is read."""

    def __init__(self, *shape):
        self.shape = shape


Q, K, W = Shaped(1, 8, 64, 128), Shaped(1, 4, 1, 128), Shaped(1, 8, 64)


@pytest.fixture
def recorder(monkeypatch):
    """Replaces the binding's forward; records its keyword arguments, returns what a real
    call would (the scores, or {'scores', 'lse'} with return_lse)."""
    calls = []

    def fake_forward(q, k, w, **kw):
        calls.append(dict(kw, q=q, k=k, w=w))
        scores = kw["out"] if kw["out"] is not None else ("scores-of", q)
        if kw["return_lse"]:
            return {"scores": scores, "lse": kw["lse_out"] if kw["lse_out"] is not None else ("lse-of", q)}
        return scores

    monkeypatch.setattr(_forward, "indexer_forward", fake_forward)
    return calls


def test_signature_is_cudnn_frontend_1_32():
    params = list(inspect.signature(indexer_forward_wrapper).parameters.values())
    assert [(p.name, p.default) for p in params] == CUDNN_1_32_PARAMETERS
    assert all(p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)


def test_import_needs_no_torch():
    import subprocess

    from conftest import PYTHON_DIR

    code = "import sys, dsa_indexer.cudnn_compat; assert 'torch' not in sys.modules; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(PYTHON_DIR)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---------------------------------------------------------------- TupleDict -----------------


def test_tupledict_indexes_unpacks_and_is_a_dict():
    t = TupleDict(scores="S", lse="L")
    assert isinstance(t, dict) and t["scores"] == "S" and t["lse"] == "L"
    assert (t[0], t[1]) == ("S", "L")
    scores, lse = t
    assert (scores, lse) == ("S", "L")
    assert list(t) == ["S", "L"] and list(t.keys()) == ["scores", "lse"] and len(t) == 2
    assert dict(t.items()) == {"scores": "S", "lse": "L"}
    (only,) = TupleDict(scores="S")
    assert only == "S"


@pytest.mark.parametrize("bad", [2, -1])
def test_tupledict_index_out_of_range(bad):
    with pytest.raises(IndexError, match=f"index {bad} out of range"):
        TupleDict(scores="S", lse="L")[bad]


def test_tupledict_missing_key_and_equality():
    t = TupleDict(scores="S")
    with pytest.raises(KeyError):
        t["lse"]
    assert t == {"scores": "S"} and t == TupleDict(scores="S") and t != TupleDict(scores="T")
    with pytest.raises(TypeError):
        hash(t)


# ---------------------------------------------------------------- checks cuDNN makes --------


@pytest.mark.parametrize(
    "knobs,named",
    [
        ({"m_block_size": 64}, ["m_block_size=64"]),
        ({"n_block_size": 256}, ["n_block_size=256"]),
        ({"q_stage": 1, "kv_stage": 3}, ["q_stage=1", "kv_stage=3"]),
    ],
)
def test_non_default_tuning_knobs_refused(recorder, knobs, named):
    with pytest.raises(ValueError) as ei:
        indexer_forward_wrapper(Q, K, W, **knobs)
    for n in named:
        assert n in str(ei.value)
    assert "only the default tuning parameters" in str(ei.value)
    assert recorder == []


def test_default_knobs_passed_explicitly_are_accepted(recorder):
    res = indexer_forward_wrapper(Q, K, W, 2, 64, 128, 128, 2, 4, 0.5)  # positionally, as cuDNN orders them
    assert res["scores"] == ("scores-of", Q)
    (call,) = recorder
    assert call["ratio"] == 2 and call["sm_scale"] == 0.5


def test_scale_padded_cu_seqlens_not_implemented(recorder):
    with pytest.raises(NotImplementedError, match="SM100"):
        indexer_forward_wrapper(Q, K, W, cu_seqlens_q_scale_padded=object())
    with pytest.raises(NotImplementedError):
        indexer_forward_wrapper(Q, K, W, cu_seqlens_k_scale_padded=object(), m_block_size=1)  # checked before the knobs
    assert recorder == []


def test_precision(recorder):
    for bad in ("mxfp8", "fp16", 8):
        with pytest.raises(ValueError, match=r"indexer_forward_wrapper: precision: expected 'bf16' or 'fp8', got") as ei:
            indexer_forward_wrapper(Q, K, W, precision=bad)
        assert not isinstance(ei.value, NotImplementedError)  # a name cuDNN-frontend's SM90 path does not know either
    with pytest.raises(ValueError, match="q_scale"):
        indexer_forward_wrapper(Q, K, W, k_scale=object())
    assert recorder == []
    indexer_forward_wrapper(Q, K, W, precision="BF16", sf_vec_size=16)  # case-insensitive; sf_vec_size unread on SM90
    assert len(recorder) == 1
    assert "q_scale" not in recorder[0] and "k_scale" not in recorder[0]  # a bf16 call is the call it always was


class Typed(Shaped):
    """A tensor stand-in with a dtype (its str() as torch's: "torch.float32")."""

    def __init__(self, dtype, *shape):
        super().__init__(*shape)
        self.dtype = type("DType", (), {"__str__": lambda _: f"torch.{dtype}"})()


def test_fp8_needs_both_scales(recorder):
    qs, ks = object(), object()
    with pytest.raises(ValueError, match=r"q_scale and k_scale: expected an fp32 tensor with precision='fp8'"):
        indexer_forward_wrapper(Q, K, W, precision="fp8")
    with pytest.raises(ValueError, match=r"indexer_forward_wrapper: k_scale: expected an fp32 tensor"):
        indexer_forward_wrapper(Q, K, W, precision="FP8", q_scale=qs)
    with pytest.raises(ValueError, match=r"indexer_forward_wrapper: q_scale: expected"):
        indexer_forward_wrapper(Q, K, W, precision="fp8", k_scale=ks)
    assert recorder == []


def test_fp8_bf16_w_passes_scales_and_sm_scale(recorder):
    qs, ks = object(), object()
    w = Typed("bfloat16", 1, 8, 64)
    res = indexer_forward_wrapper(Q, K, w, ratio=2, sm_scale=0.125, precision="fp8", q_scale=qs, k_scale=ks, return_lse=True)
    (call,) = recorder
    assert call["q_scale"] is qs and call["k_scale"] is ks and call["sm_scale"] == 0.125 and call["w"] is w
    assert call["ratio"] == 2 and call["return_lse"] is True
    assert list(res.keys()) == ["scores", "lse"]


def test_fp8_fp32_w_is_prescaled(recorder):
    """cuDNN-frontend's SM90 FP8 path takes an fp32 w as w * q_scale * sm_scale already: neither
    is applied again (q_scale is still required), k_scale is."""
    qs, ks = object(), object()
    indexer_forward_wrapper(Q, K, Typed("float32", 1, 8, 64), sm_scale=0.125, precision="fp8", q_scale=qs, k_scale=ks)
    (call,) = recorder
    assert call["q_scale"] is None and call["k_scale"] is ks and call["sm_scale"] == 1.0


def test_fp8_thd_arguments_forwarded(recorder):
    cu_q, cu_k, qs, ks, offs = object(), object(), object(), object(), object()
    thd_q, thd_k = Shaped(60, 64, 128), Shaped(30, 1, 128)
    indexer_forward_wrapper(thd_q, thd_k, Typed("bfloat16", 60, 64), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=40,
                            max_seqlen_k=20, q_causal_offsets=offs, precision="fp8", q_scale=qs, k_scale=ks)
    (call,) = recorder
    assert (call["cu_seqlens_q"], call["cu_seqlens_k"], call["q_causal_offsets"]) == (cu_q, cu_k, offs)
    assert (call["max_seqlen_q"], call["max_seqlen_k"], call["q_scale"], call["k_scale"]) == (40, 20, qs, ks)


def test_qhead_per_kv_head(recorder):
    with pytest.raises(ValueError, match="H_q // H_kv = 64, got 32"):
        indexer_forward_wrapper(Q, K, W, qhead_per_kv_head=32)
    indexer_forward_wrapper(Q, K, W, qhead_per_kv_head=64)
    thd_q, thd_k = Shaped(8, 16, 128), Shaped(4, 1, 128)
    indexer_forward_wrapper(thd_q, thd_k, Shaped(8, 16), qhead_per_kv_head=16)
    assert len(recorder) == 2


# ---------------------------------------------------------------- what reaches the binding --


def test_arguments_forwarded(recorder):
    cu_q, cu_k, offs, out = object(), object(), object(), object()
    res = indexer_forward_wrapper(
        Q, K, W, ratio=3, sm_scale=0.25, out=out, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=5, max_seqlen_k=7, q_causal_offsets=offs,
    )
    (call,) = recorder
    assert call["ratio"] == 3 and call["sm_scale"] == 0.25 and call["out"] is out
    assert call["cu_seqlens_q"] is cu_q and call["cu_seqlens_k"] is cu_k and call["q_causal_offsets"] is offs
    assert (call["max_seqlen_q"], call["max_seqlen_k"]) == (5, 7)
    assert call["return_lse"] is False and call["lse_out"] is None and call["stream"] is None
    assert "thd_columns" not in call or call["thd_columns"] == "local"
    assert type(res) is TupleDict and list(res.keys()) == ["scores"] and res["scores"] is out


def test_return_lse_gives_scores_and_lse(recorder):
    res = indexer_forward_wrapper(Q, K, W, return_lse=True)
    assert list(res.keys()) == ["scores", "lse"]
    scores, lse = res
    assert scores == ("scores-of", Q) and lse == ("lse-of", Q)


def test_lse_out_without_return_lse_is_filled_but_not_returned(recorder):
    lse = object()
    res = indexer_forward_wrapper(Q, K, W, lse_out=lse)
    assert list(res.keys()) == ["scores"]
    assert recorder[0]["lse_out"] is lse and recorder[0]["return_lse"] is False
    res = indexer_forward_wrapper(Q, K, W, lse_out=lse, return_lse=True)
    assert res["lse"] is lse


def test_stream_handles(recorder):
    class CUstreamLike:  # cuda.bindings.driver.CUstream converts to its handle with int()
        def __int__(self):
            return 0x1234

    class TorchStreamLike:
        cuda_stream = 0x5678

    ts = TorchStreamLike()
    indexer_forward_wrapper(Q, K, W, stream=CUstreamLike())
    indexer_forward_wrapper(Q, K, W, stream=ts)
    indexer_forward_wrapper(Q, K, W, stream=0x9ABC)
    assert [c["stream"] for c in recorder] == [0x1234, ts, 0x9ABC]


def test_real_binding_checks_still_apply():
    """Without the recorder the binding's own checks run (before torch is needed)."""
    with pytest.raises(ValueError, match="max_seqlen_q and max_seqlen_k"):
        cudnn_compat.indexer_forward_wrapper(Q, K, W, cu_seqlens_q=object(), cu_seqlens_k=object())


# ---------------------------------------------------------------- indexer_forward_top_k_wrapper


from dsa_indexer import _topk  # noqa: E402
from dsa_indexer.cudnn_compat import indexer_forward_top_k_wrapper  # noqa: E402

# cuDNN-frontend 1.32.0, cudnn/deepseek_sparse_attention/indexer_forward/api.py: every parameter
# of indexer_forward_top_k_wrapper in order, with its default (q, k, w, top_k have none).
CUDNN_1_32_TOP_K_PARAMETERS = [
    ("q", inspect.Parameter.empty), ("k", inspect.Parameter.empty), ("w", inspect.Parameter.empty),
    ("top_k", inspect.Parameter.empty), ("ratio", 4), ("qhead_per_kv_head", None), ("m_block_size", 128),
    ("n_block_size", 128), ("q_stage", 2), ("kv_stage", 4), ("sm_scale", 1.0), ("stream", None),
    ("cu_seqlens_q", None), ("cu_seqlens_k", None), ("max_seqlen_q", None), ("max_seqlen_k", None),
    ("q_causal_offsets", None), ("precision", "bf16"), ("q_scale", None), ("k_scale", None),
    ("cu_seqlens_q_scale_padded", None), ("cu_seqlens_k_scale_padded", None), ("sf_vec_size", 32),
    ("return_lse", False), ("lse_out", None), ("return_softmax", None), ("softmax_out", None), ("microbatch_rows", -1),
    ("topk_indices_global", True), ("cand_buffer", None), ("out_indices", None), ("out_logits", None),
    ("cand_batch_offsets", None), ("deterministic", False),
]


class Buffer(Shaped):
    """A caller buffer: contiguous, of `nbytes` bytes."""

    def __init__(self, nbytes, contiguous=True):
        super().__init__(nbytes)
        self.nbytes, self.contiguous = nbytes, contiguous

    def is_contiguous(self):
        return self.contiguous

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1


@pytest.fixture
def topk_recorder(monkeypatch):
    """Replaces the binding's indexer_topk (and its workspace-size query, 4096 bytes); records the
    keyword arguments and returns what a real call would."""
    calls = []

    def fake_topk(q, k, w, top_k, **kw):
        calls.append(dict(kw, q=q, k=k, w=w, top_k=top_k))
        pick = lambda given, wanted, tag: given if given is not None else ((tag, q) if wanted else None)  # noqa: E731
        return _topk.TopkResult(pick(kw["indices_out"], True, "indices-of"), pick(kw["values_out"], kw["return_values"], "values-of"),
                                pick(kw["softmax_out"], kw["return_softmax"], "softmax-of"), pick(kw["lse_out"], kw["return_lse"], "lse-of"))

    monkeypatch.setattr(_topk, "indexer_topk", fake_topk)
    monkeypatch.setattr(_topk, "indexer_topk_workspace_size", lambda *a, **kw: 4096)
    return calls


def test_top_k_signature_is_cudnn_frontend_1_32():
    params = list(inspect.signature(indexer_forward_top_k_wrapper).parameters.values())
    assert [(p.name, p.default) for p in params] == CUDNN_1_32_TOP_K_PARAMETERS
    assert all(p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)


def test_top_k_default_keys_and_forwarded_arguments(topk_recorder):
    offs = object()
    res = indexer_forward_top_k_wrapper(Q, K, W, 512, ratio=2, sm_scale=0.25, q_causal_offsets=offs)
    assert type(res) is TupleDict and list(res.keys()) == ["indices", "logits", "softmax"]
    indices, logits, softmax = res
    assert (indices, logits, softmax) == (("indices-of", Q), ("values-of", Q), ("softmax-of", Q))
    (call,) = topk_recorder
    assert (call["top_k"], call["ratio"], call["sm_scale"], call["q_causal_offsets"]) == (512, 2, 0.25, offs)
    assert call["global_indices"] is True  # cuDNN-frontend's topk_indices_global default
    assert call["return_values"] is True and call["return_softmax"] is True and call["return_lse"] is False
    assert call["workspace"] is None and call["stream"] is None
    assert "sort_by_score" not in call  # ascending indices: the library's default order


def test_top_k_softmax_and_lse_keys(topk_recorder):
    assert list(indexer_forward_top_k_wrapper(Q, K, W, 8, return_softmax=False).keys()) == ["indices", "logits"]
    assert list(indexer_forward_top_k_wrapper(Q, K, W, 8, return_softmax=True, return_lse=True).keys()) == [
        "indices", "logits", "softmax", "lse"]
    sm, lse = object(), object()
    res = indexer_forward_top_k_wrapper(Q, K, W, 8, return_softmax=False, softmax_out=sm, lse_out=lse)  # given: returned
    assert list(res.keys()) == ["indices", "logits", "softmax", "lse"] and res["softmax"] is sm and res["lse"] is lse
    assert [c["return_lse"] for c in topk_recorder] == [False, True, True]


def test_top_k_caller_buffers_and_local_indices(topk_recorder):
    idx, logits = object(), object()
    res = indexer_forward_top_k_wrapper(Q, K, W, 8, out_indices=idx, out_logits=logits, topk_indices_global=False,
                                        deterministic=True)
    assert res["indices"] is idx and res["logits"] is logits
    assert topk_recorder[0]["indices_out"] is idx and topk_recorder[0]["values_out"] is logits
    assert topk_recorder[0]["global_indices"] is False


def test_top_k_cand_buffer_is_the_workspace_when_large_enough(topk_recorder):
    big, small, strided = Buffer(4096), Buffer(4095), Buffer(1 << 20, contiguous=False)
    for buf in (big, small, strided):
        indexer_forward_top_k_wrapper(Q, K, W, 8, cand_buffer=buf, cand_batch_offsets=object(), microbatch_rows=0)
    assert [c["workspace"] for c in topk_recorder] == [big, None, None]


def test_top_k_thd_max_seqlen_derived_when_omitted(topk_recorder):
    class Cu(list):  # cu_seqlens stand-in: slicing, subtraction, .max().item()
        def __getitem__(self, s):
            return Cu(list.__getitem__(self, s))

        def __sub__(self, other):
            return Cu(a - b for a, b in zip(self, other))

        def max(self):
            return type("Scalar", (), {"item": lambda _, m=max(self): m})()

    thd_q, thd_k = Shaped(60, 64, 128), Shaped(30, 1, 128)
    indexer_forward_top_k_wrapper(thd_q, thd_k, Shaped(60, 64), 8, cu_seqlens_q=Cu([0, 20, 60]), cu_seqlens_k=Cu([0, 10, 30]))
    assert (topk_recorder[0]["max_seqlen_q"], topk_recorder[0]["max_seqlen_k"]) == (40, 20)
    indexer_forward_top_k_wrapper(thd_q, thd_k, Shaped(60, 64), 8, cu_seqlens_q=Cu([0, 20, 60]), cu_seqlens_k=Cu([0, 10, 30]),
                                  max_seqlen_q=64, max_seqlen_k=32)
    assert (topk_recorder[1]["max_seqlen_q"], topk_recorder[1]["max_seqlen_k"]) == (64, 32)


def test_top_k_refusals(topk_recorder):
    with pytest.raises(ValueError, match="indexer_forward_top_k_wrapper: SM90 supports only the default tuning.*kv_stage=3"):
        indexer_forward_top_k_wrapper(Q, K, W, 8, kv_stage=3)
    for p in ("mxfp8", "MXFP4", "fp8"):
        with pytest.raises(NotImplementedError, match="'bf16' only") as ei:
            indexer_forward_top_k_wrapper(Q, K, W, 8, precision=p)
        assert isinstance(ei.value, dsa_indexer.UnsupportedConfig) and isinstance(ei.value, ValueError)
    with pytest.raises(ValueError, match="expected 'bf16' or 'fp8' or 'mxfp8' or 'mxfp4', got 'int8'"):
        indexer_forward_top_k_wrapper(Q, K, W, 8, precision="int8")
    with pytest.raises(NotImplementedError, match="SM100"):
        indexer_forward_top_k_wrapper(Q, K, W, 8, cu_seqlens_q_scale_padded=object())
    with pytest.raises(ValueError, match="qhead_per_kv_head: expected None or H_q // H_kv = 64, got 16"):
        indexer_forward_top_k_wrapper(Q, K, W, 8, qhead_per_kv_head=16)
    assert topk_recorder == []
    indexer_forward_top_k_wrapper(Q, K, W, 8, precision="BF16", sf_vec_size=16, qhead_per_kv_head=64)
    assert len(topk_recorder) == 1


def test_top_k_stream_handles(topk_recorder):
    class CUstreamLike:
        def __int__(self):
            return 0x1234

    indexer_forward_top_k_wrapper(Q, K, W, 8, stream=CUstreamLike())
    assert topk_recorder[0]["stream"] == 0x1234


def test_top_k_real_binding_checks_still_apply():
    with pytest.raises(dsa_indexer.UnsupportedConfig, match="top_k: expected <= 2048"):
        indexer_forward_top_k_wrapper(Q, K, W, 4096)
    with pytest.raises(dsa_indexer.InvalidArgument, match="top_k: expected >= 1"):
        indexer_forward_top_k_wrapper(Q, K, W, 0)
