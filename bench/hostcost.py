#!/usr/bin/env python3
"""Host cost of a cache-hit call from Python, every way of calling, in one process.

What is measured: the host (CPU) time one call takes to return, with the kernel already
compiled and loaded (a kernel-cache hit), on a tiny problem so that the GPU never limits: the
`dsa-indexer jitcost` method (`tools/dsa_indexer_cli.cpp`, whose C++ figure is taken from a
child process): --batches batches of --per-batch back-to-back calls (200 stay below the launch
queue's depth, so the host never waits for the device), a device synchronize between batches,
time per call = batch wall time / calls; median and minimum over batches. Every implementation
runs the same problems in the same process:

- dsa-indexer's registered operator through `dsa_indexer.indexer_forward` (backend
  "torch.ops"), allocating its output and with `out=`, and the bare operators
  `torch.ops.dsa_indexer.indexer_forward.default` and the short forms `indexer_forward_bshd` /
  `indexer_forward_thd` that the common calls use (scores only: the dispatcher's own share);
- dsa-indexer's ctypes binding (`dsa_indexer.use_backend("ctypes")`), the same calls;
- `dsa_indexer.cudnn_compat.indexer_forward_wrapper` (the drop-in, on the operator);
- cuDNN-frontend's `indexer_forward_wrapper` (its SM90 path), from --wheels or installed;
- the C++ entry (`dsa-indexer jitcost`'s "host overhead of a cache-hit call").

Problems: BSHD B 1, S_q 64, S_k 64, H 64, D 128, ratio 2 (the CLI's jitcost case; the generic
family serves it) and THD with two segments (T_q 64, T_k 64) with host cu_seqlens (device
cu_seqlens plus CPU int32 mirrors for dsa-indexer; cuDNN-frontend takes device cu_seqlens
only and reads none on the host).

    python3 bench/hostcost.py --out OUT [--wheels DIR...] [--cli build/tools/dsa-indexer|none]

Writes OUT/hostcost.json and OUT/BENCHMARKS.md: docs/BENCHMARKS.md (or an OUT/BENCHMARKS.md
already there) with the section between the hostcost markers replaced. Re-render without a GPU:
`python3 bench/hostcost.py --from-json OUT/hostcost.json --out docs`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench"))

import peers  # noqa: E402  (write_doc, environment, run_jitcost)

BEGIN, END = "<!-- hostcost:begin -->", "<!-- hostcost:end -->"
JSON_NAME = "hostcost.json"
TARGET_US = 10.0  # issue 13: a cache-hit Python call
TARGET_VS_CUDNN = 3.0  # ... and at least 3x below cuDNN-frontend's wrapper
B, S_Q, S_K, H, D, RATIO = 1, 64, 64, 64, 128, 2
SEG_Q, SEG_K = [24, 40], [30, 34]


def per_call_us(fn, batches: int, per_batch: int, sync, keep_samples: bool = False) -> dict:
    """Median / min over batches of (wall time of per_batch calls) / per_batch, in µs (one
    untimed warm-up batch first)."""
    for _ in range(per_batch):
        fn()
    sync()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(per_batch):
            fn()
        t1 = time.perf_counter_ns()
        sync()
        samples.append((t1 - t0) / per_batch / 1e3)
    r = {"median_us": statistics.median(samples), "min_us": min(samples), "batches": batches, "per_batch": per_batch}
    if keep_samples:
        r["samples"] = samples
    return r


def interleaved_us(entries: list, batches: int, per_batch: int, sync, rounds: int = 5) -> list:
    """per_call_us over several implementations at once, in `rounds` round-robin turns of
    batches // rounds batches each, so that drift in the machine (clocks, other tenants) falls on
    all of them alike instead of on whichever was measured first. entries: (setup, fn) pairs,
    setup() run before each turn of fn (e.g. a backend switch, not timed). Returns one result
    (as per_call_us) or {"error": ...} per entry, in order."""
    rounds = max(1, min(rounds, batches))
    samples: list = [[] for _ in entries]
    per_round: list = [[] for _ in entries]  # each turn's median: paired comparisons within a turn
    errors: list = [None for _ in entries]
    for r in range(rounds):
        n = batches // rounds + (1 if r < batches % rounds else 0)
        for i, (setup, fn) in enumerate(entries):
            if errors[i] is not None:
                continue
            try:
                setup()
                res = per_call_us(fn, n, per_batch, sync, keep_samples=True)
                samples[i] += res["samples"]
                per_round[i].append(statistics.median(res["samples"]))
            except Exception as e:  # noqa: BLE001
                errors[i] = peers._err(e)
    return [{"error": err} if err is not None else
            {"median_us": statistics.median(x), "min_us": min(x), "batches": len(x), "per_batch": per_batch, "rounds": rounds,
             "round_medians_us": rm}
            for err, x, rm in zip(errors, samples, per_round)]


def problems(device: str) -> dict:
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    bf = lambda *s: torch.randn(*s, generator=g, device=device).to(torch.bfloat16)
    cu = lambda segs: [0] + [sum(segs[: i + 1]) for i in range(len(segs))]
    cu_q, cu_k = cu(SEG_Q), cu(SEG_K)
    t_q, t_k = cu_q[-1], cu_k[-1]
    return {
        "bshd": dict(q=bf(B, S_Q, H, D), k=bf(B, S_K, 1, D), w=bf(B, S_Q, H), out=torch.empty(B, S_Q, S_K, device=device)),
        "thd": dict(q=bf(t_q, H, D), k=bf(t_k, 1, D), w=bf(t_q, H), out=torch.empty(t_q, max(SEG_K), device=device),
                    cu_q=torch.tensor(cu_q, dtype=torch.int32, device=device), cu_k=torch.tensor(cu_k, dtype=torch.int32, device=device),
                    cu_q_host=torch.tensor(cu_q, dtype=torch.int32), cu_k_host=torch.tensor(cu_k, dtype=torch.int32),
                    max_q=max(SEG_Q), max_k=max(SEG_K)),
    }


def dsa_calls(p: dict) -> dict:
    """name -> zero-argument call, through dsa_indexer.indexer_forward (whatever backend is in use)."""
    import dsa_indexer

    b, t = p["bshd"], p["thd"]
    thd_kw = dict(cu_seqlens_q=t["cu_q"], cu_seqlens_k=t["cu_k"], max_seqlen_q=t["max_q"], max_seqlen_k=t["max_k"],
                  cu_seqlens_q_host=t["cu_q_host"], cu_seqlens_k_host=t["cu_k_host"])
    f = dsa_indexer.indexer_forward
    return {
        "bshd": lambda: f(b["q"], b["k"], b["w"], ratio=RATIO),
        "bshd, out=": lambda: f(b["q"], b["k"], b["w"], ratio=RATIO, out=b["out"]),
        "thd, host cu_seqlens": lambda: f(t["q"], t["k"], t["w"], ratio=RATIO, **thd_kw),
    }


def cudnn_calls(wrapper, p: dict) -> dict:
    b, t = p["bshd"], p["thd"]
    thd_kw = dict(cu_seqlens_q=t["cu_q"], cu_seqlens_k=t["cu_k"], max_seqlen_q=t["max_q"], max_seqlen_k=t["max_k"])
    return {
        "bshd": lambda: wrapper(b["q"], b["k"], b["w"], ratio=RATIO),
        "bshd, out=": lambda: wrapper(b["q"], b["k"], b["w"], ratio=RATIO, out=b["out"]),
        "thd, host cu_seqlens": lambda: wrapper(t["q"], t["k"], t["w"], ratio=RATIO, **thd_kw),
    }


def load_cudnn(wheel_dirs):
    """cuDNN-frontend's wrapper, or (None, why)."""
    import os

    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")  # as bench/peers.py
    if wheel_dirs:
        import peer_wheels

        ok, msg = peer_wheels.install([Path(d) for d in wheel_dirs], Path(tempfile.mkdtemp(prefix="dsa_hostcost_site.")))
        if not ok:
            return None, f"not installed: {msg}"
    try:
        import cudnn
        from cudnn.deepseek_sparse_attention import indexer_forward_wrapper

        return indexer_forward_wrapper, f"cudnn-frontend {cudnn.__version__}"
    except Exception as e:  # noqa: BLE001
        return None, f"import failed: {type(e).__name__}: {e}" + ("" if wheel_dirs else " (pass --wheels DIR...)")


