"""bench/hostcost.py without a GPU: the timing helper, the rendered table and its verdicts,
the section it writes into BENCHMARKS.md."""

from __future__ import annotations

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import hostcost  # noqa: E402


def _results(ours_bshd=8.0, ours_thd=9.0, cudnn_bshd=40.0, cudnn_thd=20.0):
    row = lambda impl, case, us: dict(impl=impl, case=case, median_us=us, min_us=us * 0.9, batches=50, per_batch=200)
    return {
        "format": 1,
        "environment": {"command": "python3 bench/hostcost.py --out X", "date_utc": "D", "git_commit": "abc", "gpu": "G",
                        "python": "3.12", "torch": "2.11"},
        "problems": {"bshd": "B 1", "thd": "segs"},
        "notes": ["backend torch.ops"],
        "rows": [
            row("dsa-indexer torch.ops", "bshd", ours_bshd),
            row("dsa-indexer torch.ops", "thd, host cu_seqlens", ours_thd),
            row("dsa-indexer ctypes", "bshd", 30.0),
            {"impl": "dsa-indexer ctypes", "case": "bshd, out=", "error": "RuntimeError: boom"},
            row("cuDNN-frontend SM90 wrapper", "bshd", cudnn_bshd),
            row("cuDNN-frontend SM90 wrapper", "thd, host cu_seqlens", cudnn_thd),
        ],
    }


def test_per_call_us_counts_calls_and_syncs():
    calls, syncs = [], []
    r = hostcost.per_call_us(lambda: calls.append(1), batches=3, per_batch=7, sync=lambda: syncs.append(1))
    assert len(calls) == 7 * 4 and len(syncs) == 4  # one warm-up batch, then 3 timed
    assert r["batches"] == 3 and r["per_batch"] == 7 and 0 <= r["min_us"] <= r["median_us"]


def test_render_verdicts_and_ratios():
    s = hostcost.render_section(_results())
    assert s.startswith(hostcost.BEGIN) and s.rstrip().endswith(hostcost.END)
    assert "| dsa-indexer torch.ops | bshd | 8.00 µs | 7.20 µs | 5.0x |" in s
    assert "| dsa-indexer ctypes | bshd | 30.00 µs | 27.00 µs | 1.3x |" in s
    assert "RuntimeError: boom" in s
    assert "- bshd: 8.00 µs, met; 5.0x below cuDNN-frontend: met" in s
    assert "- thd, host cu_seqlens: 9.00 µs, met; 2.2x below cuDNN-frontend: **missed**" in s


def test_render_missed_target_and_no_cudnn():
    r = _results(ours_bshd=12.5)
    r["rows"] = [x for x in r["rows"] if not x["impl"].startswith("cuDNN")]
    s = hostcost.render_section(r)
    assert "- bshd: 12.50 µs, **missed** (12.50 µs); cuDNN-frontend not measured" in s


def test_section_replaces_only_its_markers(tmp_path):
    (tmp_path / "BENCHMARKS.md").write_text(f"# B\n\nkeep me\n\n{hostcost.BEGIN}\nold\n{hostcost.END}\n\ntail\n")
    hostcost.peers.write_doc(hostcost.render_section(_results()), tmp_path, (hostcost.BEGIN, hostcost.END))
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert "keep me" in text and "tail" in text and "old" not in text and text.count(hostcost.BEGIN) == 1


def test_repository_doc_has_the_markers():
    text = (REPO_ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert text.count(hostcost.BEGIN) == 1 and text.count(hostcost.END) == 1


def test_interleaved_turns_split_the_batches_and_keep_errors_apart():
    order, setups = [], []

    def boom():
        raise RuntimeError("boom")

    entries = [(lambda: setups.append("a"), lambda: order.append("a")), (lambda: setups.append("b"), boom),
               (lambda: setups.append("c"), lambda: order.append("c"))]
    res = hostcost.interleaved_us(entries, batches=7, per_batch=2, sync=lambda: None, rounds=3)
    assert res[1] == {"error": "RuntimeError: boom"}
    assert res[0]["batches"] == 7 and res[2]["batches"] == 7 and res[0]["rounds"] == 3
    assert len(res[0]["round_medians_us"]) == 3 and all(m >= res[0]["min_us"] for m in res[0]["round_medians_us"])
    assert setups == ["a", "b", "c", "a", "c", "a", "c"]  # a failed entry is not retried
    assert order.count("a") == (7 + 3) * 2  # 7 timed batches + one warm-up batch per turn
