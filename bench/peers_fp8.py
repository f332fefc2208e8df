"""FP8 rows of bench/peers.py (`--precision fp8`; issue 22, "Speed"): dsa-indexer's E4M3 path
against cuDNN-frontend's SM90 FP8 indexer and our own BF16 lean, in the same run on the same
inputs, with the FP8 GEMM ceiling measured in that run.

Columns (in this order; --families picks ours, --skip cudnn,deepgemm,compat,bf16,warm leaves some out):

- ``fp8_<family>``: ``dsa_indexer.indexer_forward(q8, k8, w, ..., family=<family>, q_scale=,
  k_scale=)`` for each of --families (default lean, generic, auto). While the automatic choice does
  not take e4m3 (the FP8 families are served by name until a GPU run validates them) the auto
  column is "not served" with the library's reason;
- ``cudnn_fp8``: cuDNN-frontend 1.32's ``indexer_forward_wrapper(q8, k8, w, ..., precision="fp8",
  q_scale=, k_scale=)`` (its SM90 FP8 path; bf16 w, so it folds ``w * q_scale * sm_scale`` itself,
  which is the same formula), from the wheels of bench/requirements-peers.txt; whatever it
  raises (an import, a missing piece of the wheels, a refused argument) is the column's status,
  never the end of the run;
- ``deepgemm_fp8``: DeepGEMM's FP8 MQA logits when ``deep_gemm`` imports (bench/deepgemm_peer.sh
  builds DeepGEMM 2.8.2 from its source distribution on the GPU machine): 2.8's
  ``fp8_fp4_mqa_logits((q8, None), (kv8, kv_scale), weights, ks, ke, max_seqlen_k=S_k)``, which
  writes compressed logits only and leaves the cells past a row's window unwritten (every window
  here starts at key 0, so its layout is the key columns'; the check sets the unwritten cells to
  -inf outside the timing, and the time is of what DeepGEMM writes), or an older release's
  ``fp8_mqa_logits(..., clean_logits=True)``; B 1, weights = w * q_scale * sm_scale in fp32
  (DeepGEMM folds the per-token q scale into them), windows [0, row end) per row, made once per
  input set outside the timing;
- ``deepgemm_compat``: our drop-in, ``dsa_indexer.deepgemm_compat.fp8_fp4_mqa_logits``, on
  DeepGEMM's operands and in its call form (``max_seqlen_k = S_k`` positional): what a serving
  stack runs after switching the import (explicit windows: lean's row windows at B 1, H 64); ``--skip
  compat`` drops it;
- ``bf16_lean``: our BF16 lean on the unquantized bf16 inputs of the same draw (the 1.6x target).

Ceilings, same run: ``torch._scaled_mm`` E4M3 x E4M3 -> bf16 8192^3 with unit tensor-wise
scales, with and without ``use_fast_accum`` (the % columns use the higher), and the bf16
``torch.matmul`` 8192^3 of the bf16 rows (for the bf16 column's %).

Inputs: q, k, w ~ N(0,1) in bf16 (zeros replaced), then per-row E4M3 quantization: q_scale (B,
S_q, H) = amax over each (token, head) row of 128 / 448, k_scale (B, S_k, 1) per token (cuDNN-
frontend's "1x128" scheme, DeepGEMM's per-token KV scales). sm_scale 0.125, B 1, H 64.

Shapes: tools/cli_fp8.cpp fp8_bench_cases (same names and order; the tests hold them equal): the
headline S_q 8192 / S_k 4096 ratio 2; S_q 2048 with S_k 8192 and 65536 whose rows end at S_k
(ratio 1, q_causal_offsets S_k - S_q - 1: row i sees [0, i + S_k - S_q), DeepGEMM's
fp8_mqa_logits benchmark windows); S_q 16384 / S_k 8192 ratio 2.

Check (every column): the output of input set 0, pre-filled with NaN, on the sampled rows of
`check_rows` (the CLI's fp8_check_rows) against an fp64 oracle on the dequantized inputs (bf16
column: on the bf16 inputs): rel-L2 <= 2e-3 (cuDNN-frontend's FP8 tolerance), exact -inf pattern,
no NaN/+inf. Ours also: every cell bitwise against generic FP8's, and run to run (set 0's output
again after the timed calls). Timing: cold = rotating input sets (>= 200 MB together), warm =
CUDA-graph replay (bench/peers.py's timers).

Writes the section between ``<!-- peers-fp8:begin -->`` and ``<!-- peers-fp8:end -->`` of
BENCHMARKS.md and peers_fp8_results.json (``--from-json`` re-renders).
"""

from __future__ import annotations

import math
import re
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