def measure(args) -> dict:
    import torch

    import dsa_indexer
    from dsa_indexer import cudnn_compat

    sync = torch.cuda.synchronize
    p = problems("cuda")
    rows, notes, entries = [], [], []  # entries: (impl, case, setup, fn), measured interleaved
    auto, ctypes_ = (lambda: dsa_indexer.use_backend("auto")), (lambda: dsa_indexer.use_backend("ctypes"))

    backend = dsa_indexer.use_backend("auto")
    notes.append(f"dsa-indexer {dsa_indexer.version()} from {dsa_indexer.library_path()}; backend {backend.name}"
                 + (f" ({backend.path})" if backend.path else f" ({backend.reason})"))
    if backend.name == "torch.ops":
        entries += [("dsa-indexer torch.ops", case, auto, fn) for case, fn in dsa_calls(p).items()]
        b, t = p["bshd"], p["thd"]
        ops = torch.ops.dsa_indexer
        raw, raw_bshd, raw_thd = ops.indexer_forward.default, ops.indexer_forward_bshd.default, ops.indexer_forward_thd.default
        # the general operator called as dsa_indexer.indexer_forward called it before the short forms
        entries.append(("torch.ops.dsa_indexer (bare op)", "bshd", auto,
                        lambda: raw(b["q"], b["k"], b["w"], RATIO, 1.0, None, None, None, None, None, "local")))
        entries.append(("torch.ops.dsa_indexer (bare op)", "thd, host cu_seqlens", auto,
                        lambda: raw(t["q"], t["k"], t["w"], RATIO, 1.0, None, t["cu_q"], t["cu_k"], t["max_q"], t["max_k"], "local",
                                    cu_seqlens_q_host=t["cu_q_host"], cu_seqlens_k_host=t["cu_k_host"])))
        entries.append(("torch.ops.dsa_indexer (bare short op)", "bshd", auto,
                        lambda: raw_bshd(b["q"], b["k"], b["w"], RATIO, 1.0, None)))
        entries.append(("torch.ops.dsa_indexer (bare short op)", "thd, host cu_seqlens", auto,
                        lambda: raw_thd(t["q"], t["k"], t["w"], RATIO, 1.0, None, t["cu_q"], t["cu_k"], t["max_q"], t["max_k"],
                                        t["cu_q_host"], t["cu_k_host"])))
        entries.append(("dsa_indexer.cudnn_compat", "bshd", auto,
                        lambda: cudnn_compat.indexer_forward_wrapper(b["q"], b["k"], b["w"], ratio=RATIO)))
    entries += [("dsa-indexer ctypes", case, ctypes_, fn) for case, fn in dsa_calls(p).items()]
    wrapper, why = load_cudnn(args.wheels)
    notes.append(f"cuDNN-frontend: {why}")
    if wrapper is not None:
        entries += [("cuDNN-frontend SM90 wrapper", case, auto, fn) for case, fn in cudnn_calls(wrapper, p).items()]
    results = interleaved_us([(setup, fn) for _, _, setup, fn in entries], args.batches, args.per_batch, sync, args.rounds)
    dsa_indexer.use_backend("auto")
    for (impl, case, _, _), r in zip(entries, results):
        rows.append(dict(impl=impl, case=case, **r))
        shown = f"{r['median_us']:.2f} µs (min {r['min_us']:.2f})" if "median_us" in r else r["error"]
        print(f"{impl:38s} {case:24s} {shown}", flush=True)
    jit = peers.run_jitcost(argparse.Namespace(jitcost=args.cli, jitcost_timeout=args.cli_timeout))
    cpp = None
    if jit.get("host_overhead"):
        ho = jit["host_overhead"]
        cpp = dict(impl="C++ indexer_forward (dsa-indexer jitcost)", case=ho["case"], median_us=ho["median_us"], min_us=ho["min_us"],
                   batches=ho["batches"], per_batch=ho["calls_per_batch"])
        rows.append(cpp)
        print(f"{cpp['impl']:38s} {'bshd':24s} {cpp['median_us']:.2f} µs (min {cpp['min_us']:.2f})")
    else:
        notes.append(f"C++ figure: {jit.get('error') or jit.get('no_gpu_reason') or 'not in the jitcost output'}")
    env = peers.environment(argparse.Namespace())
    return {"format": 1, "environment": env, "rows": rows, "notes": notes,
            "problems": {"bshd": f"B {B}, S_q {S_Q}, S_k {S_K}, H {H}, D {D}, ratio {RATIO}",
                         "thd": f"segments q {SEG_Q}, k {SEG_K}, H {H}, D {D}, ratio {RATIO}"}}


