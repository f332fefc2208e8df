"""Top-k rows of bench/peers.py (`--op topk`; issue 20, "Speed"): dsa-indexer's indexer_topk
against the two ways a user gets top-k indices today, in the same run on the same inputs:

- ``scores_torch``: our scores (dsa_indexer.indexer_forward, automatic family, the matrix
  allocated by the call) + ``torch.topk(scores, k)``;
- ``scores_cudnn``: our scores + cuDNN-frontend's standalone radix top-k
  ``indexer_top_k_wrapper(scores2d, seq_lens, top_k=k, ..., deterministic=True)`` (SM90+; from
  the wheels of bench/requirements-peers.txt; ``deterministic`` passed when the installed
  version has it, which the notes say). seq_lens per row is max(the row's visible keys, k)
  (its kernel wants >= k valid columns; the columns past the window are our -inf), computed
  once per input set outside the timed call;
- ``dsa_topk``: ``dsa_indexer.indexer_topk(q, k, w, top_k=k, ratio=..., sm_scale=...,
  q_causal_offsets=..., ...)`` when the binding has it (branch topk-api); otherwise its cells say
  so, and the CLI's rows (``dsa-indexer bench --op topk``, passed with --topk-cli-json) carry the
  C++ path's times.

Also the selections alone on the same score matrix: ``torch.topk`` and cuDNN-frontend's top-k
(warm), against our selection kernel alone from the CLI's rows (``select_us``). Peak device
memory per path: ``torch.cuda.max_memory_allocated`` over one call, above what the inputs hold
(our top-k's workspace comes from the driver's stream-ordered pool when the binding does not take
a caller workspace: then it is added from ``indexer_topk_workspace_size`` where the binding has
it, and the cell says which). Correctness: on input set 0, every row with at least k visible keys,
the selected set of each path against ours (sorted indices; a differing set whose selected values
are equal is a tie at the k-th place, counted apart).

Shapes: tools/cli_topk.cpp topk_bench_cases (same names and order; the tests hold them equal).
Cold = rotating input sets (> 200 MB together), warm = CUDA-graph replay, as the scores rows.
"""

from __future__ import annotations

import inspect
import math
import re
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

TOPK_BEGIN, TOPK_END = "<!-- peers-topk:begin -->", "<!-- peers-topk:end -->"
TOPK_JSON = "peers_topk_results.json"
TOPK_FORMAT = 1
HEAD_DIM = 128
SM_SCALE = 0.125
PATHS = ("dsa_topk", "scores_torch", "scores_cudnn", "dsa_topk_fused")
LABELS = {"dsa_topk": "dsa-indexer indexer_topk", "dsa_topk_fused": "dsa-indexer indexer_topk, family=topk_fused", "scores_torch": "our scores + torch.topk",
          "scores_cudnn": "our scores + cuDNN-frontend top-k"}
# issue 20's targets for the unfused path
CUDNN_SLACK = 1.05  # no slower than scores + cuDNN-frontend's top-k, within 5 %
TORCH_SPEEDUP = 1.3  # >= 1.3x faster than scores + torch.topk
MEMORY_FRACTION = 1 / 8  # peak memory at most 1/8 of the scores path's at S_k >= 65536
MEMORY_SK = 65536


@dataclass
class TopkCase:
    name: str
    batch: int = 1
    s_q: int = 0  # BSHD, per batch entry
    s_k: int = 0
    ratio: int = 1
    end_at_sk: bool = False  # q_causal_offsets S_k - S_q - 1 in every batch entry
    segs: list = field(default_factory=list)  # THD (ratio 1, keys = rows per segment, local columns)
    heads: int = 64
    sm_scale: float = SM_SCALE

    @property
    def thd(self) -> bool:
        return bool(self.segs)

    @property
    def cu(self) -> list:
        out = [0]
        for s in self.segs:
            out.append(out[-1] + s)
        return out

    @property
    def rows(self) -> int:
        return sum(self.segs) if self.thd else self.batch * self.s_q

    @property
    def t_k(self) -> int:
        return sum(self.segs) if self.thd else self.batch * self.s_k

    @property
    def n_cols(self) -> int:
        return max(self.segs) if self.thd else self.s_k

    def offsets(self) -> list:
        """q_causal_offsets per batch entry / segment (zeros unless end_at_sk)."""
        n = len(self.segs) if self.thd else self.batch
        return [self.s_k - self.s_q - 1 if self.end_at_sk else 0] * n