FP8_BEGIN, FP8_END = "<!-- peers-fp8:begin -->", "<!-- peers-fp8:end -->"
FP8_JSON = "peers_fp8_results.json"
FP8_FORMAT = 1
HEAD_DIM = 128
SM_SCALE = 0.125
E4M3_MAX = 448.0
FP8_TOL = 2e-3  # cuDNN-frontend's tolerance for its FP8 path (issue 22)
BF16_TOL = 2e-7  # our bf16 rows against the fp64 oracle on the same bf16 inputs (peers.py's)
HEADLINE = "fp8 H64 r2 S_q 8192 S_k 4096"
# issue 22's targets
TARGET_TFLOPS = 1100.0
MOONSHOT_TFLOPS = 1250.0
TARGET_PCT_CEILING = 80.0
TARGET_VS_CUDNN = 1.5
TARGET_VS_BF16 = 1.6
CUDNN, BF16_LEAN, DEEPGEMM, COMPAT = "cudnn_fp8", "bf16_lean", "deepgemm_fp8", "deepgemm_compat"


@dataclass
class Fp8Case:
    name: str
    s_q: int
    s_k: int
    ratio: int
    end_at_sk: bool = False  # q_causal_offsets S_k - S_q - 1
    heads: int = 64
    batch: int = 1
    sm_scale: float = SM_SCALE

    def offset(self) -> int:
        return self.s_k - self.s_q - 1 if self.end_at_sk else 0

    def row_end(self, i: int) -> int:
        """The end of row i's window [0, end): clamp(floor((offset + i + 1) / ratio), 0, S_k)."""
        return min(max((self.offset() + i + 1) // self.ratio, 0), self.s_k)

    def visible_pairs(self) -> int:
        return self.batch * sum(self.row_end(i) for i in range(self.s_q))

    def flops(self) -> float:
        return 2.0 * self.heads * HEAD_DIM * self.visible_pairs()

    def dims(self) -> str:
        off = f", offset {self.offset()}" if self.end_at_sk else ""
        return f"S_q {self.s_q}, S_k {self.s_k}, ratio {self.ratio}{off}"


def fp8_cases(quick: bool = False) -> list:
    """The shapes of `dsa-indexer bench --in e4m3` (tools/cli_fp8.cpp fp8_bench_cases), same order."""
    cases = [
        Fp8Case("fp8 H64 r2 S_q 8192 S_k 4096", 8192, 4096, 2),
        Fp8Case("fp8 H64 r1 S_q 2048 S_k 8192 end", 2048, 8192, 1, True),
        Fp8Case("fp8 H64 r1 S_q 2048 S_k 65536 end", 2048, 65536, 1, True),
        Fp8Case("fp8 H64 r2 S_q 16384 S_k 8192", 16384, 8192, 2),
    ]
    return cases[:1] if quick else cases


def check_rows(rows: int) -> list:
    """The sampled rows (tools/cli_fp8.cpp fp8_check_rows): the first and last rows, both sides of
    the 64-row q-tile boundaries near the ends, seven rows spread between."""
    s = set()
    for r in (0, 1, 7, 8, 63, 64, 127, 128):
        s.add(r)
        s.add(rows - 1 - r)
    for i in range(1, 8):
        s.add(rows * i // 8 + i)
    return sorted(r for r in s if 0 <= r < rows)


# ---------------------------------------------------------------- GPU side ---------------


def quantize_rows(x):
    """Per-row E4M3 over the last dimension: (x8, scale) with scale = max(amax, 1e-4) / 448 > 0."""
    import torch

    scale = x.float().abs().amax(-1).clamp_min(1e-4) / E4M3_MAX
    return (x.float() / scale.unsqueeze(-1)).to(torch.float8_e4m3fn), scale


class Fp8Inputs:
    """One input set: the bf16 draw (q, k, w) and its FP8 quantization (q8, q_scale, k8, k_scale)."""

    def __init__(self, c: Fp8Case, seed: int, device: str = "cuda", keep_bf16: bool = True):
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def nz(shape):
            x = torch.randn(shape, generator=g, device=device).to(torch.bfloat16)
            return torch.where(x == 0, torch.ones_like(x), x)

        B, H, D = c.batch, c.heads, HEAD_DIM
        q, k = nz((B, c.s_q, H, D)), nz((B, c.s_k, 1, D))
        self.w = nz((B, c.s_q, H))
        self.q8, self.q_scale = quantize_rows(q)  # (B, S_q, H, D), (B, S_q, H)
        self.k8, self.k_scale = quantize_rows(k)  # (B, S_k, 1, D), (B, S_k, 1)
        self.q, self.k = (q, k) if keep_bf16 else (None, None)
        self.offsets = torch.full((B,), c.offset(), dtype=torch.int32, device=device)
        self.out = torch.empty((B, c.s_q, c.s_k), dtype=torch.float32, device=device)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q8, self.k8, self.w, self.out, self.q_scale, self.k_scale))


def reference_rows(c: Fp8Case, x: Fp8Inputs, rows: list, fp8: bool = True):
    """fp64 scores of batch 0's `rows`, (len(rows), S_k), -inf outside each row's window: on the
    dequantized inputs (q8 * q_scale, k8 * k_scale), or on the bf16 inputs (fp8=False)."""
    import torch

    if fp8:
        k = x.k8[0, :, 0].double() * x.k_scale[0].double()  # (S_k, D) * (S_k, 1)
    else:
        k = x.k[0, :, 0].double()
    out = torch.full((len(rows), c.s_k), float("-inf"), dtype=torch.float64, device=k.device)
    for n, i in enumerate(rows):
        end = c.row_end(i)
        if end == 0:
            continue
        q = x.q8[0, i].double() * x.q_scale[0, i].double().unsqueeze(-1) if fp8 else x.q[0, i].double()  # (H, D)
        logits = (q @ k[:end].t()).clamp_min_(0)  # (H, end)
        out[n, :end] = (logits * x.w[0, i].double().unsqueeze(-1)).sum(0) * c.sm_scale
    return out


def _scores(res, x: Fp8Inputs):
    """The score tensor of a call: `out` unless the call returned another tensor."""
    import torch

    if isinstance(res, dict) or hasattr(res, "keys"):
        res = res["scores"]
    elif isinstance(res, (tuple, list)) and res:
        res = res[0]
    if isinstance(res, torch.Tensor) and res.data_ptr() != x.out.data_ptr():
        return res
    return x.out


def load_cudnn_fp8(wheel_dirs, site_dir: Path):
    """(callable(c, x) or None, notes, reason): cuDNN-frontend's indexer_forward_wrapper from the
    wheels, called with precision="fp8"."""
    import peer_wheels

    why, notes = peer_wheels.prepare_cudnn_import(wheel_dirs, site_dir)
    if why:
        return None, notes, why
    try:
        import cudnn
        from cudnn.deepseek_sparse_attention import indexer_forward_wrapper
    except Exception as e:  # noqa: BLE001 (the reason shown)
        hint = "" if wheel_dirs else " (pass --wheels DIR... with the wheels of bench/requirements-peers.txt)"
        return None, notes, f"import failed: {type(e).__name__}: {e}{hint}"
    notes.append(f"cudnn-frontend {getattr(cudnn, '__version__', '?')}, indexer_forward_wrapper(..., precision='fp8', q_scale=, k_scale=), bf16 w")

    def call(c: Fp8Case, x: Fp8Inputs):
        kw = dict(ratio=c.ratio, sm_scale=c.sm_scale, out=x.out, precision="fp8", q_scale=x.q_scale, k_scale=x.k_scale)
        if c.end_at_sk:
            kw["q_causal_offsets"] = x.offsets
        return indexer_forward_wrapper(x.q8, x.k8, x.w, **kw)

    return call, notes, ""


def deepgemm_operands(c: Fp8Case, x: Fp8Inputs):
    """DeepGEMM's operands of an input set (made once, outside the timing): q8 (S, H, D), kv8
    (S_kv, D), kv_scale (S_kv,), fp32 weights w * q_scale * sm_scale (S, H), ks = 0, ke = row end."""
    import torch

    if getattr(x, "deepgemm", None) is None:
        ends = torch.tensor([c.row_end(i) for i in range(c.s_q)], dtype=torch.int32, device=x.w.device)
        weights = (x.w[0].float() * x.q_scale[0].float() * c.sm_scale).contiguous()  # (S, H)
        x.deepgemm = (x.q8[0].contiguous(), x.k8[0, :, 0].contiguous(), x.k_scale[0, :, 0].contiguous(), weights,
                      torch.zeros_like(ends), ends)
    return x.deepgemm


def on_deepgemm_operands(invoke):
    """A column's call(c, x) that passes DeepGEMM's operands of the input set to
    invoke(c, (q, None), (kv, kv_scale), weights, ks, ke); B 1 only, as DeepGEMM takes them."""

    def call(c: Fp8Case, x: Fp8Inputs):
        if c.batch != 1:
            raise ValueError("DeepGEMM's MQA logits take one sequence (B 1)")
        q, kv, kv_scale, weights, ks, ke = deepgemm_operands(c, x)
        return invoke(c, (q, None), (kv, kv_scale), weights, ks, ke)

    return call


def load_deepgemm_compat():
    """(callable(c, x), notes, reason): our drop-in, dsa_indexer.deepgemm_compat.fp8_fp4_mqa_logits,
    called as DeepGEMM's column calls DeepGEMM (same operands, 2.8.2's positional max_seqlen_k =
    S_k): what a serving stack gets by switching the import (explicit windows: lean's row windows where
    its gates hold)."""
    from dsa_indexer import deepgemm_compat

    call = on_deepgemm_operands(lambda c, *ops: deepgemm_compat.fp8_fp4_mqa_logits(*ops, c.s_k))
    return call, ["dsa_indexer.deepgemm_compat.fp8_fp4_mqa_logits on DeepGEMM's operands (max_seqlen_k = S_k, windows "
                  "from key 0), every cell written"], ""


def load_deepgemm():
    """(callable(c, x) or None, notes, reason): DeepGEMM's FP8 MQA logits (see the module
    docstring), or the import's failure as the reason."""
    try:
        import deep_gemm
    except Exception as e:  # noqa: BLE001 (the reason shown)
        return None, [], f"import failed: {type(e).__name__}: {e} (bench/deepgemm_peer.sh builds it on the GPU machine)"
    # 2.8 names it fp8_fp4_mqa_logits (E4M3 when q's scale is None); earlier releases fp8_mqa_logits
    name = next((n for n in ("fp8_fp4_mqa_logits", "fp8_mqa_logits") if hasattr(deep_gemm, n)), None)
    if name is None:
        return None, [], f"deep_gemm {getattr(deep_gemm, '__version__', '?')} has neither fp8_fp4_mqa_logits nor fp8_mqa_logits"
    fn = getattr(deep_gemm, name)
    notes = [f"deep_gemm {getattr(deep_gemm, '__version__', '?')} from {getattr(deep_gemm, '__file__', '?')}, {name}, "
             "fp32 weights = w * q_scale * sm_scale"]

    compressed_only = name == "fp8_fp4_mqa_logits" and "clean_logits" not in (fn.__doc__ or "")

    def invoke(c: Fp8Case, *ops):
        if compressed_only:  # 2.8.2: (S, max_seqlen_k), row i from key ks[i] = 0, cells past ke[i] not written
            return fn(*ops, c.s_k)
        return fn(*ops, clean_logits=True)

    call = on_deepgemm_operands(invoke)

    def clean_for_check(got, c: Fp8Case, x: Fp8Inputs):
        """The cells DeepGEMM leaves unwritten (past each row's window) set to -inf, outside the
        timing, so that the check and the run-to-run comparison see only what it computes."""
        import torch

        if not compressed_only:
            return got
        ke = deepgemm_operands(c, x)[5].to(torch.int64)
        cols = torch.arange(c.s_k, device=got.device)
        return got.masked_fill(cols[None, None, :] >= ke[None, :, None], float("-inf"))

    call.clean_for_check = clean_for_check
    if not compressed_only:
        notes.append("clean_logits=True (the cells past a row's window written -inf by DeepGEMM)")
    else:
        notes.append("2.8.2 writes compressed logits only (max_seqlen_k = S_k, every window from key 0, so the layout is the key "
                     "columns'); the cells past a row's window are not written: the check sets them to -inf outside the timing")
    return call, notes, ""


def dsa_call(family: str, bf16: bool = False):
    import dsa_indexer

    def call(c: Fp8Case, x: Fp8Inputs):
        kw = dict(ratio=c.ratio, sm_scale=c.sm_scale, out=x.out, family=family)
        if c.end_at_sk:
            kw["q_causal_offsets"] = x.offsets
        if bf16:
            return dsa_indexer.indexer_forward(x.q, x.k, x.w, **kw)
        return dsa_indexer.indexer_forward(x.q8, x.k8, x.w, q_scale=x.q_scale, k_scale=x.k_scale, **kw)

    return call


def fp8_gemm_ceiling(n: int = 8192, reps: int = 10, fast_accum: bool = False) -> dict:
    """torch._scaled_mm E4M3 (row-major) x E4M3 (column-major) -> bf16, unit tensor-wise scales."""
    import torch

    try:
        a = torch.randn((n, n), device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn((n, n), device="cuda").to(torch.float8_e4m3fn)
        one = torch.ones((), dtype=torch.float32, device="cuda")
        fn = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)  # noqa: E731
        import peers

        t = peers.time_calls([fn], warmup=3, budget_s=0.0, min_reps=reps, max_reps=reps)
    except Exception as e:  # noqa: BLE001
        return {"n": n, "fast_accum": fast_accum, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]}
    t.update(n=n, fast_accum=fast_accum, tflops=2.0 * n**3 / (t["median_us"] * 1e-6) / 1e12)
    return t