def _find(rows, impl, case):
    return next((r for r in rows if r["impl"] == impl and r["case"] == case and "median_us" in r), None)


def render_section(r: dict) -> str:
    env, rows = r["environment"], r["rows"]
    rounds = next((row["rounds"] for row in rows if "rounds" in row), None)  # None: a run from before the turns
    L = [BEGIN, "## Host cost of a cache-hit call from Python", "",
         "Generated by `bench/hostcost.py` (do not edit between the markers); regenerate on the GPU machine with "
         "`python3 bench/hostcost.py --out docs --wheels DIR...` (`python/tests/gpu_torch_run.sh OUTDIR` runs it), or re-render "
         "with `python3 bench/hostcost.py --from-json docs/hostcost.json --out docs`.", "",
         f"- **Run**: `{env.get('command', '?')}` ({env.get('date_utc', '?')}, commit {env.get('git_commit', '?')}) on "
         f"{env.get('gpu', '?')}; Python {env.get('python', '?')}, torch {env.get('torch', '?')}",
         f"- **Problems**: BSHD {r['problems']['bshd']}; THD {r['problems']['thd']}",
         "- **Method**: host wall time per call of a kernel-cache hit, batches of back-to-back calls with a device sync "
         "between batches (below the launch queue's depth, so the host never waits for the GPU); "
         + (f"every implementation measured in {rounds} round-robin turns so that the machine's drift falls on all alike; "
            if rounds else "")
         + "median (min) over batches; "
         "the `dsa-indexer jitcost` method, whose C++ figure is in the last row.",
         *[f"- {n}" for n in r["notes"]], "",
         "| implementation | call | median | min | cuDNN-frontend / this |", "|---|---|---:|---:|---:|"]
    for row in rows:
        if "median_us" not in row:
            L.append(f"| {row['impl']} | {row['case']} | {row['error']} | | |")
            continue
        theirs = _find(rows, "cuDNN-frontend SM90 wrapper", row["case"])
        ratio = f"{theirs['median_us'] / row['median_us']:.1f}x" if theirs and not row["impl"].startswith("cuDNN") else ""
        L.append(f"| {row['impl']} | {row['case']} | {row['median_us']:.2f} µs | {row['min_us']:.2f} µs | {ratio} |")
    L += ["", f"Targets (issue 13): <= {TARGET_US:g} µs per cache-hit Python call (BSHD, and THD with host cu_seqlens), and "
          f"at least {TARGET_VS_CUDNN:g}x below cuDNN-frontend's wrapper in the same process:", ""]
    for case in ("bshd", "thd, host cu_seqlens"):
        ours = _find(rows, "dsa-indexer torch.ops", case)
        theirs = _find(rows, "cuDNN-frontend SM90 wrapper", case)
        if ours is None:
            L.append(f"- {case}: the operator was not measured (backend: see above)")
            continue
        verdict = "met" if ours["median_us"] <= TARGET_US else f"**missed** ({ours['median_us']:.2f} µs)"
        vs = "cuDNN-frontend not measured" if theirs is None else (
            f"{theirs['median_us'] / ours['median_us']:.1f}x below cuDNN-frontend: "
            + ("met" if theirs["median_us"] >= TARGET_VS_CUDNN * ours["median_us"] else "**missed**"))
        L.append(f"- {case}: {ours['median_us']:.2f} µs, {verdict}; {vs}")
    L.append(END)
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for hostcost.json and BENCHMARKS.md")
    ap.add_argument("--wheels", nargs="+", default=[], metavar="DIR", help="cuDNN-frontend's wheels (as bench/peers.py --wheels)")
    ap.add_argument("--cli", default="", help="the dsa-indexer tool for the C++ figure (default build/tools/dsa-indexer; 'none')")
    ap.add_argument("--cli-timeout", type=float, default=120.0)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--per-batch", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="round-robin turns over the implementations (the batches split among them)")
    ap.add_argument("--from-json", type=Path, help="re-render a saved run (no GPU needed)")
    args = ap.parse_args(argv)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        import torch

        if not torch.cuda.is_available():
            print("hostcost: no CUDA device", file=sys.stderr)
            return 3
        results = measure(args)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / JSON_NAME).write_text(json.dumps(results, indent=1) + "\n")
    section = render_section(results)
    doc = peers.write_doc(section, args.out, (BEGIN, END))
    print(section)
    print(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
