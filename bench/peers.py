#!/usr/bin/env python3
"""dsa-indexer against its peers on one GPU, in one run: docs/BENCHMARKS.md and a plot.

Implementations (each first checked against an fp64 PyTorch oracle on a small shape of the
same configuration: exact -inf pattern and rel-L2; one that fails, or cannot be imported or
installed, is reported with the reason, never dropped):

- dsa-indexer through the Python binding, one column per kernel family (`family=`; default
  lean, generic and auto; reference with --families). A named family whose gate fails on a
  case (lean: H 64, BSHD, S_q a multiple of 8, q-tiles x B >= the SMs, ...) raises
  UnsupportedConfig: that cell is "not served" with the library's reason;
- PyTorch eager, chunked over query rows so memory stays bounded: bf16 matmul with fp32
  output (torch.mm(..., out_dtype=float32) where available, else bf16 output upcast), relu,
  * w, sum over heads, * sm_scale, masked_fill -inf; key columns past a chunk's last window
  end are not computed; batches are taken as segments;
- a fused Triton kernel (bench/triton_indexer.py): bf16 tl.dot with fp32 accumulation, tiles
  past the causal window skipped, -inf written for every masked cell; BSHD batches as THD
  segments of equal length;
- cuDNN-frontend's SM90 `indexer_forward_wrapper` (1.32.0 takes bf16 or fp32 W), from wheels
  carried to the GPU machine (bench/requirements-peers.txt, bench/peer_wheels.py).

Shapes: those of `dsa-indexer bench` (tools/dsa_indexer_cli.cpp run_bench, same order): H 64,
D 128, B 1, sm_scale 0.125, ratio 2 with S_k = S_q/2 for S_q 2048..16384, ratio 4 with
S_k = S_q/4, then at S_q 8192 ratio 2: fp32 W, B 4, sm_scale 1, H 32, H 16; the chunked-prefill
rows (issue 23) S_q 512 and 1024 against S_k 16384 and 65536, ratio 1, q_causal_offsets
[S_k - S_q] (every row's window ends at S_k: row i sees keys [0, S_k - S_q + i + 1)); then the
THD packings; inputs N(0,1) rounded to bf16 with zeros replaced. Every implementation gets the
case's B, sm_scale and offsets (ours, cuDNN-frontend: q_causal_offsets; Triton: its offsets
argument; eager: the same window rule), and so does the oracle of its check. The largest
prefill row holds 1024 x 65536 fp32 scores (256 MiB) per input set, 2 sets; eager computes it
in chunks of 64 rows (1 GiB of fp32 logits).

Timing (CUDA events, the median of N calls; N adapts to a time budget per cell):
- cold: calls enqueued back to back over 2-4 rotating input sets of >= 200 MB together (more
  than the 60 MB L2), 3 warm-up calls;
- warm: the same inputs every call, replayed from a torch.cuda.CUDAGraph that captured up to
  10 back-to-back calls (time per call = replay time / calls), as the CLI's warm column. An
  implementation that cannot be captured is timed with plain back-to-back calls on the same
  inputs instead, and its warm cells are marked.
The bf16 GEMM ceiling (torch.matmul 8192^3) is measured in the same run. Useful TFLOP/s =
2 * H * 128 * visible (i, j) pairs / time.

Run on the GPU machine (from the repository root; the library at build/libdsa_indexer.so*):

    python3 bench/peers.py --out docs                         # peers without cuDNN-frontend
    python3 bench/peers.py --out docs --wheels .whl           # + cuDNN-frontend from wheels

Writes <out>/BENCHMARKS.md (only the part between the peers markers; the rest of an existing
file, this one or the repository's docs/BENCHMARKS.md, is kept), <out>/img/tflops_vs_sq.png
and <out>/peers_results.json. Re-render both from saved results on any machine (matplotlib
needed for the plot; results of older runs, without warm times or lean, render with those
columns blank):

    python3 bench/peers.py --from-json docs/peers_results.json --out docs

`--op topk` (bench/peers_topk.py) and `--precision fp8` (bench/peers_fp8.py: issue 22's E4M3 rows,
our FP8 families against cuDNN-frontend's SM90 FP8 path and our BF16 lean, with the
torch._scaled_mm FP8 GEMM ceiling) measure other rows into their own sections and JSON files.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

BEGIN, END = "<!-- peers:begin -->", "<!-- peers:end -->"
PLOT_NAME = "img/tflops_vs_sq.png"
JSON_NAME = "peers_results.json"
RESULTS_FORMAT = 2  # 1 (no "format" key): cold only, sm_scale 1 everywhere, S_q 512 validation shapes
HEAD_DIM = 128
DEVICE = "cuda"

# ------------------------------------------------------------------ cases ----------------

SM_SCALE = 0.125  # the CLI bench's bshd() default
# q-tiles (of 8 query rows) x B of the BSHD validation shapes: more than the H200's 132 SMs, so
# that lean takes its fused sweep (q-tiles x B >= the SMs) on the validation shape of a case
# that has that many (raised to the device's SM count on a larger GPU); a case with fewer (the
# prefill rows: lean's split variant) keeps its S_q, so its check runs the variant it is timed with.
LEAN_CHECK_TILES = 160
# The validation shape of a case with offsets keeps 1/PREFILL_CHECK_SCALE of its keys before the
# first row's own (the history, S_k - S_q at ratio 1), + 3 (a ragged S_k tail).
PREFILL_CHECK_SCALE = 16


@dataclass
class Case:
    name: str
    heads: int
    ratio: int
    s_q: int = 0  # BSHD, per batch
    s_k: int = 0
    cu_q: list = field(default_factory=list)  # THD
    cu_k: list = field(default_factory=list)
    w_f32: bool = False
    series: str = ""  # plot series ("h64r2") or ""
    batch: int = 1  # BSHD B (THD: the segments)
    sm_scale: float = SM_SCALE
    # q_causal_offsets, one per batch (THD: segment); [] (the default): not passed, all 0. Row i
    # of batch b sees keys [0, clamp(floor((offsets[b] + i + 1) / ratio), 0, S_k)).
    offsets: list = field(default_factory=list)

    def __post_init__(self):
        if self.offsets and len(self.offsets) != len(self.seg_q()) - 1:
            raise ValueError(f"Case {self.name!r}: {len(self.offsets)} offsets for {len(self.seg_q()) - 1} batches / segments")

    @property
    def thd(self) -> bool:
        return bool(self.cu_q)

    @property
    def t_q(self) -> int:
        return self.cu_q[-1] if self.thd else self.batch * self.s_q

    @property
    def t_k(self) -> int:
        return self.cu_k[-1] if self.thd else self.batch * self.s_k

    @property
    def max_q(self) -> int:
        return max(b - a for a, b in zip(self.cu_q, self.cu_q[1:])) if self.thd else self.s_q

    @property
    def n_cols(self) -> int:
        return max(b - a for a, b in zip(self.cu_k, self.cu_k[1:])) if self.thd else self.s_k

    def seg_q(self):
        """Row offsets of the segments (BSHD: the batches, S_q rows each)."""
        return list(self.cu_q) if self.thd else [b * self.s_q for b in range(self.batch + 1)]

    def seg_k(self):
        return list(self.cu_k) if self.thd else [b * self.s_k for b in range(self.batch + 1)]

    def q_offsets(self) -> list:
        """The offset of every batch / segment (zeros when the case has none)."""
        return list(self.offsets) or [0] * (len(self.seg_q()) - 1)

    def visible_pairs(self) -> int:
        from dsa_indexer import visible_pairs_thd

        return visible_pairs_thd(self.seg_q(), self.seg_k(), self.ratio, self.q_offsets())

    def flops(self) -> float:
        return 2.0 * self.heads * HEAD_DIM * self.visible_pairs()

    def dims(self) -> str:
        off = ""
        if self.offsets:
            off = f", offset {self.offsets[0]}" if len(set(self.offsets)) == 1 else f", offsets {self.offsets}"
        if self.thd:
            return f"cu_q {self.cu_q}, cu_k {self.cu_k}{off}"
        return (f"B {self.batch}, " if self.batch != 1 else "") + f"S_q {self.s_q}, S_k {self.s_k}{off}"


def thd_case(name: str, seg_q: list, ratio: int, heads: int = 64) -> Case:
    cu_q, cu_k = [0], [0]
    for s in seg_q:
        cu_q.append(cu_q[-1] + s)
        cu_k.append(cu_k[-1] + s // ratio)
    return Case(name, heads, ratio, cu_q=cu_q, cu_k=cu_k)


def bench_cases(quick: bool) -> list[Case]:
    """The shapes of `dsa-indexer bench` (tools/dsa_indexer_cli.cpp run_bench), same order."""
    cases = [Case(f"bshd H64 r2 S_q {s}", 64, 2, s, s // 2, series="h64r2") for s in (2048, 4096, 8192, 16384)]
    cases += [Case(f"bshd H64 r4 S_q {s}", 64, 4, s, s // 4, series="h64r4") for s in (4096, 8192, 16384)]
    cases += [
        Case("bshd H64 r2 S_q 8192 fp32-W", 64, 2, 8192, 4096, w_f32=True),
        Case("bshd H64 r2 S_q 8192 B4", 64, 2, 8192, 4096, batch=4),
        Case("bshd H64 r2 S_q 8192 scale1", 64, 2, 8192, 4096, sm_scale=1.0),
        Case("bshd H32 r2 S_q 8192", 32, 2, 8192, 4096),
        Case("bshd H16 r2 S_q 8192", 16, 2, 8192, 4096),
    ]
    # Chunked prefill (issue 23): q-tiles x B below the SMs, the rows ending at S_k (ratio 1,
    # offset S_k - S_q); lean by name serves them with its split variant.
    cases += [Case(f"bshd H64 prefill S_q {sq} S_k {sk}", 64, 1, sq, sk, offsets=[sk - sq]) for sk in (16384, 65536) for sq in (512, 1024)]
    # THD, local columns (the CLI's thd_packing): segments of s query and s // ratio key rows
    for t_q in (8192, 16384):
        for ratio in (2, 4):
            m = t_q // 8192
            cases.append(thd_case(f"thd H64 r{ratio} 3 ragged T_q {t_q}", [2731 * m, 4099 * m, 1362 * m], ratio))
            cases.append(thd_case(f"thd H64 r{ratio} 8 segs T_q {t_q}",
                                  [v * m for v in (1500, 700, 2100, 300, 1200, 900, 1100, 392)], ratio))
    cases.append(thd_case("thd H64 r2 1 seg T_q 8192", [8192], 2))
    # THD at H 32 and 16 (lean's q-tiles of 16 and 32 tokens)
    for h in (32, 16):
        cases.append(thd_case(f"thd H{h} r2 3 ragged T_q 8192", [2731, 4099, 1362], 2, h))
        cases.append(thd_case(f"thd H{h} r4 8 segs T_q 8192", [1500, 700, 2100, 300, 1200, 900, 1100, 392], 4, h))
    return cases[:4] if quick else cases


def _shifted_offsets(c: Case, seg_q: list, seg_k: list) -> list:
    """The offsets of a validation shape with segments seg_q / seg_k: each batch / segment keeps
    its distance from the bottom-right alignment (offset S_k * ratio - S_q, whose last row ends at
    S_k), so rows that end at S_k in the case end at S_k in its validation shape."""
    if not c.offsets:
        return []
    old_q, old_k = c.seg_q(), c.seg_k()
    out = []
    for b, o in enumerate(c.offsets):
        old_end = (old_k[b + 1] - old_k[b]) * c.ratio - (old_q[b + 1] - old_q[b])
        new_end = (seg_k[b + 1] - seg_k[b]) * c.ratio - (seg_q[b + 1] - seg_q[b])
        out.append(o - old_end + new_end)
    return out


def small_case(c: Case, q_tiles: int = LEAN_CHECK_TILES) -> Case:
    """The validation shape of a case: same H, ratio, W dtype, B, sm_scale and layout. BSHD:
    S_q = 8 * ceil(q_tiles / B) (enough q-tiles for lean's fused sweep), or the case's S_q where
    it has fewer (the prefill rows: lean's split variant, as in the timed call); a ragged S_k
    tail: S_q / ratio + 3, plus, with offsets, 1/PREFILL_CHECK_SCALE of the keys before the first
    row's own (S_k - S_q / ratio); THD: the segments scaled down by an integer factor to >= 8 *
    q_tiles packed rows, ragged keys (one more per segment boundary). Offsets keep each batch's
    / segment's distance from the bottom-right alignment (rows ending at S_k still do)."""
    kw = dict(w_f32=c.w_f32, batch=c.batch, sm_scale=c.sm_scale)
    if c.thd:
        f = max(1, c.t_q // (8 * q_tiles))
        cu_q, cu_k = [v // f for v in c.cu_q], [v // f + (v > 0) for v in c.cu_k]
        return Case(c.name + " (check)", c.heads, c.ratio, cu_q=cu_q, cu_k=cu_k, offsets=_shifted_offsets(c, cu_q, cu_k), **kw)
    s_q = min(c.s_q, 8 * -(-q_tiles // c.batch))
    s_k = s_q // c.ratio + 3
    if c.offsets:
        s_k += max(0, c.s_k * c.ratio - c.s_q) // c.ratio // PREFILL_CHECK_SCALE
    seg_q, seg_k = [b * s_q for b in range(c.batch + 1)], [b * s_k for b in range(c.batch + 1)]
    return Case(c.name + " (check)", c.heads, c.ratio, s_q, s_k, offsets=_shifted_offsets(c, seg_q, seg_k), **kw)


def legacy_small_dims(case: dict) -> str:
    """The validation shape of results written before the check recorded it (S_q 512)."""
    if case.get("cu_q"):
        return f"cu_q {[v // 16 for v in case['cu_q']]}, cu_k {[v // 16 + (v > 0) for v in case['cu_k']]}"
    return f"S_q 512, S_k {512 // case['ratio'] + 3}"


# ------------------------------------------------------------------ inputs ---------------


class Inputs:
    """One random input set in the native layout plus packed (THD-like) views and metadata."""

    def __init__(self, c: Case, seed: int, device: str):
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def nonzero_bf16(shape):
            x = torch.randn(shape, generator=g, device=device).to(torch.bfloat16)
            return torch.where(x == 0, torch.ones_like(x), x)

        H, D = c.heads, HEAD_DIM
        if c.thd:
            self.q = nonzero_bf16((c.t_q, H, D))
            self.k = nonzero_bf16((c.t_k, 1, D))
            self.w = nonzero_bf16((c.t_q, H))
            self.out = torch.empty((c.t_q, c.n_cols), dtype=torch.float32, device=device)
        else:
            B = c.batch
            self.q = nonzero_bf16((B, c.s_q, H, D))
            self.k = nonzero_bf16((B, c.s_k, 1, D))
            self.w = nonzero_bf16((B, c.s_q, H))
            self.out = torch.empty((B, c.s_q, c.s_k), dtype=torch.float32, device=device)
        if c.w_f32:
            self.w = self.w.float()
        # Packed views: BSHD batch b is segment b (rows [b S_q, (b+1) S_q), keys [b S_k, ...)),
        # with local columns; out (B, S_q, S_k) is then (B S_q, S_k).
        self.q3 = self.q.reshape(c.t_q, H, D)
        self.k2 = self.k.reshape(c.t_k, D)
        self.w2 = self.w.reshape(c.t_q, H)
        self.out2 = self.out.view(c.t_q, c.n_cols)
        self.cu_q_host = c.seg_q()
        self.cu_k_host = c.seg_k()
        self.cu_q = torch.tensor(self.cu_q_host, dtype=torch.int32, device=device)
        self.cu_k = torch.tensor(self.cu_k_host, dtype=torch.int32, device=device)
        self.offsets_host = c.q_offsets()  # q_causal_offsets (zeros when the case has none)
        self.offsets = torch.tensor(self.offsets_host, dtype=torch.int32, device=device)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.w, self.out))


# ------------------------------------------------------------------ implementations ------


class Unavailable(Exception):
    """An implementation that cannot run a case; the message is the reason shown."""


@dataclass
class Impl:
    key: str
    label: str
    tol: float  # rel-L2 accepted on the validation shape
    make: object = None  # (case, inputs) -> zero-argument callable writing inputs.out (case.sm_scale, case.batch)
    available: bool = True
    reason: str = ""
    notes: list = field(default_factory=list)
    unsupported: object = None  # (case) -> "" or the reason this implementation cannot run it


def not_served_reason(message: str) -> str:
    """The failed gate of an UnsupportedConfig message, without the call and family prefix."""
    import re

    return re.sub(r"^indexer_forward: (family \w+: )?", "", message.strip().splitlines()[0] if message.strip() else "")


def dsa_impl(family: str) -> Impl:
    import dsa_indexer

    label = f"dsa-indexer {family}"
    try:
        version = dsa_indexer.version()
    except Exception as e:  # noqa: BLE001 (the loader's error is the reason shown)
        return Impl(f"dsa_{family}", label, 2e-7, available=False, reason=f"library not loaded: {e}")
    names = dsa_indexer._lib.families("scores")  # the library's registry: "auto" and the family names
    if family not in names:
        return Impl(f"dsa_{family}", label, 2e-7, available=False,
                    reason=f"this binding has no family {family!r} (it has {', '.join(names)})")

    def make(c: Case, x: Inputs):
        kw = dict(ratio=c.ratio, sm_scale=c.sm_scale, out=x.out, family=family)
        if c.offsets:
            kw["q_causal_offsets"] = x.offsets
        if c.thd:
            kw.update(cu_seqlens_q=x.cu_q, cu_seqlens_k=x.cu_k, max_seqlen_q=c.max_q, max_seqlen_k=c.n_cols,
                      cu_seqlens_q_host=x.cu_q_host, cu_seqlens_k_host=x.cu_k_host)
        return lambda: dsa_indexer.indexer_forward(x.q, x.k, x.w, **kw)

    impl = Impl(f"dsa_{family}", label, 2e-7, make)
    impl.notes.append(f"library {version} from {dsa_indexer.library_path()}")
    return impl


def _mm_fp32_out():
    """torch.mm with fp32 output from bf16 inputs if this torch has it (out_dtype), else None."""
    import torch

    a = torch.ones((16, 16), dtype=torch.bfloat16, device=DEVICE)
    try:
        r = torch.mm(a, a, out_dtype=torch.float32)
        if r.dtype == torch.float32:
            return lambda x, y: torch.mm(x, y, out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError):
        pass
    return None


def eager_impl() -> Impl:
    import torch

    mm32 = _mm_fp32_out()
    impl = Impl("eager", "PyTorch eager", 1e-5 if mm32 else 2e-2)
    if mm32 is None:
        impl.notes.append("torch.mm has no out_dtype here: logits are bf16-rounded (tolerance 2e-2)")
        mm32 = lambda x, y: torch.mm(x, y).float()  # noqa: E731
    else:
        impl.notes.append("torch.mm(bf16, bf16, out_dtype=float32)")
    budget = 1 << 30  # bytes of fp32 logits per chunk

    def forward(c: Case, x: Inputs):
        H, sm_scale = c.heads, c.sm_scale
        neg = float("-inf")
        for b in range(len(x.cu_q_host) - 1):
            q0, q1 = x.cu_q_host[b], x.cu_q_host[b + 1]
            k0, k1 = x.cu_k_host[b], x.cu_k_host[b + 1]
            len_k = k1 - k0
            off = x.offsets_host[b]
            rows = max(1, budget // (4 * H * max(len_k, 1)))
            for r0 in range(0, q1 - q0, rows):
                r1 = min(r0 + rows, q1 - q0)
                ke_last = min(max((off + r1) // c.ratio, 0), len_k)  # window end of the chunk's last row
                dst = x.out2[q0 + r0 : q0 + r1]
                if ke_last == 0:
                    dst.fill_(neg)
                    continue
                logits = mm32(x.q3[q0 + r0 : q0 + r1].reshape(-1, HEAD_DIM), x.k2[k0 : k0 + ke_last].t())
                s = logits.view(r1 - r0, H, ke_last).relu_().mul_(x.w2[q0 + r0 : q0 + r1].float()[:, :, None]).sum(1)
                if sm_scale != 1.0:
                    s.mul_(sm_scale)
                i = torch.arange(r0, r1, device=s.device)
                ke = torch.clamp(torch.div(off + i + 1, c.ratio, rounding_mode="floor"), 0, len_k)
                s.masked_fill_(torch.arange(ke_last, device=s.device)[None, :] >= ke[:, None], neg)
                dst[:, :ke_last] = s
                dst[:, ke_last:] = neg

    impl.make = lambda c, x: (lambda: forward(c, x))
    return impl


def triton_impl() -> Impl:
    try:
        import triton

        from triton_indexer import indexer_forward_triton
    except Exception as e:  # noqa: BLE001
        return Impl("triton", "Triton (fused)", 1e-5, available=False, reason=f"import failed: {e}")

    def make(c: Case, x: Inputs):
        # BSHD batches are segments of equal length (x.cu_q = [0, S_q, 2 S_q, ...]); x.offsets
        # holds the case's offsets (zeros when it has none).
        return lambda: indexer_forward_triton(x.q3, x.k2, x.w2, x.out2, x.cu_q, x.cu_k, x.offsets, c.max_q, c.ratio, c.sm_scale)

    def unsupported(c: Case) -> str:
        return "" if all(m % c.heads == 0 for m in (128, 256)) else f"H {c.heads} does not divide the tile rows (128, 256)"

    impl = Impl("triton", "Triton (fused)", 1e-5, make, unsupported=unsupported)
    impl.notes.append(f"triton {triton.__version__}, autotuned over bench/triton_indexer.py CONFIGS per (S_k, S_q, H)")
    return impl


def cudnn_impl(wheel_dirs, site_dir: Path) -> Impl:
    label = "cuDNN-frontend SM90"
    import peer_wheels

    why, notes = peer_wheels.prepare_cudnn_import(wheel_dirs, site_dir)
    if why:
        return Impl("cudnn", label, 1e-5, available=False, reason=why)
    try:
        import cudnn
        from cudnn.deepseek_sparse_attention import indexer_forward_wrapper
    except Exception as e:  # noqa: BLE001
        hint = "" if wheel_dirs else " (pass --wheels DIR... with the wheels of bench/requirements-peers.txt)"
        return Impl("cudnn", label, 1e-5, available=False, reason=f"import failed: {type(e).__name__}: {e}{hint}")
    try:
        import cutlass

        notes.append(f"cudnn-frontend {cudnn.__version__}, nvidia-cutlass-dsl {getattr(cutlass, '__version__', '?')}")
    except Exception:  # noqa: BLE001
        notes.append(f"cudnn-frontend {cudnn.__version__}")

    def make(c: Case, x: Inputs):
        # BSHD (B, S_q, H, D) with any B and sm_scale a runtime argument (not in its compile key);
        # q_causal_offsets int32 (B,) / (n_seg,) on the device, passed only where the case has
        # offsets (whether they are given is in its compile key).
        kw = dict(ratio=c.ratio, sm_scale=c.sm_scale)
        if c.offsets:
            kw["q_causal_offsets"] = x.offsets
        if c.thd:
            kw.update(cu_seqlens_q=x.cu_q, cu_seqlens_k=x.cu_k, max_seqlen_q=c.max_q, max_seqlen_k=c.n_cols)
        return lambda: indexer_forward_wrapper(x.q, x.k, x.w, out=x.out, **kw)

    def unsupported(c: Case) -> str:
        return "" if c.heads in (16, 32, 64) else f"its SM90 kernel takes H 16, 32 or 64, not {c.heads}"

    impl = Impl("cudnn", label, 1e-5, make, unsupported=unsupported)
    impl.notes += notes
    return impl


# ------------------------------------------------------------------ measuring ------------


def check(impl: Impl, c: Case, device: str, q_tiles: int = LEAN_CHECK_TILES, cache: dict | None = None) -> dict:
    """Runs `impl` on the validation shape of `c` (outputs pre-filled with NaN) and compares
    with the fp64 oracle. `cache` keeps each validation shape's inputs and oracle for the
    next implementation."""
    import torch

    from dsa_indexer.reference import compare, indexer_forward_reference

    s = small_case(c, q_tiles)
    hit = cache.get(s.name) if cache is not None else None
    if hit is None:
        x = Inputs(s, seed=7, device=device)
        kw = dict(ratio=s.ratio, sm_scale=s.sm_scale)
        if s.offsets:
            kw["q_causal_offsets"] = x.offsets
        if s.thd:
            kw.update(cu_seqlens_q=x.cu_q, cu_seqlens_k=x.cu_k, max_seqlen_q=s.max_q, max_seqlen_k=s.n_cols)
        hit = (x, indexer_forward_reference(x.q, x.k, x.w, **kw))
        if cache is not None:
            cache.clear()  # one shape at a time
            cache[s.name] = hit
    x, ref = hit
    x.out.fill_(float("nan"))
    res = impl.make(s, x)()
    got = x.out
    if isinstance(res, dict) or hasattr(res, "keys"):
        res = res["scores"]
    if isinstance(res, torch.Tensor) and res.data_ptr() != x.out.data_ptr():
        got = res
    torch.cuda.synchronize()
    r = compare(got.reshape(ref.shape), ref)
    r["ok"] = r["pattern_mismatch"] == 0 and r["non_finite"] == 0 and r["rel_l2"] <= impl.tol
    r["shape"] = s.name
    r["dims"] = s.dims()
    r["tol"] = impl.tol
    return r


def time_calls(fns, warmup: int, budget_s: float, min_reps: int, max_reps: int) -> dict:
    """Median device time of fns[i % len(fns)]() over N back-to-back calls with events."""
    import torch

    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fns[0]()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, budget_s / one)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    us = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return {"median_us": statistics.median(us), "min_us": min(us), "reps": reps}


PER_GRAPH = 10  # calls captured in one warm graph (as the CLI's time_forward_graph), fewer for slow calls


def time_graph(fn, one_us: float, budget_s: float, min_reps: int, max_reps: int) -> dict:
    """Median device time per call of `fn` on the same inputs, replayed from a CUDA graph of
    `per_graph` captured back-to-back calls. Raises when `fn` cannot be captured."""
    import torch

    per_graph = max(1, min(PER_GRAPH, int(20e3 / max(one_us, 1.0))))  # a replay of ~20 ms at most
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (torch's recipe), same inputs
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    caller = torch.cuda.current_stream()
    try:
        try:
            # thread_local: as the CLI's capture (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                for _ in range(per_graph):
                    fn()
        except BaseException:
            # torch.cuda.graph's __exit__ leaves its capture stream current when capture_end raises
            torch.cuda.set_stream(caller)
            raise
        for _ in range(2):
            g.replay()
        torch.cuda.synchronize()
        reps = int(min(max_reps, max(min_reps, budget_s / (per_graph * one_us * 1e-6))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            starts[i].record()
            g.replay()
            ends[i].record()
        torch.cuda.synchronize()
        us = [s.elapsed_time(e) * 1e3 / per_graph for s, e in zip(starts, ends)]
    finally:
        del g
    return {"median_us": statistics.median(us), "min_us": min(us), "reps": reps, "per_graph": per_graph, "mode": "graph"}


def time_warm(fn, one_us: float, args) -> dict:
    """Warm time: a CUDA-graph replay; if `fn` cannot be captured, back-to-back calls on the
    same inputs (mode "loop", the capture's error kept)."""
    import torch

    try:
        return time_graph(fn, one_us, args.budget, args.min_reps, args.reps)
    except Exception as e:  # noqa: BLE001 (the fallback below is labelled with it)
        err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 (an error of the failed capture surfacing here)
        pass
    t = time_calls([fn], warmup=3, budget_s=args.budget, min_reps=args.min_reps, max_reps=args.reps)
    t.update(mode="loop", graph_error=err)
    return t


def gemm_ceiling(n: int = 8192, reps: int = 10) -> dict:
    import torch

    a = torch.randn((n, n), device=DEVICE).to(torch.bfloat16)
    b = torch.randn((n, n), device=DEVICE).to(torch.bfloat16)
    t = time_calls([lambda: torch.matmul(a, b)], warmup=3, budget_s=0.0, min_reps=reps, max_reps=reps)
    t["tflops"] = 2.0 * n**3 / (t["median_us"] * 1e-6) / 1e12
    t["n"] = n
    return t


def environment(args) -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    env = {
        "gpu": p.name,
        "sm_count": p.multi_processor_count,
        "compute_capability": f"{p.major}.{p.minor}",
        "memory_gib": round(p.total_memory / 2**30, 1),
        "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    try:
        q = "name,driver_version,clocks.max.sm,clocks.sm,clocks.max.mem,power.limit"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        env["nvidia_smi"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else f"unavailable: {out.stderr.strip()}"
    except Exception as e:  # noqa: BLE001
        env["nvidia_smi"] = f"unavailable: {e}"
    try:
        # DSA_BENCH_COMMIT: the commit of a working tree copied without its current .git
        env["git_commit"] = os.environ.get("DSA_BENCH_COMMIT") or subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        env["git_commit"] = "unknown"
    return env


def run_jitcost(args) -> dict:
    """`dsa-indexer jitcost --json`: cold NVRTC compile per variant, disk-cache hit, module load,
    host overhead per call and per stage, device memory allocated. Run in a child process (its
    own runtime and an empty temporary cache directory) before the peers are measured."""
    if args.jitcost == "none":
        return {"error": "not run (--jitcost none)"}
    exe = Path(args.jitcost) if args.jitcost else REPO / "build" / "tools" / "dsa-indexer"
    if not exe.exists():
        return {"error": f"not run: {exe} not found (build the tools, or pass --jitcost PATH)"}
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dsa_jitcost_") as tmp:
        js = Path(tmp) / "jitcost.json"
        (Path(tmp) / "cache").mkdir()  # jitcost makes its private directory inside an existing one
        cmd = [str(exe), "jitcost", "--json", str(js), "--cache-dir", str(Path(tmp) / "cache")]
        t0 = time.perf_counter()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.jitcost_timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"`{' '.join(cmd[:2])}` timed out after {args.jitcost_timeout:.0f} s"}
        shown = "dsa-indexer jitcost --json FILE --cache-dir EMPTY_TMP_DIR"
        if out.returncode != 0 or not js.exists():
            tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
            return {"error": f"`{shown}` exited {out.returncode}: {' / '.join(tail)}"}
        r = json.loads(js.read_text())
        r["command"] = shown
        r["elapsed_s"] = time.perf_counter() - t0
        r["log"] = out.stdout[-4000:]
        return r


def _err(e: Exception) -> str:
    msg = str(e).strip()
    return f"{type(e).__name__}: {msg.splitlines()[0] if msg else ''}"[:400]


def _rates(t: dict, c: Case, ceiling_tflops: float) -> dict:
    t["tflops"] = c.flops() / (t["median_us"] * 1e-6) / 1e12
    t["pct_ceiling"] = 100.0 * t["tflops"] / ceiling_tflops
    return t


def measure_cell(im: Impl, c: Case, row_sets: list, args, ceiling_tflops: float, q_tiles: int, check_cache: dict) -> dict:
    """One (case, implementation) cell: check, cold time, warm time. `row_sets` holds the
    case's rotating input sets, created by the first implementation that needs them."""
    from dsa_indexer.errors import UnsupportedConfig

    run: dict = {}
    why = im.unsupported(c) if im.unsupported else ""
    if why:
        run["status"] = f"unavailable for this case: {why}"
        return run
    try:
        run["check"] = check(im, c, DEVICE, q_tiles, check_cache)
    except UnsupportedConfig as e:
        run["status"] = f"not served: {not_served_reason(str(e))}"
        return run
    except Exception as e:  # noqa: BLE001 (the failure is the result shown)
        run["status"] = f"check failed to run: {_err(e)}"
        run["traceback"] = traceback.format_exc()[-3000:]
        return run
    try:
        if not row_sets:
            one = Inputs(c, seed=42, device=DEVICE)
            nsets = max(2, min(4, math.ceil(200e6 / one.nbytes())))
            row_sets += [one] + [Inputs(c, seed=42 + i, device=DEVICE) for i in range(1, nsets)]
        fns = [im.make(c, x) for x in row_sets]
        run.update(_rates(time_calls(fns, warmup=3, budget_s=args.budget, min_reps=args.min_reps, max_reps=args.reps), c, ceiling_tflops))
    except UnsupportedConfig as e:
        run["status"] = f"not served: {not_served_reason(str(e))}"
        return run
    except Exception as e:  # noqa: BLE001
        run["status"] = f"failed: {_err(e)}"
        run["traceback"] = traceback.format_exc()[-3000:]
        return run
    run["status"] = "ok" if run["check"]["ok"] else "measured, but the correctness check FAILED"
    if "warm" in args.skip:
        return run
    try:
        run["warm"] = _rates(time_warm(fns[0], run["median_us"], args), c, ceiling_tflops)
    except Exception as e:  # noqa: BLE001
        run["warm"] = {"error": f"warm timing failed: {_err(e)}"}
        run["warm_traceback"] = traceback.format_exc()[-3000:]
    return run


def measure(args) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("peers.py: needs a CUDA GPU (use --from-json to render saved results)")
    _library_from_args(args)
    t_start = time.perf_counter()
    results = {"format": RESULTS_FORMAT, "env": environment(args), "cases": [], "impls": {}, "skipped": []}
    q_tiles = max(LEAN_CHECK_TILES, results["env"]["sm_count"])
    results["method"] = {"per_graph": PER_GRAPH, "capture_error_mode": "thread_local", "check_q_tiles": q_tiles,
                         "budget_s": args.budget, "min_reps": args.min_reps, "max_reps": args.reps}
    results["jitcost"] = run_jitcost(args)
    print(f"[peers] jitcost: {results['jitcost'].get('error') or 'measured in %.1f s' % results['jitcost']['elapsed_s']}", flush=True)
    impls = [dsa_impl(f) for f in args.families]
    if "eager" not in args.skip:
        impls.append(eager_impl())
    if "triton" not in args.skip:
        impls.append(triton_impl())
    if "cudnn" not in args.skip:
        impls.append(cudnn_impl(args.wheels, Path(args.site_dir or tempfile.mkdtemp(prefix="dsa_peers_site."))))
    for im in impls:
        results["impls"][im.key] = {"label": im.label, "available": im.available, "reason": im.reason, "notes": im.notes, "tol": im.tol}
        print(f"[peers] {im.label}: {'ok' if im.available else 'UNAVAILABLE: ' + im.reason}", flush=True)
    results["ceiling"] = gemm_ceiling()
    ceiling = results["ceiling"]["tflops"]
    print(f"[peers] bf16 GEMM ceiling: {ceiling:.1f} TFLOP/s", flush=True)

    out_dir = Path(args.out)
    check_cache: dict = {}
    for c in (c for c in bench_cases(args.quick) if re.search(args.match, c.name)):
        row = {"case": asdict(c), "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(), "series": c.series,
               "s_q": c.t_q if c.thd else c.s_q, "runs": {}}
        sets: list = []
        for im in impls:
            if not im.available:
                run = {"status": f"unavailable: {im.reason}"}
            elif time.perf_counter() - t_start > args.max_seconds:
                run = {"status": f"not measured: the run's time budget ({args.max_seconds:.0f} s) was spent"}
            else:
                run = measure_cell(im, c, sets, args, ceiling, q_tiles, check_cache)
            row["runs"][im.key] = run
            w = run.get("warm", {})
            msg = (f"cold {run.get('median_us', float('nan')):9.1f} us {run.get('tflops', float('nan')):6.1f} TF/s  "
                   f"warm {w.get('median_us', float('nan')):9.1f} us {w.get('tflops', float('nan')):6.1f} TF/s {w.get('mode', '')}")
            rel = run.get("check", {}).get("rel_l2", float("nan"))
            print(f"[peers] {c.name:<30} {im.label:<24} {msg}  rel-L2 {rel:.2e}  {run['status']}", flush=True)
            if w.get("graph_error"):
                print(f"[peers]   not graph-captured: {w['graph_error']}", flush=True)
        del sets
        check_cache.clear()
        torch.cuda.empty_cache()
        results["cases"].append(row)
        save_json(results, out_dir)  # partial results (and doc) survive a kill
        write_doc(render_section(results), out_dir)
    results["ceiling_end"] = gemm_ceiling()
    results["triton_configs"] = _triton_configs()
    results["elapsed_s"] = time.perf_counter() - t_start
    return results


def _triton_configs():
    try:
        from triton_indexer import best_config

        return best_config()
    except Exception:  # noqa: BLE001
        return {}


# ------------------------------------------------------------------ report ---------------


def save_json(results: dict, out_dir: Path, name: str = JSON_NAME) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / name).write_text(json.dumps(results, indent=1) + "\n")  # key order is the column order


def _fmt_pairs(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


LEAN, GENERIC, AUTO, CUDNN = "dsa_lean", "dsa_generic", "dsa_auto", "cudnn"
TFLOPS_TARGET_CASE = "bshd H64 r2 S_q 8192"
NOT_SERVED = "not served: "


def case_from_dict(d: dict) -> Case:
    """A Case from its JSON form (older files lack batch and sm_scale: the defaults)."""
    names = {f.name for f in fields(Case)}
    return Case(**{k: v for k, v in d.items() if k in names})


def _timing(run: dict, mode: str):
    """The cold (top level, as in older files) or warm timing dict of a run, or None."""
    t = run if mode == "cold" else run.get("warm") or {}
    return t if "median_us" in t else None


def _check_flag(*runs) -> str:
    return "" if all(r.get("check", {}).get("ok") for r in runs) else " ✗"


def _loop_flag(mode: str, *runs) -> str:
    return " †" if mode == "warm" and any((r.get("warm") or {}).get("mode") == "loop" for r in runs) else ""


def _cell(run: dict, mode: str) -> str:
    t = _timing(run, mode)
    if t:
        return f"{t['median_us']:.1f} us · {t['tflops']:.0f} TF/s · {t['pct_ceiling']:.0f}%{_check_flag(run)}{_loop_flag(mode, run)}"
    st = run.get("status", "")
    if st.startswith(NOT_SERVED):
        return f"— ({st[len(NOT_SERVED):]})"
    return "—"


def speedup(row: dict, a: str, b: str, mode: str):
    """Time of b / time of a (> 1: a is faster) in `mode`, or None."""
    ta, tb = _timing(row["runs"].get(a, {}), mode), _timing(row["runs"].get(b, {}), mode)
    return tb["median_us"] / ta["median_us"] if ta and tb else None


def _speedup_cell(row: dict, a: str, b: str) -> str:
    out = []
    for mode in ("cold", "warm"):
        v = speedup(row, a, b, mode)
        ra, rb = row["runs"].get(a, {}), row["runs"].get(b, {})
        out.append(f"{v:.2f}x{_check_flag(ra, rb)}{_loop_flag(mode, ra, rb)}" if v else "—")
    return " / ".join(out)


def speedup_section(rows: list, pairs: list, short: dict, cell) -> list:
    """The speed-up table's lines (none without pairs): a row per case, a column per (a, b) pair,
    cell(row, a, b) its text (the bf16 and FP8 reports flag their cells differently)."""
    if not pairs:
        return []
    L = ["", "### Speed-ups (time of the second / time of the first; > 1: the first is faster), cold / warm", ""]
    L.append("| case | " + " | ".join(f"{short[a]} vs {short[b]}" for a, b in pairs) + " |")
    L.append("|---|" + "---:|" * len(pairs))
    for row in rows:
        L.append(f"| {row['name']} | " + " | ".join(cell(row, a, b) for a, b in pairs) + " |")
    return L


def speedup_pairs(keys: list) -> list:
    """(a, b) columns of the speed-up table: lean (else generic) against every other
    implementation but auto, then generic against cuDNN-frontend."""
    base = LEAN if LEAN in keys else GENERIC if GENERIC in keys else None
    if base is None:
        return []
    pairs = [(base, k) for k in keys if k not in (base, AUTO)]
    if base == LEAN and GENERIC in keys and CUDNN in keys:
        pairs.append((GENERIC, CUDNN))
    return pairs


# The project's targets for lean (docs/DESIGN.md): (what, measured value, threshold, format).
# A value is value(row, mode, rows) -> float or None (the row does not count).
def _is_thd(row: dict) -> bool:
    return bool(row["case"].get("cu_q"))


def _is_prefill(row: dict) -> bool:
    """A row with q_causal_offsets (the chunked-prefill rows): no target of its own yet, and
    counted in none of the others (they are about full causal problems from token 0)."""
    return bool(row["case"].get("offsets"))


def _full_bshd(row: dict) -> bool:
    return not _is_thd(row) and not _is_prefill(row)


def _full_thd(row: dict) -> bool:
    return _is_thd(row) and not _is_prefill(row)


def _lean_vs(peer: str, pred):
    def value(row: dict, mode: str, rows: list):
        del rows
        if not pred(row) or any(not row["runs"].get(k, {}).get("check", {}).get("ok") for k in (LEAN, peer)):
            return None
        return speedup(row, LEAN, peer, mode)

    return value


def _lean_tflops(row: dict, mode: str, rows: list):
    del rows
    run = row["runs"].get(LEAN, {})
    t = _timing(run, mode)
    return t["tflops"] if t and row["name"] == TFLOPS_TARGET_CASE and run.get("check", {}).get("ok") else None


def _lean_thd_vs_bshd(row: dict, mode: str, rows: list):
    """Useful TFLOP/s of lean on a one-segment THD row over lean on the BSHD row of the same S_q
    and ratio (the same work)."""
    if not _is_thd(row) or len(row["case"]["cu_q"]) != 2:
        return None
    twin = next((r for r in rows if r["name"] == f"bshd H64 r{row['case']['ratio']} S_q {row['s_q']}"), None)
    runs = [x["runs"].get(LEAN, {}) for x in (row, twin)] if twin else []
    if not runs or any(not r.get("check", {}).get("ok") for r in runs):
        return None
    t = [_timing(r, mode) for r in runs]
    return t[0]["tflops"] / t[1]["tflops"] if all(t) else None


def _row_sq(row: dict) -> int:
    return row["case"]["s_q"] if not row["case"].get("cu_q") else row["s_q"]


TARGETS = [
    ("lean >= 1.3x cuDNN-frontend at S_q >= 4096 (BSHD)", _lean_vs(CUDNN, lambda row: _full_bshd(row) and _row_sq(row) >= 4096), 1.3, "{:.2f}x"),
    ("lean >= 1.2x cuDNN-frontend at S_q 2048 (BSHD)", _lean_vs(CUDNN, lambda row: _full_bshd(row) and _row_sq(row) < 4096), 1.2, "{:.2f}x"),
    ("lean >= 1.15x generic (BSHD)", _lean_vs(GENERIC, _full_bshd), 1.15, "{:.2f}x"),
    (f"lean >= 650 TFLOP/s at {TFLOPS_TARGET_CASE} (H 64, ratio 2, B 1)", _lean_tflops, 650.0, "{:.0f} TF/s"),
    ("lean THD >= 1.3x cuDNN-frontend THD (local columns)", _lean_vs(CUDNN, _full_thd), 1.3, "{:.2f}x"),
    ("lean THD >= 1.15x generic THD", _lean_vs(GENERIC, _full_thd), 1.15, "{:.2f}x"),
    ("lean THD (one segment) TFLOP/s >= 0.95x lean BSHD of the same shape", _lean_thd_vs_bshd, 0.95, "{:.3f}x"),
]


def _target_cell(rows: list, value, threshold: float, fmt: str, mode: str) -> str:
    vals = [(row["name"], v) for row in rows if (v := value(row, mode, rows)) is not None]
    if not vals:
        return "not measured"
    missed = [(n, v) for n, v in vals if v < threshold]
    if len(vals) == 1:
        return f"{fmt.format(vals[0][1])} " + ("met" if not missed else "**missed**")
    if not missed:
        n, v = min(vals, key=lambda t: t[1])
        return f"met in all {len(vals)} cases (lowest {fmt.format(v)}: {n})"
    return f"**missed** in {len(missed)} of {len(vals)}: " + "; ".join(f"{n} {fmt.format(v)}" for n, v in missed)


def _method(r: dict) -> str:
    if r.get("format", 1) < 2:
        return ("the shapes of `dsa-indexer bench` (D 128, B 1, no offsets, sm_scale 1, inputs N(0,1) in bf16 without zeros); "
                "CUDA events around each call, calls enqueued back to back over 2-4 rotating input sets of >= 200 MB together "
                "(L2 is 60 MB), 3 warm-up calls, median of N calls (N adapts to a time budget per cell; in the JSON). "
                "This run predates the warm timing and the lean family.")
    m = r.get("method", {})
    return ("the shapes of `dsa-indexer bench` (D 128, no offsets but in the prefill rows (ratio 1, q_causal_offsets S_k - S_q: "
            "every row's window ends at S_k; not counted in the targets below), B 1 but in the B4 case, sm_scale 0.125 but in the scale1 "
            "case (1, as the CLI's), THD with local columns and host cu_seqlens, inputs N(0,1) in bf16 without zeros), every implementation "
            "given the case's B, sm_scale and offsets; "
            "CUDA events, median of N (N adapts to a time budget per cell; in the JSON). **Cold**: calls enqueued back to back over "
            "2-4 rotating input sets of >= 200 MB together (L2 is 60 MB), 3 warm-up calls. **Warm**: the same inputs every call, "
            f"a `torch.cuda.CUDAGraph` of up to {m.get('per_graph', PER_GRAPH)} back-to-back captured calls replayed "
            f"(capture_error_mode {m.get('capture_error_mode', 'thread_local')}; time per call = replay time / calls), as the "
            "CLI's warm column; † marks an implementation that could not be captured, timed instead with back-to-back calls "
            "on the same inputs (its launch cost then shows where it exceeds the kernel time).")


def not_measured(r: dict, keys: list, labels: dict, rows: list) -> list:
    """The report's lines for what a table does not show: an implementation that is not available
    (its reason), and each status other than ok, or warm-time problem, with the cases it hit."""
    missing = []
    for k in keys:
        if not r["impls"][k]["available"]:
            missing.append(f"- {labels[k]}: {r['impls'][k]['reason']}")
            continue
        by_status: dict[str, list[str]] = {}
        for row in rows:
            run = row["runs"].get(k, {})
            st = run.get("status", "")
            if st and st != "ok":
                by_status.setdefault(st, []).append(row["name"])
            w = run.get("warm") or {}
            if w.get("graph_error"):
                by_status.setdefault(f"warm time not graph-captured (†): {w['graph_error']}", []).append(row["name"])
            if w.get("error"):
                by_status.setdefault(w["error"], []).append(row["name"])
        for st, names in by_status.items():
            where = "every case" if len(names) == len(rows) else ", ".join(names)
            missing.append(f"- {labels[k]} ({where}): {st}")
    return missing


def render_section(r: dict) -> str:
    env, ceil = r["env"], r["ceiling"]
    keys = list(r["impls"])
    labels = {k: r["impls"][k]["label"] for k in keys}
    short = {k: labels[k].replace("dsa-indexer ", "") if k.startswith("dsa_") else labels[k] for k in keys}
    rows = r["cases"]
    any_warm = any(_timing(run, "warm") for row in rows for run in row["runs"].values())
    L = [BEGIN, "## dsa-indexer and its peers", ""]
    L.append(
        "Generated by `bench/peers.py` (do not edit between the markers), JIT costs included. Regenerate on the GPU machine with "
        "`python3 bench/peers.py --out docs --wheels DIR...` (the wheels of `bench/requirements-peers.txt`; see `bench/README.md`), "
        "or re-render from the saved `docs/peers_results.json` with `python3 bench/peers.py --from-json docs/peers_results.json --out docs`."
    )
    L.append("")
    L.append(f"- **Command of this run**: `{env['command']}` ({env['date_utc']}, commit {env.get('git_commit', 'unknown')}, {r.get('elapsed_s', 0):.0f} s)")
    L.append(
        f"- **Hardware**: {env['gpu']}, {env['sm_count']} SMs, compute capability {env['compute_capability']}, "
        f"{env['memory_gib']} GiB, L2 {env['l2_mib']} MiB; nvidia-smi (name, driver, max SM clock, SM clock, max memory clock, power limit): {env['nvidia_smi']}"
    )
    sw = [f"Python {env['python']}", f"torch {env['torch']} (CUDA {env['torch_cuda']})"]
    seen_notes = set()
    for k in keys:
        for n in r["impls"][k]["notes"]:
            if n not in seen_notes:
                seen_notes.add(n)
                sw.append(f"{labels[k].split(' ')[0] if k.startswith('dsa_') else labels[k]}: {n}")
    L.append("- **Software**: " + "; ".join(sw))
    end = r.get("ceiling_end", {})
    L.append(
        f"- **Ceiling**: bf16 `torch.matmul` {ceil['n']}^3, median of {ceil['reps']}: {ceil['median_us']:.0f} us = "
        f"**{ceil['tflops']:.0f} TFLOP/s** (again at the end of the run: {end.get('tflops', float('nan')):.0f} TFLOP/s)"
    )
    L.append(
        "- **Method**: " + _method(r) + " Useful TFLOP/s = 2 * H * 128 * visible pairs / time; % = of the ceiling above. "
        "Every implementation writes every output cell (cuDNN-frontend pre-fills -inf itself, inside the timed call)."
    )
    titles = {"cold": "Cold (rotating inputs > L2): median time, useful TFLOP/s, % of the bf16 GEMM ceiling",
              "warm": "Warm (same inputs, CUDA-graph replay): median time per call, useful TFLOP/s, % of the bf16 GEMM ceiling"}
    for mode in ("cold", "warm"):
        L.append("")
        L.append(f"### {titles[mode]}")
        L.append("")
        if mode == "warm" and not any_warm:
            L.append("Not measured in this run (it predates the warm timing, or ran with `--skip warm`).")
            continue
        L.append("| case | visible pairs | " + " | ".join(labels[k] for k in keys) + " |")
        L.append("|---|---:|" + "---:|" * len(keys))
        for row in rows:
            cells = [_cell(row["runs"].get(k, {}), mode) for k in keys]
            L.append(f"| {row['name']} | {_fmt_pairs(row['visible_pairs'])} | " + " | ".join(cells) + " |")
    L.append("")
    L.append("✗: measured, but the implementation failed its correctness check (below); † (warm): not graph-captured, back-to-back "
             "calls on the same inputs; — (reason): the family does not serve the case; —: not measured (reasons below).")
    L += speedup_section(rows, speedup_pairs(keys), short, _speedup_cell)
    if LEAN in keys:
        L.append("")
        L.append("### Targets of the lean family")
        L.append("")
        L.append("Cells whose correctness check failed are not counted; — above (not served, not measured) neither.")
        L.append("")
        L.append("| target | cold | warm |")
        L.append("|---|---|---|")
        for what, value, threshold, fmt in TARGETS:
            L.append(f"| {what} | " + " | ".join(_target_cell(rows, value, threshold, fmt, mode) for mode in ("cold", "warm")) + " |")
    L.append("")
    L.append("### Correctness on the validation shape of each case (fp64 PyTorch oracle on the same bf16 inputs)")
    L.append("")
    L.append("rel-L2 over the visible cells; the -inf pattern must match exactly; outputs are pre-filled with NaN to catch unwritten cells.")
    L.append("")
    L.append("| case (validation shape) | " + " | ".join(f"{labels[k]} (tol {r['impls'][k]['tol']:.0e})" for k in keys) + " |")
    L.append("|---|" + "---:|" * len(keys))
    for row in rows:
        dims = next((run["check"]["dims"] for run in row["runs"].values() if run.get("check", {}).get("dims")), None)
        if dims is None:
            dims = legacy_small_dims(row["case"]) if r.get("format", 1) < 2 else small_case(case_from_dict(row["case"])).dims()
        cells = []
        for k in keys:
            run = row["runs"].get(k, {})
            ch = run.get("check")
            if not ch:
                cells.append("— (not served)" if run.get("status", "").startswith(NOT_SERVED) else "—")
                continue
            verdict = "ok" if ch["ok"] else "**FAIL**"
            extra = "" if ch["pattern_mismatch"] == 0 and ch["non_finite"] == 0 else f", {ch['pattern_mismatch']} -inf mismatches, {ch['non_finite']} NaN/+inf"
            cells.append(f"{ch['rel_l2']:.1e} {verdict}{extra}")
        L.append(f"| {row['name']} ({dims}) | " + " | ".join(cells) + " |")
    missing = not_measured(r, keys, labels, rows)
    if missing:
        L.append("")
        L.append("### Not measured, not served, failed or not graph-captured")
        L.append("")
        L += missing
    if r.get("triton_configs"):
        L.append("")
        L.append("Triton autotuner picks (key: S_k, S_q, H): " + "; ".join(f"{k} -> {v}" for k, v in r["triton_configs"].items()))
    L.append("")
    L.append(f"![useful TFLOP/s vs S_q, H 64, ratio 2, cold and warm]({PLOT_NAME})")
    L += render_jitcost(r.get("jitcost"))
    L.append(END)
    return "\n".join(L) + "\n"


# DESIGN section 5 / issue 6 targets.
JIT_TARGETS = {"compile_s": 1.5, "load_ms": 5.0, "overhead_us": 5.0}


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else f"**missed by {value - target:.2g} ({100 * (value / target - 1):.0f} %)**"


def render_jitcost(j) -> list:
    L = ["", "### JIT costs (targets: cold compile <= 1.5 s, disk load <= 5 ms, host overhead <= 5 µs, no memory allocated per call)", ""]
    if not j:
        return L + ["Not measured: this run predates the JIT-costs measurement."]
    if j.get("error"):
        return L + [f"Not measured: {j['error']}."]
    L.append(f"Measured by `{j['command']}` (in-process NVRTC {j['nvrtc']}, `-arch=sm_90a`) {j.get('run_note', 'in the same run')}, on {j.get('gpu') or 'no GPU'}. "
             "Compiles run one after the other in one process, so the first pays NVRTC's start-up and the front-end work on the shared headers.")
    L.append("")
    L.append("| variant | cold compile | disk-cache hit (read + size, sha256, key, NVRTC checks) | cubin |")
    L.append("|---|---:|---:|---:|")
    worst = 0.0
    for c in j["compiles"]:
        worst = max(worst, c["compile_s"])
        L.append(f"| `{c['family']}.{c['variant']}` | {c['compile_s']:.3f} s | {c['disk_hit_ms']:.2f} ms | {c['cubin_bytes'] / 1024:.1f} KiB |")
    L.append("")
    rows = [("slowest cold compile", f"{worst:.3f} s", _verdict(worst, JIT_TARGETS["compile_s"]))]
    if j.get("gpu"):
        ml, ho = j["module_load"], j["host_overhead"]
        rows.append((f"`cuModuleLoadData` of `{ml['variant']}` ({ml['cubin_bytes'] / 1024:.1f} KiB), median of 5", f"{ml['median_ms']:.2f} ms", ""))
        rows.append(("disk-cache hit + module load", f"{ml['disk_hit_plus_load_ms']:.2f} ms", _verdict(ml["disk_hit_plus_load_ms"], JIT_TARGETS["load_ms"])))
        rows.append((f"host overhead of a cache-hit call ({ho['case']}; {ho['batches']} batches of {ho['calls_per_batch']} back-to-back calls, "
                     f"a device sync between batches; median over batches, min {ho['min_us']:.2f} µs)", f"{ho['median_us']:.2f} µs",
                     _verdict(ho["median_us"], JIT_TARGETS["overhead_us"])))
        rows.append((f"device memory allocated by the library over {ho['batches'] * ho['calls_per_batch']} calls (cuMemGetInfo before/after)",
                     f"{ho['allocated_bytes']} bytes", "met" if ho["allocated_bytes"] == 0 else "**missed**"))
    else:
        rows.append(("module load, host overhead, memory", f"not measured: {j.get('no_gpu_reason', 'no GPU')}", ""))
    L.append("| what | measured | target |")
    L.append("|---|---:|---|")
    L += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    if j.get("stages"):
        L.append("")
        L.append("Where a cache-hit call's host time goes (each stage timed alone, same batches). `launch` reuses the previous call's "
                 "tensor maps when base and shape repeat; `tma` is what encoding both costs when they do not; `driver` is "
                 "`cuLaunchKernelEx` alone, the part no library can remove; `stream` is the whole call on a created stream:")
        L.append("")
        L.append("| stage | what | median | min |")
        L.append("|---|---|---:|---:|")
        L += [f"| {x['name']} | {x['what']} | {x['median_us']:.3f} µs | {x['min_us']:.3f} µs |" for x in j["stages"]]
    return L


def write_doc(section: str, out_dir: Path, markers: tuple = (BEGIN, END)) -> Path:
    """Replaces the section between `markers` of <out>/BENCHMARKS.md (else of the repository's
    docs/BENCHMARKS.md, copied) or appends it; the rest of the file is kept as it is. The
    section starts with markers[0] and ends with markers[1]."""
    begin, end = markers
    target = out_dir / "BENCHMARKS.md"
    base = target if target.exists() else REPO / "docs" / "BENCHMARKS.md"
    text = base.read_text() if base.exists() else "# Benchmarks\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    out_dir.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def plot(r: dict, out_dir: Path) -> Path | None:
    """Useful TFLOP/s vs S_q of the H 64 ratio-2 B 1 cases, every implementation: a cold panel
    and, when the run has warm times, a warm panel with the same colours."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"[peers] no plot: {e}", file=sys.stderr)
        return None
    rows = [row for row in r["cases"] if row["series"] == "h64r2"]
    modes = ["cold"] + (["warm"] if any(_timing(run, "warm") for row in rows for run in row["runs"].values()) else [])
    fig, axes = plt.subplots(1, len(modes), figsize=(7.5 * len(modes), 4.8), dpi=130, sharey=True, squeeze=False)
    markers = "osD^v<>p*"
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    ceil = r["ceiling"]["tflops"]
    xs = [row["s_q"] for row in rows]
    for ax, mode in zip(axes[0], modes):
        for i, (k, meta) in enumerate(r["impls"].items()):
            pts = [(row["s_q"], t["tflops"]) for row in rows if (t := _timing(row["runs"].get(k, {}), mode))]
            if not pts:
                continue
            failed = any(not row["runs"][k].get("check", {}).get("ok", False) for row in rows if _timing(row["runs"].get(k, {}), mode))
            loop = mode == "warm" and any((row["runs"].get(k, {}).get("warm") or {}).get("mode") == "loop" for row in rows)
            label = meta["label"] + (" (check failed)" if failed else "") + (" (not graph-captured)" if loop else "")
            lean = k == LEAN
            ax.plot(*zip(*pts), marker=markers[i % len(markers)], color=colors[i % len(colors)], label=label,
                    linewidth=2.4 if lean else 1.4, zorder=3 if lean else 2)
        ax.axhline(ceil, color="k", linestyle="--", linewidth=1, label=f"bf16 GEMM ceiling ({ceil:.0f})")
        if LEAN in r["impls"]:
            ax.axhline(650, color="grey", linestyle=":", linewidth=1, label="lean target at S_q 8192 (650)")
        ax.set_xscale("log", base=2)
        if xs:
            ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("S_q (S_k = S_q / 2, H 64, D 128, ratio 2, B 1)")
        ax.set_title({"cold": "cold: rotating inputs > L2", "warm": "warm: same inputs, CUDA-graph replay"}[mode], fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("useful TFLOP/s")
    fig.suptitle(f"DSA indexer forward on {r['env']['gpu']}")
    path = out_dir / PLOT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def parse_args(argv=None):
    """The command line (validated; argparse exits 2 on a bad one)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs", help="directory for BENCHMARKS.md, img/ and the JSON (default docs)")
    ap.add_argument("--wheels", nargs="+", default=[], metavar="DIR",
                    help="folders of cuDNN-frontend wheels or of bench/peer_wheels.py parts, installed with pip --target")
    ap.add_argument("--site-dir", default=None, help="pip --target of --wheels (default: a private tempfile.mkdtemp directory)")
    ap.add_argument("--library", default="", help="path of libdsa_indexer.so (default: $DSA_INDEXER_LIBRARY, else build/)")
    ap.add_argument("--families", type=lambda s: [f for f in s.split(",") if f], default=["lean", "generic", "auto"],
                    help="dsa-indexer families, comma-separated, in column order: lean, generic, auto, reference (default lean,generic,auto)")
    ap.add_argument("--skip", type=lambda s: [f for f in s.split(",") if f], default=[],
                    help="what to leave out, comma-separated: eager, triton, cudnn (peers), warm (the CUDA-graph timing), "
                         "bf16, deepgemm, compat (--precision fp8: our BF16 lean column, DeepGEMM's, our deepgemm_compat drop-in's)")
    ap.add_argument("--reps", type=int, default=30, help="most timed calls per cell")
    ap.add_argument("--min-reps", type=int, default=5, help="fewest timed calls per cell")
    ap.add_argument("--budget", type=float, default=0.6, help="seconds of timed calls per cell (sets N)")
    ap.add_argument("--max-seconds", type=float, default=500, help="stop starting new cells after this many seconds")
    ap.add_argument("--quick", action="store_true", help="only the first 4 cases (--op topk: 2; --precision fp8: the headline one)")
    ap.add_argument("--match", default="", help="only the cases whose name matches this regular expression (e.g. '^thd')")
    ap.add_argument("--jitcost", default="", metavar="PATH|none",
                    help="the dsa-indexer tool whose `jitcost` fills the JIT-costs table (default build/tools/dsa-indexer; none: skip)")
    ap.add_argument("--jitcost-timeout", type=float, default=300)
    ap.add_argument("--from-json", default="", help="render the doc and plot from saved results; measure nothing")
    ap.add_argument("--op", choices=("scores", "topk"), default="scores",
                    help="scores (the default: the rows above) or topk: indexer_topk against our scores + torch.topk and + "
                         "cuDNN-frontend's top-k (bench/peers_topk.py; its own section of BENCHMARKS.md and peers_topk_results.json)")
    ap.add_argument("--topk-k", type=_topk_ks, default=[2048, 512], help="the k of the top-k rows, comma-separated (default 2048,512)")
    ap.add_argument("--topk-cli-json", default="", metavar="FILE",
                    help="the JSON of `dsa-indexer bench --op topk --json FILE` of the same session: our selection kernel alone, "
                         "and the C++ path's times where the binding has no indexer_topk")
    ap.add_argument("--precision", choices=("bf16", "fp8"), default="bf16",
                    help="bf16 (the default: the rows above) or fp8: issue 22's E4M3 rows (bench/peers_fp8.py): our FP8 "
                         "families against cuDNN-frontend's SM90 FP8 path and our BF16 lean, the torch._scaled_mm FP8 GEMM "
                         "ceiling; their own section of BENCHMARKS.md and peers_fp8_results.json. Scores only (--op scores); "
                         "eager and Triton have no FP8 column")
    args = ap.parse_args(argv)
    bad = [f for f in args.families if f not in ("lean", "generic", "auto", "reference")]
    if bad:
        ap.error(f"--families: unknown {', '.join(bad)} (choose from lean, generic, auto, reference)")
    bad = [f for f in args.skip if f not in ("eager", "triton", "cudnn", "warm", "bf16", "deepgemm", "compat")]
    if bad:
        ap.error(f"--skip: unknown {', '.join(bad)} (choose from eager, triton, cudnn, warm, bf16, deepgemm, compat)")
    if args.precision == "fp8" and args.op != "scores":
        ap.error(f"--precision fp8 runs the scores rows only; --op {args.op} is for bf16 inputs")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.out)
    if args.op == "topk":
        return main_topk(args, out_dir)
    if args.precision == "fp8":
        return main_fp8(args, out_dir)
    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        results = measure(args)
        save_json(results, out_dir)
    doc = write_doc(render_section(results), out_dir)
    img = plot(results, out_dir)
    if not args.from_json and LEAN in results["impls"]:
        for what, value, threshold, fmt in TARGETS:
            cells = [_target_cell(results["cases"], value, threshold, fmt, mode) for mode in ("cold", "warm")]
            print(f"[peers] target {what}: cold {cells[0]}; warm {cells[1]}", flush=True)
    print(f"[peers] wrote {doc}" + (f", {img}" if img else "") + (f", {out_dir / JSON_NAME}" if not args.from_json else ""))
    return 0


def _topk_ks(text: str) -> list:
    ks = [int(v) for v in text.split(",") if v.strip()] if re.fullmatch(r"[0-9, ]+", text) else []
    if not ks or any(k < 1 or k > 2048 for k in ks):
        raise argparse.ArgumentTypeError(f"expected a comma list of integers in [1, 2048], got {text!r}")
    return ks


def _library_from_args(args) -> None:
    if args.library:
        os.environ["DSA_INDEXER_LIBRARY"] = args.library
    elif "DSA_INDEXER_LIBRARY" not in os.environ:
        found = sorted((REPO / "build").glob("libdsa_indexer.so*"))
        if found and not (REPO / "build" / "libdsa_indexer.so").exists():
            os.environ["DSA_INDEXER_LIBRARY"] = str(found[-1])


def main_fp8(args, out_dir: Path) -> int:
    """--precision fp8: measure (or re-render) the FP8 rows into their own section and JSON."""
    import peers_fp8

    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        _library_from_args(args)
        results = peers_fp8.measure_fp8(args, sys.modules[__name__])
        save_json(results, out_dir, peers_fp8.FP8_JSON)
    doc = write_doc(peers_fp8.render_fp8(results), out_dir, (peers_fp8.FP8_BEGIN, peers_fp8.FP8_END))
    if not args.from_json:
        for what, cold, warm in peers_fp8.targets(results["cases"]):
            print(f"[peers-fp8] target {what}: cold {cold}; warm {warm}", flush=True)
    print(f"[peers-fp8] wrote {doc}" + (f", {out_dir / peers_fp8.FP8_JSON}" if not args.from_json else ""))
    return 0


def main_topk(args, out_dir: Path) -> int:
    """--op topk: measure (or re-render) the top-k rows into their own section and JSON."""
    import peers_topk

    if args.from_json:
        results = json.loads(Path(args.from_json).read_text())
    else:
        if args.library:
            os.environ["DSA_INDEXER_LIBRARY"] = args.library
        elif "DSA_INDEXER_LIBRARY" not in os.environ:
            found = sorted((REPO / "build").glob("libdsa_indexer.so*"))
            if found and not (REPO / "build" / "libdsa_indexer.so").exists():
                os.environ["DSA_INDEXER_LIBRARY"] = str(found[-1])
        results = peers_topk.measure_topk(args, sys.modules[__name__])
        save_json(results, out_dir, peers_topk.TOPK_JSON)
    doc = write_doc(peers_topk.render_topk(results), out_dir, (peers_topk.TOPK_BEGIN, peers_topk.TOPK_END))
    for what, verdict in peers_topk.targets(results["cases"]):
        print(f"[peers-topk] target {what}: {verdict}", flush=True)
    print(f"[peers-topk] wrote {doc}" + (f", {out_dir / peers_topk.TOPK_JSON}" if not args.from_json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