def topk_cases(quick: bool = False) -> list:
    """The shapes of `dsa-indexer bench --op topk` (tools/cli_topk.cpp topk_bench_cases), same order."""
    cases = [
        TopkCase("topk bshd S_q 8192 S_k 16384 r1", 1, 8192, 16384, 1, True),
        TopkCase("topk bshd S_q 8192 S_k 65536 r1", 1, 8192, 65536, 1, True),
        TopkCase("topk bshd S_q 4096 S_k 131072 r1", 1, 4096, 131072, 1, True),
        TopkCase("topk bshd S_q 2048 S_k 262144 r1", 1, 2048, 262144, 1, True),
        TopkCase("topk bshd S_q 16384 S_k 4096 r4", 1, 16384, 4096, 4, False),
        TopkCase("topk bshd S_q 16384 S_k 8192 r2", 1, 16384, 8192, 2, False),
        TopkCase("topk bshd B4 S_q 4096 S_k 16384 r1", 4, 4096, 16384, 1, True),
        TopkCase("topk thd r1 3 ragged T_q 16384", segs=[5462, 8198, 2724]),
    ]
    return cases[:2] if quick else cases


def row_ends(c: TopkCase) -> list:
    """The end of every row's visible window, in its local key columns (the window is [0, end)):
    clamp(floor((offset + i + 1) / ratio), 0, S_k of the entry), in the output's row order."""
    out = []
    seg_q = c.segs if c.thd else [c.s_q] * c.batch
    seg_k = c.segs if c.thd else [c.s_k] * c.batch
    for off, sq, sk in zip(c.offsets(), seg_q, seg_k):
        out += [min(max((off + i + 1) // c.ratio, 0), sk) for i in range(sq)]
    return out


def cudnn_seq_lens(ends: list, k: int, n_cols: int) -> list:
    """seq_lens for cuDNN-frontend's top-k: each row's visible keys, raised to k (its kernel wants
    at least top_k valid columns; the ones past the window hold our -inf, so the rows with >= k
    visible keys select the same set) and never past the matrix."""
    return [min(max(e, k), n_cols) for e in ends]


def checked_rows(ends: list, k: int) -> int:
    """Rows whose selection is unique up to ties: at least k visible keys."""
    return sum(1 for e in ends if e >= k)


def memory_bytes(c: TopkCase, k: int, workspace: int) -> dict:
    """What each path must hold besides its inputs: the score matrix (scores paths) against our
    workspace + the int32 indices (the top-k path); the selections' own outputs on top."""
    scores = 4 * c.rows * c.n_cols
    idx = 4 * c.rows * k
    return {"scores_matrix": scores, "indices": idx, "dsa_topk": workspace + idx, "ratio": (workspace + idx) / scores}


# ---------------------------------------------------------------- GPU side ---------------


class Inputs:
    """One random input set (N(0,1) rounded to bf16, zeros replaced), in the call's layout."""

    def __init__(self, c: TopkCase, seed: int, device: str = "cuda"):
        import torch

        g = torch.Generator(device=device).manual_seed(seed)

        def nz(shape):
            x = torch.randn(shape, generator=g, device=device).to(torch.bfloat16)
            return torch.where(x == 0, torch.ones_like(x), x)

        H, D = c.heads, HEAD_DIM
        if c.thd:
            self.q, self.k, self.w = nz((c.rows, H, D)), nz((c.t_k, 1, D)), nz((c.rows, H))
            self.cu = torch.tensor(c.cu, dtype=torch.int32, device=device)
        else:
            self.q, self.k, self.w = nz((c.batch, c.s_q, H, D)), nz((c.batch, c.s_k, 1, D)), nz((c.batch, c.s_q, H))
        self.offsets = torch.tensor(c.offsets(), dtype=torch.int32, device=device)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.w))


def _score_kwargs(c: TopkCase, x: Inputs) -> dict:
    kw = dict(ratio=c.ratio, sm_scale=c.sm_scale)
    if c.end_at_sk:
        kw["q_causal_offsets"] = x.offsets
    if c.thd:
        kw.update(cu_seqlens_q=x.cu, cu_seqlens_k=x.cu, max_seqlen_q=c.n_cols, max_seqlen_k=c.n_cols,
                  cu_seqlens_q_host=c.cu, cu_seqlens_k_host=c.cu)
    return kw


def _scores2d(c: TopkCase, x: Inputs):
    """Our scores (the automatic family), as (rows, n_cols)."""
    import dsa_indexer

    s = dsa_indexer.indexer_forward(x.q, x.k, x.w, **_score_kwargs(c, x))
    if isinstance(s, dict) or hasattr(s, "keys"):
        s = s["scores"]
    return s.view(c.rows, c.n_cols)


def load_cudnn_topk(wheel_dirs, site_dir: Path):
    """(callable or None, notes, reason): cuDNN-frontend's indexer_top_k_wrapper from the wheels."""
    import peer_wheels

    why, notes = peer_wheels.prepare_cudnn_import(wheel_dirs, site_dir)
    if why:
        return None, notes, why
    fn, err = None, ""
    for mod in ("cudnn.deepseek_sparse_attention", "cudnn.deepseek_sparse_attention.indexer_top_k",
                "cudnn.deepseek_sparse_attention.indexer_top_k.api"):
        try:
            fn = getattr(__import__(mod, fromlist=["indexer_top_k_wrapper"]), "indexer_top_k_wrapper")
            notes.append(f"indexer_top_k_wrapper from {mod}")
            break
        except Exception as e:  # noqa: BLE001 (the last error is the reason shown)
            err = f"{type(e).__name__}: {e}"
    if fn is None:
        hint = "" if wheel_dirs else " (pass --wheels DIR... with the wheels of bench/requirements-peers.txt)"
        return None, notes, f"import failed: {err}{hint}"
    try:
        import cudnn

        notes.append(f"cudnn-frontend {cudnn.__version__}")
    except Exception:  # noqa: BLE001
        pass
    params = inspect.signature(fn).parameters
    det = "deterministic" in params
    notes.append("deterministic=True" if det else "this version has no `deterministic` argument: called without it")

    def call(scores2d, seq_lens, k):
        kw = dict(top_k=k, return_val=False)
        if det:
            kw["deterministic"] = True
        r = fn(scores2d, seq_lens, **kw)
        return r["indices"] if hasattr(r, "keys") else r[0]

    return call, notes, ""


def load_dsa_topk(family=None):
    """(callable(c, x, k) or None, notes, reason): dsa_indexer.indexer_topk when the binding has it
    (family: a top-k family asked for by name, e.g. "topk_fused"; None: automatic)."""
    import dsa_indexer

    fn = getattr(dsa_indexer, "indexer_topk", None)
    if fn is None:
        return None, [], ("this binding has no dsa_indexer.indexer_topk yet (branch topk-api); the C++ path's times are "
                          "the CLI's rows (dsa-indexer bench --op topk, --topk-cli-json)")
    params = inspect.signature(fn).parameters
    if family is not None and "family" not in params:
        return None, [], f"this binding's indexer_topk takes no family (wanted {family})"
    if family is not None and family not in dsa_indexer._lib.families("topk"):
        return None, [], f"this library has no top-k family {family}"
    fam = {} if family is None else {"family": family}
    ws_size = getattr(dsa_indexer, "indexer_topk_workspace_size", None)
    notes = [f"dsa_indexer.indexer_topk{inspect.signature(fn)}" + (f" with family={family!r}" if family else "")]

    def call(c: TopkCase, x: Inputs, k: int, workspace=None):
        kw = dict(_score_kwargs(c, x), **fam)
        if workspace is not None and "workspace" in params:
            kw["workspace"] = workspace
        r = fn(x.q, x.k, x.w, top_k=k, **kw)
        return r["indices"] if hasattr(r, "keys") else r[0] if isinstance(r, (tuple, list)) else r

    def workspace_bytes(c: TopkCase, x: Inputs, k: int):
        if ws_size is None:
            return None
        try:
            return int(ws_size(x.q, x.k, x.w, top_k=k, **_score_kwargs(c, x), **fam))
        except Exception:  # noqa: BLE001 (a binding whose size query differs: not counted, said so)
            return None

    call.workspace_bytes = workspace_bytes
    call.takes_workspace = "workspace" in params
    return call, notes, ""


def peak_bytes(fn) -> int:
    """torch.cuda.max_memory_allocated over one call of fn, above what was allocated before it."""
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def compare_sets(ref, got, scores2d, ends_t, k: int) -> dict:
    """Rows with >= k visible keys: same selected set (sorted indices), else a tie (same selected
    values) or a real difference."""
    import torch

    ref, got = ref.reshape(-1, k), got.reshape(-1, k)  # BSHD (B, S_q, k) from the binding, (rows, k) from the others
    rows = ends_t >= k
    a = torch.sort(ref[rows].long(), dim=1).values
    b = torch.sort(got[rows].long(), dim=1).values
    diff = (a != b).any(dim=1)
    n_diff = int(diff.sum())
    ties = 0
    if n_diff:
        s = scores2d[rows][diff]
        va = torch.sort(s.gather(1, a[diff].clamp(min=0)), dim=1).values
        vb = torch.sort(s.gather(1, b[diff].clamp(min=0)), dim=1).values
        ties = int((va == vb).all(dim=1).sum())
    return {"rows": int(rows.sum()), "different_sets": n_diff, "ties": ties, "ok": n_diff == ties}


def measure_topk(args, peers) -> dict:
    """The top-k rows on the GPU (peers: the bench/peers.py module, for its timers)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("peers.py --op topk: needs a CUDA GPU (use --from-json to render saved results)")
    t_start = time.perf_counter()
    res = {"format": TOPK_FORMAT, "env": peers.environment(args), "cases": [], "paths": {}, "cli": None}
    dsa_call, dsa_notes, dsa_reason = load_dsa_topk()
    fused_call, fused_notes, fused_reason = load_dsa_topk("topk_fused")
    cudnn_call, cudnn_notes, cudnn_reason = (None, [], "skipped (--skip cudnn)")
    if "cudnn" not in args.skip:
        cudnn_call, cudnn_notes, cudnn_reason = load_cudnn_topk(args.wheels, Path(args.site_dir or tempfile.mkdtemp(prefix="dsa_peers_site.")))
    import dsa_indexer

    res["paths"] = {
        "dsa_topk": {"label": LABELS["dsa_topk"], "available": dsa_call is not None, "reason": dsa_reason, "notes": dsa_notes},
        "scores_torch": {"label": LABELS["scores_torch"], "available": True, "reason": "",
                         "notes": [f"dsa-indexer {dsa_indexer.version()} scores (automatic family) + torch.topk(sorted=False)"]},
        "scores_cudnn": {"label": LABELS["scores_cudnn"], "available": cudnn_call is not None, "reason": cudnn_reason, "notes": cudnn_notes},
        "dsa_topk_fused": {"label": LABELS["dsa_topk_fused"], "available": fused_call is not None, "reason": fused_reason,
                           "notes": fused_notes},
    }
    if args.topk_cli_json:
        res["cli"] = load_cli_rows(args.topk_cli_json)
    for p, meta in res["paths"].items():
        print(f"[peers-topk] {meta['label']}: {'ok' if meta['available'] else 'UNAVAILABLE: ' + meta['reason']}", flush=True)
    out_dir = Path(args.out)
    for c in (c for c in topk_cases(args.quick) if re.search(args.match, c.name)):
        ends = row_ends(c)
        one = Inputs(c, 42)
        nsets = max(2, min(4, math.ceil(200e6 / (one.nbytes() + 4 * c.rows * c.n_cols))))
        sets = [one] + [Inputs(c, 42 + i) for i in range(1, nsets)]
        ends_t = torch.tensor(ends, dtype=torch.int32, device="cuda")
        for k in args.topk_k:
            row = {"case": asdict(c), "name": c.name, "k": k, "rows": c.rows, "n_cols": c.n_cols,
                   "checked_rows": checked_rows(ends, k), "runs": {}, "select": {}}
            seq_lens = [torch.tensor(cudnn_seq_lens(ends, k, c.n_cols), dtype=torch.int32, device="cuda") for _ in sets]
            fns = {
                "scores_torch": [lambda x=x: torch.topk(_scores2d(c, x), k, dim=1, sorted=False).indices for x in sets],
            }
            if cudnn_call is not None:
                fns["scores_cudnn"] = [lambda x=x, s=s: cudnn_call(_scores2d(c, x), s, k) for x, s in zip(sets, seq_lens)]
            ws = None
            if dsa_call is not None:
                wb = dsa_call.workspace_bytes(c, sets[0], k)
                if wb and dsa_call.takes_workspace:
                    ws = torch.empty(wb, dtype=torch.uint8, device="cuda")
                fns["dsa_topk"] = [lambda x=x: dsa_call(c, x, k, ws) for x in sets]
            if fused_call is not None:
                # where the fused path's gates refuse the shape, the call raises: the cell says so
                fns["dsa_topk_fused"] = [lambda x=x: fused_call(c, x, k) for x in sets]
            ref = None
            scores0 = _scores2d(c, sets[0])
            for p in PATHS:
                run = {}
                if p not in fns:
                    run["status"] = f"unavailable: {res['paths'][p]['reason']}"
                elif time.perf_counter() - t_start > args.max_seconds:
                    run["status"] = f"not measured: the run's time budget ({args.max_seconds:.0f} s) was spent"
                else:
                    try:
                        got = fns[p][0]()
                        torch.cuda.synchronize()
                        if p == "dsa_topk":
                            ref = got
                        run["peak_bytes"] = peak_bytes(fns[p][0])
                        if p == "dsa_topk":
                            # The workspace is part of the path's memory whoever allocates it: the
                            # caller's tensor made before the measured call, or the driver's pool.
                            wb = dsa_call.workspace_bytes(c, sets[0], k)
                            run["workspace_bytes"] = wb
                            if ws is None:
                                run["workspace_outside_torch"] = wb
                            if wb:
                                run["peak_bytes"] += wb
                        run.update(peers.time_calls(fns[p], warmup=3, budget_s=args.budget, min_reps=args.min_reps, max_reps=args.reps))
                        if "warm" not in args.skip:
                            run["warm"] = peers.time_warm(fns[p][0], run["median_us"], args)
                        run["status"] = "ok"
                        run["_got"] = got
                    except Exception as e:  # noqa: BLE001 (the failure is the cell shown)
                        run["status"] = f"failed: {peers._err(e)}"
                        run["traceback"] = traceback.format_exc()[-3000:]
                row["runs"][p] = run
            # correctness against ours (else against torch.topk)
            base = ref if ref is not None else row["runs"]["scores_torch"].get("_got")
            for p in PATHS:
                got = row["runs"][p].pop("_got", None)
                if got is not None and base is not None and got is not base:
                    row["runs"][p]["check"] = compare_sets(base, got, scores0, ends_t, k)
            # the selections alone on the same score matrix (warm: same inputs)
            sel = {"torch": lambda: torch.topk(scores0, k, dim=1, sorted=False).indices}
            if cudnn_call is not None:
                sel["cudnn"] = lambda: cudnn_call(scores0, seq_lens[0], k)
            for name, fn in sel.items():
                try:
                    row["select"][name] = peers.time_calls([fn], warmup=3, budget_s=args.budget, min_reps=args.min_reps, max_reps=args.reps)
                except Exception as e:  # noqa: BLE001
                    row["select"][name] = {"error": peers._err(e)}
            cli = cli_row(res.get("cli"), c.name, k)
            if cli:
                row["select"]["dsa"] = {"median_us": cli["select_us"], "source": "dsa-indexer bench --op topk"}
                row["cli"] = cli
            for p in PATHS:
                r = row["runs"][p]
                w = r.get("warm", {})
                print(f"[peers-topk] {c.name:<36} k {k:<5} {LABELS[p]:<34} cold {r.get('median_us', float('nan')):9.1f} us "
                      f"warm {w.get('median_us', float('nan')):9.1f} us peak {r.get('peak_bytes', 0) / 2**20:8.0f} MiB "
                      f"{r.get('check', {})} {r['status']}", flush=True)
            scores0 = ref = base = None  # the matrix and the selections of this k
            res["cases"].append(row)
            torch.cuda.empty_cache()
            peers.save_json(res, out_dir, TOPK_JSON)
            peers.write_doc(render_topk(res), out_dir, (TOPK_BEGIN, TOPK_END))
        del sets
        torch.cuda.empty_cache()
    res["elapsed_s"] = time.perf_counter() - t_start
    return res


def load_cli_rows(path) -> dict:
    import json

    try:
        d = json.loads(Path(path).read_text())
        return {"device": d.get("device"), "rows": d.get("topk_cases", []), "path": str(path)}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{path}: {type(e).__name__}: {e}", "rows": []}


def cli_row(cli, name: str, k: int):
    for r in (cli or {}).get("rows", []):
        if r.get("name") == name and r.get("k") == k:
            return r
    return None


# ---------------------------------------------------------------- report -----------------


def _t(run: dict, mode: str):
    t = run if mode == "cold" else (run.get("warm") or {})
    return t.get("median_us")


def _us(v) -> str:
    return f"{v / 1e3:.2f} ms" if v is not None and v >= 1000 else (f"{v:.0f} us" if v is not None else "—")


def _mib(b) -> str:
    return f"{b / 2**20:.0f} MiB" if b else "—"


def ratio(row: dict, a: str, b: str, mode: str):
    """time of b / time of a (> 1: a is faster), or None."""
    ta, tb = _t(row["runs"].get(a, {}), mode), _t(row["runs"].get(b, {}), mode)
    return tb / ta if ta and tb else None


def _ours(row: dict, mode: str):
    """Our top-k time: the binding's when measured, else the CLI's row of the same shape and k."""
    t = _t(row["runs"].get("dsa_topk", {}), mode)
    if t is None and row.get("cli"):
        t = row["cli"].get("topk_cold_us" if mode == "cold" else "topk_warm_us")
    return t


def targets(rows: list) -> list:
    """(what, verdict) of issue 20's targets over the rows (cold and warm)."""
    out = []
    for mode in ("cold", "warm"):
        vs_cudnn, vs_torch = [], []
        for r in rows:
            ours = _ours(r, mode)
            tc, tt = _t(r["runs"].get("scores_cudnn", {}), mode), _t(r["runs"].get("scores_torch", {}), mode)
            if ours and tc:
                vs_cudnn.append((f"{r['name']} k {r['k']}", ours / tc))
            if ours and tt:
                vs_torch.append((f"{r['name']} k {r['k']}", tt / ours))
        out.append((f"{mode}: no slower than scores + cuDNN-frontend top-k (time ratio <= {CUDNN_SLACK:.2f})",
                    _verdict(vs_cudnn, lambda v: v <= CUDNN_SLACK, "{:.2f}")))
        out.append((f"{mode}: >= {TORCH_SPEEDUP}x faster than scores + torch.topk",
                    _verdict(vs_torch, lambda v: v >= TORCH_SPEEDUP, "{:.2f}x")))
    sel = [(f"{r['name']} k {r['k']}", r["select"]["cudnn"]["median_us"] / r["select"]["dsa"]["median_us"])
           for r in rows if "median_us" in r["select"].get("dsa", {}) and "median_us" in r["select"].get("cudnn", {})]
    out.append(("our selection alone at least as fast as cuDNN-frontend's on the same score rows (speed-up >= 1)",
                _verdict(sel, lambda v: v >= 1.0, "{:.2f}x")))
    mem = []
    for r in rows:
        if r["n_cols"] < MEMORY_SK:
            continue
        ours = r["runs"].get("dsa_topk", {}).get("peak_bytes")
        if not ours and r.get("cli"):
            ours = r["cli"]["workspace_bytes"] + r["cli"]["indices_bytes"]
        base = r["runs"].get("scores_cudnn", {}).get("peak_bytes") or r["runs"].get("scores_torch", {}).get("peak_bytes")
        if ours and base:
            mem.append((f"{r['name']} k {r['k']}", ours / base))
    out.append((f"peak memory <= 1/8 of the scores path's at S_k >= {MEMORY_SK}", _verdict(mem, lambda v: v <= MEMORY_FRACTION, "{:.3f}")))
    return out


def _verdict(vals: list, ok, fmt: str) -> str:
    if not vals:
        return "not measured"
    missed = [(n, v) for n, v in vals if not ok(v)]
    if not missed:
        return f"met in all {len(vals)} rows (" + ", ".join(f"{n}: {fmt.format(v)}" for n, v in vals) + ")"
    return f"**missed** in {len(missed)} of {len(vals)}: " + "; ".join(f"{n} {fmt.format(v)}" for n, v in missed)


def render_topk(r: dict) -> str:
    env = r["env"]
    L = [TOPK_BEGIN, "## Top-k: indexer_topk against our scores + torch.topk / cuDNN-frontend's top-k", ""]
    L.append("Generated by `bench/peers.py --op topk` (do not edit between the markers); see `bench/README.md`. "
             f"Run: `{env['command']}` ({env['date_utc']}, commit {env.get('git_commit', 'unknown')}, {r.get('elapsed_s', 0):.0f} s) "
             f"on {env['gpu']} ({env['sm_count']} SMs), torch {env['torch']}.")
    for p, meta in r["paths"].items():
        L.append(f"- {meta['label']}: " + ("; ".join(meta["notes"]) if meta["available"] else f"unavailable: {meta['reason']}"))
    cli = r.get("cli")
    if cli:
        L.append(f"- dsa-indexer CLI rows (`dsa-indexer bench --op topk`): {cli.get('error') or cli.get('path')}")
    L.append("- Method: cold = rotating input sets (> 200 MB), warm = CUDA-graph replay (†: not capturable, back-to-back calls); "
             "medians of device events; peak = `torch.cuda.max_memory_allocated` over one call above the inputs "
             "(+ our workspace where it comes from the driver's pool); check = the selected sets of each path against "
             "indexer_topk's (else torch.topk's) on every row with >= k visible keys (ties at the k-th place counted apart).")
    L.append("")
    L.append("| case | k | indexer_topk (cold / warm) | + torch.topk | + cuDNN top-k | fused (cold / warm) | vs cuDNN path | "
             "vs torch path | select alone: ours / torch / cuDNN | peak: ours / scores paths | check |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in r["cases"]:
        cells = []
        for p in PATHS:
            run = row["runs"].get(p, {})
            if "median_us" in run:
                w = run.get("warm") or {}
                cells.append(f"{_us(run['median_us'])} / {_us(w.get('median_us'))}{' †' if w.get('mode') == 'loop' else ''}")
            elif p == "dsa_topk" and row.get("cli"):
                cells.append(f"{_us(row['cli']['topk_cold_us'])} / {_us(row['cli']['topk_warm_us'])} (CLI)")
            else:
                cells.append("—")
        ratios = []
        for other in ("scores_cudnn", "scores_torch"):
            v = [(_t(row["runs"].get(other, {}), m) / _ours(row, m)) if _ours(row, m) and _t(row["runs"].get(other, {}), m) else None
                 for m in ("cold", "warm")]
            ratios.append(" / ".join(f"{x:.2f}x" if x else "—" for x in v))
        sel = " / ".join(_us(row["select"].get(n, {}).get("median_us")) for n in ("dsa", "torch", "cudnn"))
        ours_run = row["runs"].get("dsa_topk", {})
        ws_note = " (workspace not seen)" if "workspace_outside_torch" in ours_run and not ours_run["workspace_outside_torch"] else ""
        ours_peak = ours_run.get("peak_bytes") or (
            row["cli"]["workspace_bytes"] + row["cli"]["indices_bytes"] if row.get("cli") else None)
        peaks = f"{_mib(ours_peak)}{ws_note} / {_mib(row['runs'].get('scores_torch', {}).get('peak_bytes'))}, " \
                f"{_mib(row['runs'].get('scores_cudnn', {}).get('peak_bytes'))}"
        checks = []
        for p in PATHS:
            ch = row["runs"].get(p, {}).get("check")
            if ch:
                checks.append(f"{'ok' if ch['ok'] else '**DIFFERS**'} {p} ({ch['different_sets']} sets differ, {ch['ties']} ties, "
                              f"of {ch['rows']} rows)")
        L.append(f"| {row['name']} | {row['k']} | " + " | ".join(cells) + f" | {ratios[0]} | {ratios[1]} | {sel} | {peaks} | "
                 + ("; ".join(checks) or "—") + " |")
    L.append("")
    L.append("vs X path: time of that path / time of indexer_topk (> 1: ours is faster), cold / warm. "
             "Our selection alone comes from the CLI's rows (same session, its own inputs of the same distribution).")
    L.append("")
    L.append("### Targets of the unfused top-k (issue 20)")
    L.append("")
    L.append("| target | result |")
    L.append("|---|---|")
    L += [f"| {what} | {v} |" for what, v in targets(r["cases"])]
    failed = [(row["name"], row["k"], p, run["status"]) for row in r["cases"] for p, run in row["runs"].items()
              if run.get("status", "ok") != "ok"]
    if failed:
        L.append("")
        L += [f"- {n} k {k}, {LABELS[p]}: {st}" for n, k, p, st in failed]
    L.append(TOPK_END)
    return "\n".join(L) + "\n"