def fp8_ceiling_tflops(ceilings: dict) -> float:
    return max((ceilings.get(k, {}).get("tflops", 0.0) for k in ("fp8", "fp8_fast")), default=0.0)


def _bits_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32)))


def measure_fp8(args, peers) -> dict:
    """The FP8 rows on the GPU (peers: the bench/peers.py module, for its timers and environment)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("peers.py --precision fp8: needs a CUDA GPU (use --from-json to render saved results)")
    from dsa_indexer.errors import UnsupportedConfig
    from dsa_indexer.reference import compare

    t_start = time.perf_counter()
    res = {"format": FP8_FORMAT, "env": peers.environment(args), "impls": {}, "cases": [], "ceilings": {}}
    res["method"] = {"budget_s": args.budget, "min_reps": args.min_reps, "max_reps": args.reps, "per_graph": peers.PER_GRAPH,
                     "tol_fp8": FP8_TOL, "tol_bf16": BF16_TOL}
    import dsa_indexer

    calls = {}
    for fam in args.families:
        key = f"fp8_{fam}"
        res["impls"][key] = {"label": f"dsa-indexer {fam} FP8", "available": True, "reason": "", "tol": FP8_TOL, "family": fam,
                             "notes": [f"library {dsa_indexer.version()} from {dsa_indexer.library_path()}"]}
        calls[key] = dsa_call(fam)
    if "cudnn" not in args.skip:
        fn, notes, reason = load_cudnn_fp8(args.wheels, Path(args.site_dir or tempfile.mkdtemp(prefix="dsa_peers_site.")))
        res["impls"][CUDNN] = {"label": "cuDNN-frontend SM90 FP8", "available": fn is not None, "reason": reason, "notes": notes,
                               "tol": FP8_TOL}
        if fn is not None:
            calls[CUDNN] = fn
    if "deepgemm" not in args.skip:
        fn, notes, reason = load_deepgemm()
        res["impls"][DEEPGEMM] = {"label": "DeepGEMM FP8", "available": fn is not None, "reason": reason, "notes": notes,
                                  "tol": FP8_TOL}
        if fn is not None:
            calls[DEEPGEMM] = fn
    if "compat" not in args.skip:
        fn, notes, reason = load_deepgemm_compat()
        res["impls"][COMPAT] = {"label": "dsa-indexer deepgemm_compat FP8", "available": True, "reason": reason, "notes": notes,
                                "tol": FP8_TOL}
        calls[COMPAT] = fn
    if "bf16" not in args.skip:
        res["impls"][BF16_LEAN] = {"label": "dsa-indexer lean BF16", "available": True, "reason": "", "tol": BF16_TOL, "family": "lean",
                                   "notes": ["the unquantized bf16 inputs of the same draw"]}
        calls[BF16_LEAN] = dsa_call("lean", bf16=True)
    for k, meta in res["impls"].items():
        print(f"[peers-fp8] {meta['label']}: {'ok' if meta['available'] else 'UNAVAILABLE: ' + meta['reason']}", flush=True)
    res["ceilings"] = {"fp8": fp8_gemm_ceiling(), "fp8_fast": fp8_gemm_ceiling(fast_accum=True), "bf16": peers.gemm_ceiling()}
    fp8_ceil, bf16_ceil = fp8_ceiling_tflops(res["ceilings"]), res["ceilings"]["bf16"]["tflops"]
    print(f"[peers-fp8] ceilings: {res['ceilings']}", flush=True)
    out_dir = Path(args.out)
    for c in (c for c in fp8_cases(args.quick) if re.search(args.match, c.name)):
        rows = check_rows(c.s_q)
        row = {"case": asdict(c), "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(), "check_rows": len(rows), "runs": {}}
        keep_bf16 = BF16_LEAN in calls
        x0 = Fp8Inputs(c, 42, keep_bf16=keep_bf16)
        nsets = max(2, min(4, math.ceil(200e6 / x0.nbytes())))
        sets = [x0] + [Fp8Inputs(c, 42 + i, keep_bf16=keep_bf16) for i in range(1, nsets)]
        refs = {}
        first = {}
        for key, meta in res["impls"].items():
            run: dict = {}
            if key not in calls:
                run["status"] = f"unavailable: {meta['reason']}"
            elif time.perf_counter() - t_start > args.max_seconds:
                run["status"] = f"not measured: the run's time budget ({args.max_seconds:.0f} s) was spent"
            else:
                fp8 = key != BF16_LEAN
                try:
                    x0.out.fill_(float("nan"))
                    got = _scores(calls[key](c, x0), x0)
                    torch.cuda.synchronize()
                    got = got.reshape(c.batch, c.s_q, c.s_k).clone()
                    clean = getattr(calls[key], "clean_for_check", None)
                    if clean is not None:
                        got = clean(got, c, x0)
                    if fp8 not in refs:
                        refs[fp8] = reference_rows(c, x0, rows, fp8=fp8)
                    ch = compare(got[0, rows], refs[fp8])
                    ch["ok"] = ch["pattern_mismatch"] == 0 and ch["non_finite"] == 0 and ch["rel_l2"] <= meta["tol"]
                    ch["rows"] = len(rows)
                    run["check"] = ch
                    fns = [lambda x=x: calls[key](c, x) for x in sets]
                    run.update(peers.time_calls(fns, warmup=3, budget_s=args.budget, min_reps=args.min_reps, max_reps=args.reps))
                    ceil = fp8_ceil if fp8 else bf16_ceil
                    peers._rates(run, c, ceil)
                    if "warm" not in args.skip:
                        try:
                            run["warm"] = peers._rates(peers.time_warm(fns[0], run["median_us"], args), c, ceil)
                        except Exception as e:  # noqa: BLE001
                            run["warm"] = {"error": f"warm timing failed: {peers._err(e)}"}
                    torch.cuda.synchronize()
                    if key.startswith("fp8_") or key == COMPAT:  # ours: run to run bitwise
                        again = _scores(calls[key](c, x0), x0).reshape(got.shape)
                        if clean is not None:
                            again = clean(again, c, x0)
                        torch.cuda.synchronize()
                        run["run_to_run"] = _bits_equal(again, got)
                        if key != COMPAT:  # (its weights are folded on the host as DeepGEMM's: other bits than generic's)
                            first[key] = got
                    run["status"] = "ok" if ch["ok"] else "measured, but the correctness check FAILED"
                except UnsupportedConfig as e:
                    run = {"status": f"not served: {peers.not_served_reason(str(e))}"}
                except Exception as e:  # noqa: BLE001 (the failure is the cell shown)
                    run = {"status": f"failed: {peers._err(e)}", "traceback": traceback.format_exc()[-3000:]}
                    try:
                        torch.cuda.synchronize()
                    except Exception:  # noqa: BLE001
                        pass
            row["runs"][key] = run
            w = run.get("warm") or {}
            ch = run.get("check", {})
            print(f"[peers-fp8] {c.name:<36} {meta['label']:<26} cold {run.get('median_us', float('nan')):9.1f} us "
                  f"{run.get('tflops', float('nan')):7.1f} TF/s  warm {w.get('median_us', float('nan')):9.1f} us "
                  f"{w.get('tflops', float('nan')):7.1f} TF/s  rel-L2 {ch.get('rel_l2', float('nan')):.2e}  {run['status']}", flush=True)
        gen = first.get("fp8_generic")
        if gen is not None:
            for key, t in first.items():
                if key != "fp8_generic":
                    row["runs"][key]["equals_generic"] = _bits_equal(t, gen)
        del sets, first, refs, x0
        torch.cuda.empty_cache()
        res["cases"].append(row)
        res["elapsed_s"] = time.perf_counter() - t_start
        peers.save_json(res, out_dir, FP8_JSON)
        peers.write_doc(render_fp8(res), out_dir, (FP8_BEGIN, FP8_END))
    res["ceilings_end"] = {"fp8": fp8_gemm_ceiling(), "fp8_fast": fp8_gemm_ceiling(fast_accum=True)}
    res["elapsed_s"] = time.perf_counter() - t_start
    return res


# ---------------------------------------------------------------- report -----------------


def _t(run: dict, mode: str):
    """The cold (top level) or warm timing dict of a run, or None."""
    t = run if mode == "cold" else (run.get("warm") or {})
    return t if "median_us" in t else None


def ours(row: dict, mode: str):
    """(key, timing) of the fastest dsa-indexer FP8 column of a row whose check passed, or (None, None)."""
    best = (None, None)
    for key, run in row["runs"].items():
        t = _t(run, mode)
        if key.startswith("fp8_") and t and run.get("check", {}).get("ok") and (best[1] is None or t["median_us"] < best[1]["median_us"]):
            best = (key, t)
    return best


def _family(key: str) -> str:
    return key[len("fp8_"):] if key and key.startswith("fp8_") else str(key)


def target_values(rows: list, mode: str) -> dict:
    """issue 22's targets in `mode`: what -> list of (row name, value, our column's family)."""
    out = {"tflops": [], "pct": [], "vs_cudnn": [], "vs_bf16": []}
    for row in rows:
        key, t = ours(row, mode)
        if key is None:
            continue
        fam = _family(key)
        if row["name"] == HEADLINE:
            out["tflops"].append((row["name"], t["tflops"], fam))
            out["pct"].append((row["name"], t["pct_ceiling"], fam))
            b = row["runs"].get(BF16_LEAN, {})
            tb = _t(b, mode)
            if tb and b.get("check", {}).get("ok"):
                out["vs_bf16"].append((row["name"], tb["median_us"] / t["median_us"], fam))
        cu = row["runs"].get(CUDNN, {})
        tc = _t(cu, mode)
        if tc and cu.get("check", {}).get("ok"):
            out["vs_cudnn"].append((row["name"], tc["median_us"] / t["median_us"], fam))
    return out


TARGETS = [
    ("tflops", f">= {TARGET_TFLOPS:.0f} TFLOP/s useful at {HEADLINE} (moonshot {MOONSHOT_TFLOPS:.0f})", TARGET_TFLOPS, "{:.0f} TF/s"),
    ("pct", f">= {TARGET_PCT_CEILING:.0f} % of the same run's FP8 GEMM ceiling at {HEADLINE}", TARGET_PCT_CEILING, "{:.0f} %"),
    ("vs_cudnn", f">= {TARGET_VS_CUDNN}x cuDNN-frontend's SM90 FP8 path on every shape", TARGET_VS_CUDNN, "{:.2f}x"),
    ("vs_bf16", f">= {TARGET_VS_BF16}x our BF16 lean at {HEADLINE}", TARGET_VS_BF16, "{:.2f}x"),
]


def target_cell(vals: list, threshold: float, fmt: str) -> str:
    if not vals:
        return "not measured"
    missed = [(n, v, f) for n, v, f in vals if v < threshold]
    if len(vals) == 1:
        n, v, f = vals[0]
        return f"{fmt.format(v)} ({f}) " + ("met" if not missed else "**missed**")
    if not missed:
        n, v, f = min(vals, key=lambda t: t[1])
        return f"met in all {len(vals)} cases (lowest {fmt.format(v)}: {n}, {f})"
    return f"**missed** in {len(missed)} of {len(vals)}: " + "; ".join(f"{n} {fmt.format(v)} ({f})" for n, v, f in missed)


def targets(rows: list) -> list:
    """(what, cold cell, warm cell) of issue 22's speed targets."""
    vals = {m: target_values(rows, m) for m in ("cold", "warm")}
    return [(what, target_cell(vals["cold"][k], thr, fmt), target_cell(vals["warm"][k], thr, fmt)) for k, what, thr, fmt in TARGETS]


