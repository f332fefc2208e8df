"""Tests of the GPU-free parts of bench/: wheel packing for the GPU machine, the shape list
(kept in step with `dsa-indexer bench`), visible-pair counts and the BENCHMARKS.md section
rewrite. Standard library only (no torch, no GPU)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))

import peer_wheels  # noqa: E402
import peers  # noqa: E402


# ---------------------------------------------------------------- wheels --------------------


def _fake_wheels(d, sizes):
    d.mkdir()
    blobs = {}
    for i, n in enumerate(sizes):
        data = os.urandom(n)
        name = f"pkg{i}-1.0-py3-none-any.whl"
        (d / name).write_bytes(data)
        blobs[name] = data
    return blobs


def test_pack_splits_within_limit_and_reassembles(tmp_path):
    mib = peer_wheels.MIB
    blobs = _fake_wheels(tmp_path / "src", [mib // 2, 3 * mib + 5, 7, mib])
    parts = peer_wheels.pack(tmp_path / "src", tmp_path / "parts", part_mib=1.25)
    assert len(parts) == 4  # 4.5 MiB + 12 B in parts of 1.25 MiB
    for p in parts:
        payload = sum(f.stat().st_size for f in p.iterdir() if f.name != peer_wheels.MANIFEST)
        assert payload <= 1.25 * mib
        assert (p / peer_wheels.MANIFEST).exists()
    wheels, problems = peer_wheels.assemble(parts, tmp_path / "work")
    assert problems == []
    assert {w.name: w.read_bytes() for w in wheels} == blobs


def test_assemble_reports_a_missing_part(tmp_path):
    _fake_wheels(tmp_path / "src", [3 * peer_wheels.MIB])
    parts = peer_wheels.pack(tmp_path / "src", tmp_path / "parts", part_mib=1)
    wheels, problems = peer_wheels.assemble(parts[:-1], tmp_path / "work")
    assert wheels == [] and len(problems) == 1 and "expected" in problems[0]


def test_assemble_reports_a_corrupt_chunk(tmp_path):
    _fake_wheels(tmp_path / "src", [2 * peer_wheels.MIB])
    parts = peer_wheels.pack(tmp_path / "src", tmp_path / "parts", part_mib=1)
    chunk = next(f for f in parts[0].iterdir() if ".part-" in f.name)
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))
    wheels, problems = peer_wheels.assemble(parts, tmp_path / "work")
    assert wheels == [] and "sha256" in problems[0]


def test_stage_then_assemble_from_two_places(tmp_path):
    blobs = _fake_wheels(tmp_path / "src", [peer_wheels.MIB * 2 + 3])
    parts = peer_wheels.pack(tmp_path / "src", tmp_path / "parts", part_mib=1.5)
    peer_wheels.stage(parts[:1], tmp_path / "stage")
    wheels, problems = peer_wheels.assemble([tmp_path / "stage", *parts[1:]], tmp_path / "work")
    assert problems == [] and [w.read_bytes() for w in wheels] == list(blobs.values())


def test_requirements_are_pinned_with_hashes():
    lines = [
        l for l in (REPO_ROOT / "bench" / "requirements-peers.txt").read_text().splitlines() if l and not l.startswith("#")
    ]
    assert lines
    for line in lines:
        assert re.fullmatch(r"[a-z0-9-]+==[0-9][0-9a-z.]* --hash=sha256:[0-9a-f]{64}", line), line


# ---------------------------------------------------------------- shapes --------------------


def test_cases_match_the_cli_bench():
    src = (REPO_ROOT / "tools" / "dsa_indexer_cli.cpp").read_text()
    body = src[src.index("int run_bench(") :]
    body = body[: body.index("\n}\n")]
    r2 = re.search(r"for \(int64_t sq : \{([0-9, ]+)\}\) cases.push_back\(\{fmt::format\(\"bshd H64 r2", body)
    r4 = re.search(r"for \(int64_t sq : \{([0-9, ]+)\}\) cases.push_back\(\{fmt::format\(\"bshd H64 r4", body)
    cu_q = re.search(r"p\.cu_q = \{([0-9, ]+)\}", body)
    cu_k = re.search(r"p\.cu_k = \{([0-9, ]+)\}", body)
    ints = lambda m: [int(v) for v in m.group(1).split(",")]  # noqa: E731
    cases = peers.bench_cases(quick=False)
    assert [c.s_q for c in cases if c.name.startswith("bshd H64 r2 S_q") and not c.w_f32] == ints(r2)
    assert [c.s_q for c in cases if c.name.startswith("bshd H64 r4")] == ints(r4)
    thd = [c for c in cases if c.thd]
    assert len(thd) == 1 and thd[0].cu_q == ints(cu_q) and thd[0].cu_k == ints(cu_k)
    for c in cases:  # every case of the CLI, by name
        assert c.name.split(" S_q ")[0] in body or c.name in body, c.name
    assert len(cases) == body.count("cases.push_back") + len(ints(r2)) + len(ints(r4)) - 2


def _pairs_brute(seg_q, seg_k, ratio):
    n = 0
    for b in range(len(seg_q) - 1):
        sq, sk = seg_q[b + 1] - seg_q[b], seg_k[b + 1] - seg_k[b]
        for i in range(sq):
            n += sum(1 for j in range(sk) if j < (i + 1) // ratio)
    return n


@pytest.mark.parametrize("case", [peers.Case("a", 64, 2, 40, 20), peers.Case("b", 64, 4, 33, 5), peers.Case("c", 16, 1, 7, 9),
                                  peers.Case("d", 64, 2, cu_q=[0, 12, 12, 40], cu_k=[0, 3, 9, 9])])
def test_visible_pairs(case):
    assert case.visible_pairs() == _pairs_brute(case.seg_q(), case.seg_k(), case.ratio)
    assert case.flops() == 2 * case.heads * 128 * case.visible_pairs()


def test_small_cases_keep_the_configuration():
    for c in peers.bench_cases(quick=False):
        s = peers.small_case(c)
        assert (s.heads, s.ratio, s.w_f32, s.thd) == (c.heads, c.ratio, c.w_f32, c.thd)
        assert 0 < s.visible_pairs() < c.visible_pairs()
        if s.thd:
            assert s.cu_q[0] == s.cu_k[0] == 0 and s.cu_q == sorted(s.cu_q) and s.cu_k == sorted(s.cu_k)


# ---------------------------------------------------------------- report --------------------


def _results():
    impls = {
        "dsa_generic": {"label": "dsa-indexer generic", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-7},
        "triton": {"label": "Triton (fused)", "available": True, "reason": "", "notes": [], "tol": 1e-5},
        "cudnn": {"label": "cuDNN-frontend SM90", "available": False, "reason": "not installed: pkg missing", "notes": [], "tol": 1e-5},
    }
    cases = []
    for c in peers.bench_cases(quick=True):
        ok = {"rel_l2": 1e-7, "pattern_mismatch": 0, "non_finite": 0, "visible": 10, "ok": True}
        bad = dict(ok, rel_l2=3e-3, ok=False)
        cases.append({
            "case": peers.asdict(c), "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(), "series": c.series,
            "s_q": c.t_q,
            "runs": {
                "dsa_generic": {"status": "ok", "check": ok, "median_us": 100.0, "tflops": 500.0, "pct_ceiling": 64.0, "reps": 9},
                "triton": {"status": "measured, but the correctness check FAILED", "check": bad, "median_us": 200.0,
                           "tflops": 250.0, "pct_ceiling": 32.0, "reps": 9},
                "cudnn": {"status": "unavailable: not installed: pkg missing"},
            },
        })
    env = {"gpu": "NVIDIA H200", "sm_count": 132, "compute_capability": "9.0", "memory_gib": 139.8, "l2_mib": 60.0,
           "python": "3.12.3", "torch": "2.11.0", "torch_cuda": "13.0", "command": "python3 bench/peers.py --out docs",
           "date_utc": "2026-01-01 00:00 UTC", "nvidia_smi": "H200, 580", "git_commit": "abc"}
    ceiling = {"n": 8192, "reps": 10, "median_us": 1400.0, "tflops": 785.0}
    return {"env": env, "impls": impls, "cases": cases, "ceiling": ceiling, "ceiling_end": ceiling, "elapsed_s": 12.0}


def test_section_content():
    s = peers.render_section(_results())
    assert s.startswith(peers.BEGIN) and s.rstrip().endswith(peers.END)
    assert "| bshd H64 r2 S_q 2048 |" in s
    assert "100.0 us · 500 TF/s · 64%" in s
    assert "200.0 us · 250 TF/s · 32% ✗" in s  # failed check flagged
    assert "2.00x ✗" in s  # speed-up vs the failing peer flagged too
    assert "cuDNN-frontend SM90: not installed: pkg missing" in s
    assert "**FAIL**" in s and "785 TFLOP/s" in s


def test_write_doc_keeps_other_sections(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\n## JIT: compile isolation cost\n\nkeep me\n\n" + peers.BEGIN + "\nold\n" + peers.END + "\n\n## After\n\nme too\n")
    peers.write_doc(peers.render_section(_results()), tmp_path)
    text = doc.read_text()
    assert "keep me" in text and "me too" in text and "\nold\n" not in text
    assert text.count(peers.BEGIN) == 1 and text.count(peers.END) == 1
    assert text.index("keep me") < text.index(peers.BEGIN) < text.index(peers.END) < text.index("me too")


def test_write_doc_appends_when_no_markers(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nother text\n")
    peers.write_doc(peers.render_section(_results()), tmp_path)
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nother text\n") and peers.BEGIN in text


def test_results_round_trip_through_json(tmp_path):
    r = _results()
    peers.save_json(r, tmp_path)
    again = json.loads((tmp_path / peers.JSON_NAME).read_text())
    assert peers.render_section(again) == peers.render_section(r)
