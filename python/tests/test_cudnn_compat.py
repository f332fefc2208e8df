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
    with pytest.raises(NotImplementedError, match="fp8") as ei:
        indexer_forward_wrapper(Q, K, W, precision="FP8")
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, dsa_indexer.UnsupportedConfig)
    with pytest.raises(ValueError, match="'mxfp8'"):
        indexer_forward_wrapper(Q, K, W, precision="mxfp8")
    with pytest.raises(ValueError, match="q_scale"):
        indexer_forward_wrapper(Q, K, W, k_scale=object())
    assert recorder == []
    indexer_forward_wrapper(Q, K, W, precision="BF16", sf_vec_size=16)  # case-insensitive; sf_vec_size unread on SM90
    assert len(recorder) == 1


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