def _fmt_pairs(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def _cell(run: dict, mode: str) -> str:
    t = _t(run, mode)
    if t:
        flag = "" if run.get("check", {}).get("ok") else " ✗"
        loop = " †" if mode == "warm" and t.get("mode") == "loop" else ""
        return f"{t['median_us']:.1f} us · {t['tflops']:.0f} TF/s · {t['pct_ceiling']:.0f}%{flag}{loop}"
    st = run.get("status", "")
    if st.startswith("not served: "):
        return f"— ({st[len('not served: '):]})"
    return "—"


def _speedup(row: dict, a: str, b: str, mode: str):
    """time of b / time of a (> 1: a is faster), or None."""
    ta, tb = _t(row["runs"].get(a, {}), mode), _t(row["runs"].get(b, {}), mode)
    return tb["median_us"] / ta["median_us"] if ta and tb else None


def speedup_pairs(keys: list) -> list:
    base = "fp8_lean" if "fp8_lean" in keys else "fp8_generic" if "fp8_generic" in keys else None
    if base is None:
        return []
    pairs = [(base, k) for k in (CUDNN, DEEPGEMM, BF16_LEAN, "fp8_generic") if k in keys and k != base]
    if base == "fp8_lean" and "fp8_generic" in keys and CUDNN in keys:
        pairs.append(("fp8_generic", CUDNN))
    if COMPAT in keys and DEEPGEMM in keys:
        pairs.append((COMPAT, DEEPGEMM))
    return pairs


def _ceiling_text(c: dict) -> str:
    if not c:
        return "not measured"
    if c.get("error"):
        return f"unavailable ({c['error']})"
    return f"{c['median_us']:.0f} us = **{c['tflops']:.0f} TFLOP/s**"


def render_fp8(r: dict) -> str:
    env, ceil = r["env"], r.get("ceilings", {})
    keys = list(r["impls"])
    labels = {k: r["impls"][k]["label"] for k in keys}
    short = {k: labels[k].replace("dsa-indexer ", "") for k in keys}
    rows = r["cases"]
    L = [FP8_BEGIN, "## FP8 (E4M3): dsa-indexer against cuDNN-frontend's SM90 FP8 path and our BF16 lean", ""]
    L.append("Generated by `bench/peers.py --precision fp8` (do not edit between the markers; code in `bench/peers_fp8.py`); see "
             "`bench/README.md`. Re-render with `python3 bench/peers.py --precision fp8 --from-json docs/peers_fp8_results.json --out docs`.")
    L.append("")
    L.append(f"- **Command of this run**: `{env['command']}` ({env['date_utc']}, commit {env.get('git_commit', 'unknown')}, "
             f"{r.get('elapsed_s', 0):.0f} s) on {env['gpu']} ({env['sm_count']} SMs), torch {env['torch']} (CUDA {env['torch_cuda']}); "
             f"nvidia-smi: {env.get('nvidia_smi', '?')}")
    for k in keys:
        meta = r["impls"][k]
        L.append(f"- {meta['label']}: " + ("; ".join(meta["notes"]) if meta["available"] else f"unavailable: {meta['reason']}"))
    end = r.get("ceilings_end", {})
    L.append(f"- **FP8 GEMM ceiling** (`torch._scaled_mm` E4M3 x E4M3 -> bf16, 8192^3, unit scales): {_ceiling_text(ceil.get('fp8'))}; "
             f"with `use_fast_accum=True`: {_ceiling_text(ceil.get('fp8_fast'))}. The % columns of the FP8 cells use the higher, "
             f"{fp8_ceiling_tflops(ceil):.0f} TFLOP/s (again at the end of the run: {fp8_ceiling_tflops(end):.0f}). "
             f"bf16 `torch.matmul` 8192^3 (the BF16 column's %): {_ceiling_text(ceil.get('bf16'))}.")
    L.append("- **Method**: q, k, w ~ N(0,1) in bf16 (zeros replaced), q and k quantized per row to E4M3 (q_scale (B, S_q, H) per "
             "(token, head), k_scale (B, S_k, 1) per token: amax / 448), bf16 w, sm_scale 0.125, B 1, H 64; the `end` shapes use "
             "q_causal_offsets S_k - S_q - 1 (row i sees [0, i + S_k - S_q), DeepGEMM's benchmark windows). Cold: rotating input "
             "sets >= 200 MB together; warm: CUDA-graph replay (†: not capturable, back-to-back calls). Useful TFLOP/s = 2 * H * "
             "128 * visible pairs / time. Check: input set 0's output (pre-filled with NaN) on the sampled rows against an fp64 "
             f"oracle on the dequantized inputs (the BF16 column: on its bf16 inputs), rel-L2 <= {FP8_TOL:g} (BF16 {BF16_TOL:g}), "
             "exact -inf pattern, no NaN/+inf.")
    for mode, title in (("cold", "Cold (rotating inputs > L2)"), ("warm", "Warm (same inputs, CUDA-graph replay)")):
        L.append("")
        L.append(f"### {title}: median time, useful TFLOP/s, % of the FP8 GEMM ceiling (BF16 column: of the bf16 one)")
        L.append("")
        L.append("| case | visible pairs | " + " | ".join(labels[k] for k in keys) + " |")
        L.append("|---|---:|" + "---:|" * len(keys))
        for row in rows:
            L.append(f"| {row['name']} | {_fmt_pairs(row['visible_pairs'])} | " + " | ".join(_cell(row["runs"].get(k, {}), mode) for k in keys) + " |")
    L.append("")
    L.append("✗: measured, but the correctness check failed; †: not graph-captured; — (reason): not served; —: not measured (below).")
    import peers  # its report helpers (imported here: peers imports this module for --precision fp8)

    def cell(row, a, b):
        return " / ".join(f"{x:.2f}x" if x else "—" for x in (_speedup(row, a, b, m) for m in ("cold", "warm")))

    L += peers.speedup_section(rows, speedup_pairs(keys), short, cell)
    L.append("")
    L.append("### Targets (issue 22)")
    L.append("")
    L.append("Ours = the fastest dsa-indexer FP8 column of the row whose check passed (named in the cell); cells whose check failed "
             "do not count.")
    L.append("")
    L.append("| target | cold | warm |")
    L.append("|---|---|---|")
    L += [f"| {what} | {c} | {w} |" for what, c, w in targets(rows)]
    L.append("")
    L.append("### Correctness (sampled rows of input set 0 against the fp64 oracle; ours also bitwise against generic FP8 and run to run)")
    L.append("")
    L.append("| case (rows checked) | " + " | ".join(f"{labels[k]} (tol {r['impls'][k]['tol']:.0e})" for k in keys) + " |")
    L.append("|---|" + "---:|" * len(keys))
    for row in rows:
        cells = []
        for k in keys:
            run = row["runs"].get(k, {})
            ch = run.get("check")
            if not ch:
                cells.append("—")
                continue
            s = f"{ch['rel_l2']:.1e} " + ("ok" if ch["ok"] else "**FAIL**")
            if ch.get("pattern_mismatch") or ch.get("non_finite"):
                s += f", {ch['pattern_mismatch']} -inf mismatches, {ch['non_finite']} NaN/+inf"
            if "equals_generic" in run:
                s += ", = generic" if run["equals_generic"] else ", **differs from generic**"
            if "run_to_run" in run:
                s += "" if run["run_to_run"] else ", **not deterministic**"
            cells.append(s)
        L.append(f"| {row['name']} ({row.get('check_rows', '?')} rows) | " + " | ".join(cells) + " |")

    missing = peers.not_measured(r, keys, labels, rows)
    if missing:
        L.append("")
        L.append("### Not measured, not served or failed")
        L.append("")
        L += missing
    L.append(FP8_END)
    return "\n".join(L) + "\n"
