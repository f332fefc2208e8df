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


def _cpp_function(src: str, signature: str) -> str:
    """The body of a top-level C++ function (from its signature to the closing brace in column 0)."""
    body = src[src.index(signature) :]
    return body[: body.index("\n}\n")]


def _cpp_value(text: str):
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if text.startswith("{"):
        return [int(v) for v in text.strip("{}").split(",")]
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?f?", text):
        return float(text.rstrip("f"))
    if text.startswith("Layout::"):
        return text[len("Layout::") :]
    raise ValueError(f"cannot read the C++ value {text!r}")


def _eval_int(expr: str, env: dict) -> int:
    """An integer expression of the CLI's case list: literals, the loop variables, / and *."""
    expr = expr.strip()
    assert re.fullmatch(r"[0-9a-z_ */+-]+", expr), expr
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(env)))  # noqa: S307 (checked above)


def _cpp_expr(text: str, env: dict):
    """A value assigned in the case list: a literal, or an integer expression of the loop
    variables (a static_cast around it dropped), or a braced list of those."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        return [_cpp_expr(v, env) for v in text[1:-1].split(",") if v.strip()]
    try:
        return _cpp_value(text)
    except ValueError:
        return _eval_int(re.sub(r"^static_cast<\w+>\((.*)\)$", r"\1", text), env)


_FOR = re.compile(r"for \(int64_t (\w+) : \{([0-9, ]+)\}\)\s*(.*)")


def _net_braces(line: str) -> int:
    line = re.sub(r'"[^"]*"', '""', line)
    return line.count("{") - line.count("}")


def _statement_end(lines: list, i: int) -> int:
    """The index after the statement that starts at lines[i]: a `for (int64_t v : {...})` header
    takes the next statement, or its braced block, with it."""
    m = _FOR.fullmatch(lines[i])
    if not m or m.group(3) not in ("", "{"):
        return i + 1
    if m.group(3) == "":
        return _statement_end(lines, i + 1)
    depth, j = 1, i + 1
    while depth:
        depth += _net_braces(lines[j])
        j += 1
    return j


def _host_problem_defaults(support: str) -> dict:
    """Default member values of tools/support/host_problem.hpp's HostProblem."""
    body = support[support.index("struct HostProblem {") :]
    body = body[: body.index("\n};")]
    d = {}
    for typ, names, value in re.findall(r"^\s*([\w:<>]+)\s+([\w, =0-9.-]+?)\s*=\s*([^;{]+|\{[^}]*\});", body, re.M):
        del typ
        for part in (names + " = " + value).split(","):
            if "=" in part:
                n, v = part.split("=", 1)
                d[n.strip()] = _cpp_value(v)
    return d


def _cli_bench_cases(src: str, support: str) -> list:
    """The cases of run_bench in tools/dsa_indexer_cli.cpp, in order: dicts of name, layout,
    batch, s_q, s_k, ratio, heads, w_f32, sm_scale, cu_q, cu_k (HostProblem members)."""
    body = _cpp_function(src, "int run_bench(")
    defaults = _host_problem_defaults(support)
    bshd_src = _cpp_function(src, "HostProblem bshd(")
    params = re.search(r"HostProblem bshd\(([^)]*)\)", bshd_src).group(1)
    pnames = [re.match(r"\s*[\w:]+\s+(\w+)", a).group(1) for a in params.split(",")]
    pdefaults = {m.group(1): _cpp_value(m.group(2)) for m in re.finditer(r"(\w+)\s*=\s*([^,]+)$", params.replace(",", ",\n"), re.M)}
    assigns = re.findall(r"^\s*p\.(\w+) = ([^;]+);", bshd_src, re.M)

    def bshd(args: list, env: dict) -> dict:
        vals = dict(pdefaults)
        for name, a in zip(pnames, args):
            vals[name] = _cpp_value(a) if a.strip() in ("true", "false") else _eval_int(a, env)
        p = dict(defaults)
        for member, v in assigns:
            p[member] = vals[v] if v in vals else _cpp_value(v)
        return p

    # thd_packing(segments, ratio): the members it sets, and its rule for the keys (s / ratio)
    thd_src = _cpp_function(src, "HostProblem thd_packing(") if "HostProblem thd_packing(" in src else ""
    assert not thd_src or "p.cu_k.push_back(p.cu_k.back() + static_cast<int32_t>(s / ratio));" in thd_src
    thd_defaults = dict(defaults)
    for member, v in re.findall(r"^\s*p\.(\w+) = ([^;{]+);", thd_src, re.M):
        if member not in ("ratio", "cu_q", "cu_k"):
            thd_defaults[member] = _cpp_value(v)
    cases = []
    block = None  # members of a `{ HostProblem p; ... }` block

    def run(lines: list, env: dict) -> None:
        """The statements of `lines` with the loop variables of `env`; loops over brace lists
        (nested, with a braced block or one statement) run once per value."""
        i = 0
        while i < len(lines):
            end = _statement_end(lines, i)
            if m := _FOR.fullmatch(lines[i]):
                var, values, rest = m.groups()
                inner = lines[i + 1 : end - (rest == "{")] if rest in ("", "{") else [rest]
                for v in (int(x) for x in values.split(",")):
                    run(inner, dict(env, **{var: v}))
            else:
                statement(lines[i], env)
            i = end

    def statement(line: str, env: dict) -> None:
        nonlocal block
        if m := re.fullmatch(r'cases\.push_back\(\{fmt::format\("([^"]*)", ([\w, ]+)\), bshd\(([^)]*)\)\}\);', line):
            fmt, names, args = m.groups()
            values = [str(_eval_int(n, env)) for n in names.split(",")]
            assert fmt.count("{}") == len(values), line
            for v in values:
                fmt = fmt.replace("{}", v, 1)
            cases.append(dict(bshd(args.split(","), env), name=fmt))
        elif m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", bshd\(([^)]*)\)\}\);', line):
            cases.append(dict(bshd(m.group(2).split(","), env), name=m.group(1)))
        elif m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", thd_packing\(\{([0-9, ]+)\}, ([0-9]+)\)\}\);', line):
            name, segs, ratio = m.group(1), [int(v) for v in m.group(2).split(",")], int(m.group(3))
            p = dict(thd_defaults, ratio=ratio, cu_q=[0], cu_k=[0])
            for v in segs:
                p["cu_q"] = p["cu_q"] + [p["cu_q"][-1] + v]
                p["cu_k"] = p["cu_k"] + [p["cu_k"][-1] + v // ratio]
            cases.append(dict(p, name=name))
        elif m := re.fullmatch(r"cases\.back\(\)\.p\.(\w+) = (.+);", line):
            cases[-1][m.group(1)] = _cpp_expr(m.group(2), env)
        elif line == "HostProblem p;":
            block = dict(defaults)
        elif block is not None and (m := re.fullmatch(r"p\.(\w+) = (.+);", line)):
            block[m.group(1)] = _cpp_expr(m.group(2), env)
        elif block is not None and (m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", p\}\);', line)):
            cases.append(dict(block, name=m.group(1)))
            block = None
        elif "cases.push_back" in line or "cases.back()" in line:
            raise AssertionError(f"the parser of run_bench's case list does not read: {line}")

    run([line.strip() for line in body.splitlines()], {})
    return cases


def test_cases_match_the_cli_bench():
    src = (REPO_ROOT / "tools" / "dsa_indexer_cli.cpp").read_text()
    support = (REPO_ROOT / "tools" / "support" / "host_problem.hpp").read_text()
    cli = _cli_bench_cases(src, support)
    cases = peers.bench_cases(quick=False)
    assert [c.name for c in cases] == [c["name"] for c in cli]
    for c, k in zip(cases, cli):
        assert c.thd == (k["layout"] != "bshd"), c.name
        assert (c.heads, c.ratio, c.w_f32) == (k["heads"], k["ratio"], k["w_f32"]), c.name
        assert c.sm_scale == pytest.approx(k["sm_scale"]), c.name
        if c.thd:
            assert (c.cu_q, c.cu_k) == (k["cu_q"], k["cu_k"]), c.name
        else:
            assert (c.batch, c.s_q, c.s_k) == (k["batch"], k["s_q"], k["s_k"]), c.name
        assert c.offsets == k.get("offsets", []), c.name  # HostProblem::offsets, empty: not given
    assert peers.bench_cases(quick=True) == cases[:4]  # the CLI's --quick: cases.resize(4)
    assert "if (quick) cases.resize(4);" in _cpp_function(src, "int run_bench(")


def test_cli_parser_reads_batch_and_scale_overrides():
    src = """int run_bench(const Args& a) {
  for (int64_t sq : {64, 128}) cases.push_back({fmt::format("bshd H64 r2 S_q {}", sq), bshd(sq, sq / 2, 2, 64)});
  cases.push_back({"x B4", bshd(256, 64, 4, 32, true)});
  cases.back().p.batch = 4;
  cases.back().p.sm_scale = 1.0f;
  {
    HostProblem p;
    p.layout = Layout::thd_local;
    p.cu_q = {0, 3, 9};
    p.cu_k = {0, 1, 4};
    cases.push_back({"t", p});
  }
}

HostProblem bshd(int64_t sq, int64_t sk, int64_t ratio, int heads, bool wf32 = false) {
  HostProblem p;
  p.s_q = sq;
  p.s_k = sk;
  p.ratio = ratio;
  p.heads = heads;
  p.w_f32 = wf32;
  p.sm_scale = 0.125f;
  return p;
}
"""
    support = "struct HostProblem {\n  int heads = 64;\n  int64_t batch = 1;\n  int64_t ratio = 1;\n  float sm_scale = 1.0f;\n  bool w_f32 = false;\n  Layout layout = Layout::bshd;\n};\n"
    cli = _cli_bench_cases(src, support)
    assert [c["name"] for c in cli] == ["bshd H64 r2 S_q 64", "bshd H64 r2 S_q 128", "x B4", "t"]
    assert (cli[1]["s_q"], cli[1]["s_k"], cli[1]["sm_scale"], cli[1]["batch"]) == (128, 64, 0.125, 1)
    assert (cli[2]["batch"], cli[2]["sm_scale"], cli[2]["w_f32"], cli[2]["heads"], cli[2]["ratio"]) == (4, 1.0, True, 32, 4)
    assert (cli[3]["layout"], cli[3]["cu_q"], cli[3]["sm_scale"], cli[3]["heads"]) == ("thd_local", [0, 3, 9], 1.0, 64)
    with pytest.raises(AssertionError, match="does not read"):
        _cli_bench_cases(src.replace("cases.back().p.batch = 4;", "cases.back().p.set(4);"), support)


def test_cli_parser_reads_nested_loops_and_offsets():
    src = """int run_bench(const Args& a) {
  cases.push_back({"first", bshd(64, 32, 2, 64)});
  for (int64_t sk : {100, 200})
    for (int64_t sq : {8, 16}) {
      cases.push_back({fmt::format("p S_q {} S_k {}", sq, sk), bshd(sq, sk, 1, 64)});
      cases.back().p.offsets = {static_cast<int32_t>(sk - sq)};
    }
  for (int64_t b : {2, 3})
    for (int64_t sq : {24})
      cases.push_back({fmt::format("b{} {}", b, sq), bshd(sq, sq * 2, 4, 32)});
  cases.push_back({"last", bshd(8, 4, 2, 16)});
}

HostProblem bshd(int64_t sq, int64_t sk, int64_t ratio, int heads) {
  HostProblem p;
  p.s_q = sq;
  p.s_k = sk;
  p.ratio = ratio;
  p.heads = heads;
  return p;
}
"""
    support = "struct HostProblem {\n  int heads = 64;\n  int64_t batch = 1;\n  int64_t ratio = 1;\n  float sm_scale = 1.0f;\n  bool w_f32 = false;\n  Layout layout = Layout::bshd;\n};\n"
    cli = _cli_bench_cases(src, support)
    assert [c["name"] for c in cli] == ["first", "p S_q 8 S_k 100", "p S_q 16 S_k 100", "p S_q 8 S_k 200", "p S_q 16 S_k 200",
                                        "b2 24", "b3 24", "last"]
    assert [(c["s_q"], c["s_k"], c["ratio"], c.get("offsets")) for c in cli[1:5]] == [
        (8, 100, 1, [92]), (16, 100, 1, [84]), (8, 200, 1, [192]), (16, 200, 1, [184])]
    assert "offsets" not in cli[0] and "offsets" not in cli[5] and (cli[5]["s_k"], cli[5]["ratio"], cli[5]["heads"]) == (48, 4, 32)
    assert _cpp_expr("{static_cast<int32_t>(sk - sq), 3}", {"sk": 9, "sq": 4}) == [5, 3] and _cpp_expr("1.0f", {}) == 1.0


def _pairs_brute(seg_q, seg_k, ratio, offsets=None):
    """Visible (i, j) cells straight from the contract: j < S_k and j < floor((offset + i + 1) / ratio)."""
    n = 0
    for b in range(len(seg_q) - 1):
        sq, sk = seg_q[b + 1] - seg_q[b], seg_k[b + 1] - seg_k[b]
        o = offsets[b] if offsets else 0
        for i in range(sq):
            n += sum(1 for j in range(sk) if j < (o + i + 1) // ratio)
    return n


@pytest.mark.parametrize("case", [peers.Case("a", 64, 2, 40, 20), peers.Case("b", 64, 4, 33, 5), peers.Case("c", 16, 1, 7, 9),
                                  peers.Case("d", 64, 2, cu_q=[0, 12, 12, 40], cu_k=[0, 3, 9, 9]),
                                  peers.Case("e", 64, 2, 40, 20, batch=3)])
def test_visible_pairs(case):
    assert case.visible_pairs() == _pairs_brute(case.seg_q(), case.seg_k(), case.ratio)
    assert case.flops() == 2 * case.heads * 128 * case.visible_pairs()


@pytest.mark.parametrize("case", [
    peers.Case("ends at S_k", 64, 1, 24, 40, offsets=[16]),  # the prefill rows' rule, small
    peers.Case("ratio 2", 64, 2, 30, 50, offsets=[41]),
    peers.Case("ratio 4, past S_k", 32, 4, 33, 20, offsets=[70]),  # windows clamped to S_k
    peers.Case("negative", 64, 2, 20, 9, offsets=[-7]),  # empty windows first
    peers.Case("per batch", 64, 1, 16, 24, batch=3, offsets=[8, 0, -3]),
    peers.Case("thd", 16, 2, cu_q=[0, 12, 12, 40], cu_k=[0, 30, 39, 45], offsets=[20, 5, 3]),
])
def test_visible_pairs_with_offsets(case):
    brute = _pairs_brute(case.seg_q(), case.seg_k(), case.ratio, case.offsets)
    assert case.visible_pairs() == brute and brute != _pairs_brute(case.seg_q(), case.seg_k(), case.ratio)
    assert case.flops() == 2 * case.heads * 128 * brute
    assert case.q_offsets() == case.offsets and peers.case_from_dict(peers.asdict(case)) == case
    assert peers.Case("no offsets", 64, 2, 40, 20).q_offsets() == [0]
    assert peers.Case("no offsets", 64, 2, 40, 20, batch=3).q_offsets() == [0, 0, 0]
    with pytest.raises(ValueError, match="offsets"):
        peers.Case("bad", 64, 1, 16, 24, batch=2, offsets=[8])


PREFILL = ["bshd H64 prefill S_q 512 S_k 16384", "bshd H64 prefill S_q 1024 S_k 16384",
           "bshd H64 prefill S_q 512 S_k 65536", "bshd H64 prefill S_q 1024 S_k 65536"]


def _row_end(c, b: int, i: int) -> int:
    """The end of row i's window in batch b: clamp(floor((offset + i + 1) / ratio), 0, S_k)."""
    return min(max((c.q_offsets()[b] + i + 1) // c.ratio, 0), c.seg_k()[b + 1] - c.seg_k()[b])


def test_prefill_cases():
    """The CLI's chunked-prefill rows (issue 23), same names and place: after H16, before THD;
    ratio 1, offset S_k - S_q, so row i sees keys [0, S_k - S_q + i + 1)."""
    names = [c.name for c in peers.bench_cases(quick=False)]
    i = names.index(PREFILL[0])
    assert names[i - 1] == "bshd H16 r2 S_q 8192" and names[i : i + 4] == PREFILL and names[i + 4].startswith("thd ")
    prefill = [c for c in peers.bench_cases(quick=False) if c.offsets]
    assert [c.name for c in prefill] == PREFILL
    assert not any(c.offsets for c in peers.bench_cases(quick=True))
    for c in prefill:
        assert c.name == f"bshd H64 prefill S_q {c.s_q} S_k {c.s_k}"
        assert (c.heads, c.ratio, c.batch, c.thd, c.w_f32, c.sm_scale, c.series) == (64, 1, 1, False, False, 0.125, "")
        assert c.offsets == [c.s_k - c.s_q] and c.dims() == f"S_q {c.s_q}, S_k {c.s_k}, offset {c.s_k - c.s_q}"
        assert _row_end(c, 0, 0) == c.s_k - c.s_q + 1 and _row_end(c, 0, c.s_q - 1) == c.s_k
        pairs = c.s_q * (c.s_k - c.s_q) + c.s_q * (c.s_q + 1) // 2  # sum over i of S_k - S_q + i + 1
        assert c.visible_pairs() == pairs and c.flops() == 2.0 * 64 * 128 * pairs
        assert c.s_q // 8 * c.batch < 132  # q-tiles x B below the H200's SMs: lean's split variant
    big = prefill[-1]  # the largest score matrix: 1024 x 65536 fp32 = 256 MiB per input set
    assert 4 * big.t_q * big.n_cols == 256 << 20


def test_small_case_of_a_prefill_case_ends_at_s_k():
    for c in (c for c in peers.bench_cases(quick=False) if c.offsets):
        for q_tiles in (peers.LEAN_CHECK_TILES, 132, 300):
            s = peers.small_case(c, q_tiles)
            assert (s.heads, s.ratio, s.batch, s.w_f32, s.sm_scale, s.thd) == (c.heads, c.ratio, c.batch, c.w_f32, c.sm_scale, False)
            assert s.s_q == c.s_q  # the case's q-tiles: lean takes the split variant it is timed with
            assert s.s_k - s.s_q == (c.s_k - c.s_q) // peers.PREFILL_CHECK_SCALE + 3 and c.s_q < s.s_k < c.s_k
            assert s.s_k % 64 != 0 and s.offsets[0] % 64 != 0  # windows straddle the 64-key tiles
            assert s.offsets == [s.s_k - s.s_q]  # rows still end at S_k
            assert _row_end(s, 0, s.s_q - 1) == s.s_k and _row_end(s, 0, 0) == s.s_k - s.s_q + 1
            assert s.visible_pairs() == _pairs_brute(s.seg_q(), s.seg_k(), s.ratio, s.offsets) < c.visible_pairs()
            assert s.dims() == f"S_q {s.s_q}, S_k {s.s_k}, offset {s.offsets[0]}"


def test_small_case_keeps_the_distance_from_s_k():
    """Offsets of a validation shape keep each batch's distance from the bottom-right alignment
    (offset S_k * ratio - S_q): a row that ends d keys before S_k still does."""
    c = peers.Case("gap", 64, 2, 2048, 3000, batch=2, offsets=[2 * 3000 - 2048, 2 * 3000 - 2048 - 40])
    s = peers.small_case(c)
    assert s.s_q == 8 * -(-peers.LEAN_CHECK_TILES // 2) and s.s_k < c.s_k
    assert [2 * s.s_k - s.s_q - o for o in s.offsets] == [0, 40]
    assert _row_end(s, 0, s.s_q - 1) == s.s_k and _row_end(s, 1, s.s_q - 1) == s.s_k - 20
    t = peers.Case("thd", 64, 1, cu_q=[0, 2000, 3000], cu_k=[0, 4000, 5000], offsets=[2000, 0])
    st = peers.small_case(t, q_tiles=10)
    sq, sk = [b - a for a, b in zip(st.cu_q, st.cu_q[1:])], [b - a for a, b in zip(st.cu_k, st.cu_k[1:])]
    assert st.offsets == [sk[0] - sq[0], sk[1] - sq[1]]  # segment 1: offset 0 = S_k - S_q there too
    assert _row_end(st, 0, sq[0] - 1) == sk[0]
    assert peers.small_case(peers.Case("none", 64, 2, 8192, 4096)).offsets == []


def test_batches_are_segments():
    c = peers.Case("b", 64, 2, 40, 20, batch=3)
    assert (c.t_q, c.t_k, c.max_q, c.n_cols) == (120, 60, 40, 20)
    assert c.seg_q() == [0, 40, 80, 120] and c.seg_k() == [0, 20, 40, 60]
    assert c.visible_pairs() == 3 * peers.Case("one", 64, 2, 40, 20).visible_pairs()


def test_small_cases_keep_the_configuration():
    for c in peers.bench_cases(quick=False):
        s = peers.small_case(c)
        assert (s.heads, s.ratio, s.w_f32, s.thd, s.batch, s.sm_scale) == (c.heads, c.ratio, c.w_f32, c.thd, c.batch, c.sm_scale)
        assert 0 < s.visible_pairs() < c.visible_pairs()
        if s.thd:
            assert s.cu_q[0] == s.cu_k[0] == 0 and s.cu_q == sorted(s.cu_q) and s.cu_k == sorted(s.cu_k)
        else:  # lean's gate: S_q a multiple of 8; q-tiles x B >= the H200's 132 SMs where the case has them
            assert s.s_q % 8 == 0 and s.s_k % 4 != 0  # a ragged S_k tail
            if c.s_q // 8 * c.batch >= 132:  # lean's fused sweep
                assert s.s_q // 8 * s.batch >= 132
            else:  # fewer (the prefill rows): the case's S_q, lean's split variant as in the timed call
                assert s.s_q == c.s_q
        bigger = peers.small_case(c, q_tiles=300)
        assert bigger.thd or bigger.s_q // 8 * bigger.batch >= min(300, c.s_q // 8 * c.batch)


def test_offsets_reach_every_implementation(monkeypatch, tmp_path):
    """Our library and cuDNN-frontend get q_causal_offsets exactly where the case has offsets
    (their compile keys tell "given" apart), Triton its offsets argument always (zeros when none):
    the calls recorded with stand-ins for the binding's forward, cuDNN-frontend and Triton."""
    import types

    import dsa_indexer

    calls = []
    monkeypatch.setattr(dsa_indexer, "version", lambda: "0.0.0")
    monkeypatch.setattr(dsa_indexer, "library_path", lambda: "libdsa_indexer.so")
    monkeypatch.setattr(dsa_indexer._lib, "families", lambda operation="scores": {"auto": 0, "generic": 1, "lean": 3})
    monkeypatch.setattr(dsa_indexer, "indexer_forward", lambda q, k, w, **kw: calls.append(("dsa", kw)))
    cudnn, dsa_mod = types.ModuleType("cudnn"), types.ModuleType("cudnn.deepseek_sparse_attention")
    cudnn.__version__ = "1.32.0"
    dsa_mod.indexer_forward_wrapper = lambda q, k, w, **kw: calls.append(("cudnn", kw))
    cudnn.deepseek_sparse_attention = dsa_mod
    triton, triton_indexer = types.ModuleType("triton"), types.ModuleType("triton_indexer")
    triton.__version__ = "3.0.0"
    triton_indexer.indexer_forward_triton = lambda *a: calls.append(("triton", a))
    for name, mod in (("cudnn", cudnn), ("cudnn.deepseek_sparse_attention", dsa_mod), ("cutlass", types.ModuleType("cutlass")),
                      ("triton", triton), ("triton_indexer", triton_indexer)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    impls = [peers.dsa_impl("lean"), peers.dsa_impl("generic"), peers.triton_impl(), peers.cudnn_impl([], tmp_path)]
    assert all(im.available for im in impls), [im.reason for im in impls]
    assert peers.dsa_impl("frob").reason == "this binding has no family 'frob' (it has auto, generic, lean)"
    for c in (next(c for c in peers.bench_cases(quick=False) if c.name == PREFILL[-1]), peers.bench_cases(quick=True)[0]):
        x = types.SimpleNamespace(q="q", k="k", w="w", out="out", q3="q3", k2="k2", w2="w2", out2="out2", cu_q="cu_q", cu_k="cu_k",
                                  cu_q_host=c.seg_q(), cu_k_host=c.seg_k(), offsets="OFFSETS", offsets_host=c.q_offsets())
        calls.clear()
        for im in impls:
            assert not (im.unsupported and im.unsupported(c)), im.key
            im.make(c, x)()
        (_, lean), (_, generic), (_, tri), (_, cud) = calls
        for kw in (lean, generic, cud):
            assert kw.get("q_causal_offsets") == ("OFFSETS" if c.offsets else None), c.name
            assert (kw["ratio"], kw["sm_scale"]) == (c.ratio, c.sm_scale)
        assert (lean["family"], generic["family"]) == ("lean", "generic")
        assert tri[6] == "OFFSETS" and tri[8] == c.ratio  # indexer_forward_triton(q, k, w, out, cu_q, cu_k, offsets, max_q, ratio, ...)


def test_prefill_rows_in_the_section_and_outside_the_targets():
    r = _results()
    s = peers.render_section(r)
    small = peers.small_case(next(c for c in peers.bench_cases(quick=False) if c.name == PREFILL[0]))
    assert (small.s_q, small.s_k, small.offsets) == (512, 1507, [995])
    assert f"| {PREFILL[0]} | 8.3 M |" in s and f"| {PREFILL[0]} (S_q 512, S_k 1507, offset 995) |" in s
    assert "q_causal_offsets S_k - S_q" in s
    targets = s.split("### Targets of the lean family")[1].split("###")[0]
    for row in r["cases"]:  # the prefill rows count in no target: lean far behind every peer there changes none
        if row["case"]["offsets"]:
            row["runs"]["dsa_lean"] = dict(_t(5000.0, 10.0), status="ok", check=_OK, warm=_t(5000.0, 10.0, per_graph=10, mode="graph"))
    again = peers.render_section(r)
    assert again.split("### Targets of the lean family")[1].split("###")[0] == targets
    assert "5000.0 us · 10 TF/s" in again


def test_not_served_reason_strips_the_prefix():
    msg = "indexer_forward: family lean: heads H: expected 64, got 32"
    assert peers.not_served_reason(msg) == "heads H: expected 64, got 32"
    assert peers.not_served_reason("indexer_forward: family: expected x, got y") == "family: expected x, got y"


# ---------------------------------------------------------------- report --------------------

_OK = {"rel_l2": 1e-7, "pattern_mismatch": 0, "non_finite": 0, "visible": 10, "ok": True}
_BAD = dict(_OK, rel_l2=3e-3, ok=False)
_ENV = {"gpu": "NVIDIA H200", "sm_count": 132, "compute_capability": "9.0", "memory_gib": 139.8, "l2_mib": 60.0,
        "python": "3.12.3", "torch": "2.11.0", "torch_cuda": "13.0", "command": "python3 bench/peers.py --out docs",
        "date_utc": "2026-01-01 00:00 UTC", "nvidia_smi": "H200, 580", "git_commit": "abc"}
_CEILING = {"n": 8192, "reps": 10, "median_us": 1400.0, "tflops": 785.0}


def _t(us, tflops, **kw):
    return dict(median_us=us, min_us=us * 0.9, reps=9, tflops=tflops, pct_ceiling=100.0 * tflops / 785.0, **kw)


def _results():
    """A format-2 run: lean, generic, Triton (failing its check), cuDNN-frontend; cold and warm."""
    impls = {
        "dsa_lean": {"label": "dsa-indexer lean", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-7},
        "dsa_generic": {"label": "dsa-indexer generic", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-7},
        "triton": {"label": "Triton (fused)", "available": True, "reason": "", "notes": [], "tol": 1e-5},
        "cudnn": {"label": "cuDNN-frontend SM90", "available": True, "reason": "", "notes": ["cudnn-frontend 1.32.0"], "tol": 1e-5},
    }
    cases = []
    for c in peers.bench_cases(quick=False):
        ck = dict(_OK, shape=c.name + " (check)", dims=peers.small_case(c).dims())
        if c.name == "thd H64 r2 1 seg T_q 8192":
            lean = {"status": "not served: grid saturation (q-tiles of T_q): expected >= the device's 132 SMs, got 100"}
        elif c.heads != 64:
            lean = {"status": f"not served: heads H: expected 64, got {c.heads}"}
        else:
            lean = dict(_t(80.0, 700.0), status="ok", check=ck, warm=_t(70.0, 760.0, per_graph=10, mode="graph"))
        cudnn_cold = 88.0 if c.s_q == 2048 else 120.0
        cudnn_warm = _t(90.0 if c.s_q == 2048 else 110.0, 500.0, per_graph=10, mode="graph")
        if c.thd:
            cudnn_warm = _t(110.0, 500.0, mode="loop", graph_error="RuntimeError: capture failed")
        cases.append({
            "case": peers.asdict(c), "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(), "series": c.series,
            "s_q": c.t_q if c.thd else c.s_q,
            "runs": {
                "dsa_lean": lean,
                "dsa_generic": dict(_t(100.0, 560.0), status="ok", check=ck, warm=_t(90.0, 620.0, per_graph=10, mode="graph")),
                "triton": dict(_t(200.0, 250.0), status="measured, but the correctness check FAILED", check=dict(_BAD, dims=ck["dims"]),
                               warm=_t(180.0, 280.0, per_graph=10, mode="graph")),
                "cudnn": dict(_t(cudnn_cold, 450.0), status="ok", check=ck, warm=cudnn_warm),
            },
        })
    return {"format": peers.RESULTS_FORMAT, "env": _ENV, "impls": impls, "cases": cases, "ceiling": _CEILING, "ceiling_end": _CEILING,
            "elapsed_s": 12.0, "method": {"per_graph": 10, "capture_error_mode": "thread_local", "check_q_tiles": 160}}


def _legacy_results():
    """A run written before format 2 (no "format", cold only, no lean, S_q 512 checks)."""
    impls = {
        "dsa_generic": {"label": "dsa-indexer generic", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-7},
        "triton": {"label": "Triton (fused)", "available": True, "reason": "", "notes": [], "tol": 1e-5},
        "cudnn": {"label": "cuDNN-frontend SM90", "available": False, "reason": "not installed: pkg missing", "notes": [], "tol": 1e-5},
    }
    cases = []
    for c in peers.bench_cases(quick=True):
        case = {k: v for k, v in peers.asdict(c).items() if k not in ("batch", "sm_scale")}
        cases.append({
            "case": case, "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(), "series": c.series,
            "s_q": c.t_q,
            "runs": {
                "dsa_generic": {"status": "ok", "check": _OK, "median_us": 100.0, "tflops": 500.0, "pct_ceiling": 64.0, "reps": 9},
                "triton": {"status": "measured, but the correctness check FAILED", "check": _BAD, "median_us": 200.0,
                           "tflops": 250.0, "pct_ceiling": 32.0, "reps": 9},
                "cudnn": {"status": "unavailable: not installed: pkg missing"},
            },
        })
    return {"env": _ENV, "impls": impls, "cases": cases, "ceiling": _CEILING, "ceiling_end": _CEILING, "elapsed_s": 12.0}


def test_section_content():
    s = peers.render_section(_results())
    assert s.startswith(peers.BEGIN) and s.rstrip().endswith(peers.END)
    assert "| bshd H64 r2 S_q 2048 |" in s and "| bshd H64 r2 S_q 8192 B4 |" in s and "| bshd H64 r2 S_q 8192 scale1 |" in s
    cold, warm = s.split("### Cold")[1].split("### Warm")
    warm = warm.split("### Speed-ups")[0]
    assert "| dsa-indexer lean | dsa-indexer generic | Triton (fused) | cuDNN-frontend SM90 |" in cold
    assert "80.0 us · 700 TF/s · 89%" in cold and "70.0 us · 760 TF/s · 97%" in warm
    assert "200.0 us · 250 TF/s · 32% ✗" in cold  # failed check flagged
    assert "— (heads H: expected 64, got 32)" in cold and "— (grid saturation (q-tiles of T_q): expected" in warm
    assert "110.0 us · 500 TF/s · 64% †" in warm  # cuDNN's THD warm time was not graph-captured
    assert "†" not in cold
    assert "| case | lean vs generic | lean vs Triton (fused) | lean vs cuDNN-frontend SM90 | generic vs cuDNN-frontend SM90 |" in s
    row = next(l for l in s.splitlines() if l.startswith("| bshd H64 r2 S_q 4096 |") and "x /" in l)
    assert row == "| bshd H64 r2 S_q 4096 | 1.25x / 1.29x | 2.50x ✗ / 2.57x ✗ | 1.50x / 1.57x | 1.20x / 1.22x |"
    thd = next(l for l in s.splitlines() if l.startswith("| thd H64 r2 1 seg T_q 8192 |") and "x /" in l)
    assert thd == "| thd H64 r2 1 seg T_q 8192 | — / — | — / — | — / — | 1.20x / 1.22x † |"
    thd = next(l for l in s.splitlines() if l.startswith("| thd H64 r4 8 segs T_q 16384 |") and "x /" in l)
    assert thd == "| thd H64 r4 8 segs T_q 16384 | 1.25x / 1.29x | 2.50x ✗ / 2.57x ✗ | 1.50x / 1.57x † | 1.20x / 1.22x † |"
    targets = s.split("### Targets of the lean family")[1].split("###")[0]
    assert "| lean >= 1.3x cuDNN-frontend at S_q >= 4096 (BSHD) | met in all 9 cases (lowest 1.50x: bshd H64 r2 S_q 4096) |" in targets
    assert "| lean >= 1.2x cuDNN-frontend at S_q 2048 (BSHD) | 1.10x **missed** | 1.29x met |" in targets
    assert "| lean >= 1.15x generic (BSHD) | met in all 10 cases (lowest 1.25x" in targets
    assert "| lean THD >= 1.3x cuDNN-frontend THD (local columns) | met in all 8 cases (lowest 1.50x" in targets
    assert "| lean THD >= 1.15x generic THD | met in all 8 cases (lowest 1.25x" in targets
    assert "| lean THD (one segment) TFLOP/s >= 0.95x lean BSHD of the same shape | not measured | not measured |" in targets
    assert "| lean >= 650 TFLOP/s at bshd H64 r2 S_q 8192 (H 64, ratio 2, B 1) | 700 TF/s met | 760 TF/s met |" in targets
    assert "| bshd H64 r2 S_q 8192 B4 (B 4, S_q 320, S_k 163) |" in s and "| bshd H64 r2 S_q 2048 (S_q 1280, S_k 643) |" in s
    assert "— (not served)" in s and "**FAIL**" in s and "785 TFLOP/s" in s
    assert ("dsa-indexer lean (bshd H32 r2 S_q 8192, thd H32 r2 3 ragged T_q 8192, thd H32 r4 8 segs T_q 8192): "
            "not served: heads H: expected 64, got 32") in s  # one line per reason
    assert "cuDNN-frontend SM90 (thd H64 r2 3 ragged T_q 8192, " in s and ": warm time not graph-captured (†): RuntimeError: capture failed" in s
    assert "CUDAGraph" in s and "sm_scale 0.125" in s


def test_section_of_a_legacy_run():
    s = peers.render_section(_legacy_results())
    assert "100.0 us · 500 TF/s · 64%" in s
    assert "200.0 us · 250 TF/s · 32% ✗" in s
    assert "2.00x ✗ / —" in s  # speed-up vs the failing peer flagged too; no warm time
    assert "cuDNN-frontend SM90: not installed: pkg missing" in s
    assert "Not measured in this run" in s and "### Targets" not in s
    assert "| bshd H64 r2 S_q 2048 (S_q 512, S_k 259) |" in s and "sm_scale 1," in s
    assert "**FAIL**" in s and "785 TFLOP/s" in s


def test_saved_results_re_render(tmp_path):
    saved = REPO_ROOT / "docs" / peers.JSON_NAME
    if not saved.exists():
        pytest.skip("no saved results")
    assert peers.main(["--from-json", str(saved), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert text.count(peers.BEGIN) == 1 and "### Cold" in text


def test_plot_has_lean_and_both_modes(tmp_path):
    pytest.importorskip("matplotlib")
    path = peers.plot(_results(), tmp_path)
    assert path is not None and path.stat().st_size > 10_000
    assert peers.plot(_legacy_results(), tmp_path / "old") is not None


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
    for r in (_results(), _legacy_results()):
        peers.save_json(r, tmp_path)
        again = json.loads((tmp_path / peers.JSON_NAME).read_text())
        assert peers.render_section(again) == peers.render_section(r)


# ---------------------------------------------------------------- top-k rows ----------------

import peers_topk  # noqa: E402


def _cli_topk_cases(src: str) -> list:
    """topk_bench_cases() of tools/cli_topk.cpp: (name, batch, s_q, s_k, ratio, end_at_sk, segs)."""
    body = _cpp_function(src, "std::vector<TopkCase> topk_bench_cases(")
    out = []
    for line in body.splitlines():
        line = line.strip()
        if m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", topk_bshd\(([0-9]+), ([0-9]+), ([0-9]+), ([0-9]+), (true|false)\)\}\);', line):
            name, b, sq, sk, r, end = m.groups()
            out.append((name, int(b), int(sq), int(sk), int(r), end == "true", []))
        elif m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", topk_thd\(\{([0-9, ]+)\}\)\}\);', line):
            out.append((m.group(1), 1, 0, 0, 1, False, [int(v) for v in m.group(2).split(",")]))
        elif "cases." in line and "cases.push_back" in line:
            raise AssertionError(f"the parser of topk_bench_cases does not read: {line}")
    return out


def test_topk_cases_match_the_cli():
    src = (REPO_ROOT / "tools" / "cli_topk.cpp").read_text()
    cli = _cli_topk_cases(src)
    cases = peers_topk.topk_cases()
    assert [(c.name, c.batch, c.s_q, c.s_k, c.ratio, c.end_at_sk, c.segs) for c in cases] == cli
    assert peers_topk.topk_cases(quick=True) == cases[:2]
    assert "if (o.quick) cases.resize(2);" in src
    # the CLI's THD helper: ratio 1, keys = rows per segment
    thd = _cpp_function(src, "HostProblem topk_thd(")
    assert "p.ratio = 1;" in thd and "p.cu_k.push_back(p.cu_k.back() + static_cast<int32_t>(s));" in thd
    assert "static_cast<int32_t>(sk - sq - 1)" in _cpp_function(src, "HostProblem topk_bshd(")


def _ends_brute(c):
    out = []
    seg_q = c.segs if c.thd else [c.s_q] * c.batch
    seg_k = c.segs if c.thd else [c.s_k] * c.batch
    for off, sq, sk in zip(c.offsets(), seg_q, seg_k):
        for i in range(sq):
            out.append(sum(1 for j in range(sk) if j < (off + i + 1) // c.ratio))
    return out


@pytest.mark.parametrize("case", [peers_topk.TopkCase("a", 1, 40, 80, 1, True), peers_topk.TopkCase("b", 2, 33, 9, 4),
                                  peers_topk.TopkCase("c", 3, 16, 20, 1, True), peers_topk.TopkCase("d", segs=[5, 0, 17, 3])])
def test_topk_row_ends(case):
    assert peers_topk.row_ends(case) == _ends_brute(case)
    assert len(peers_topk.row_ends(case)) == case.rows


def test_topk_case_shapes_and_offsets():
    c = peers_topk.topk_cases()[0]
    assert (c.rows, c.n_cols, c.offsets()) == (8192, 16384, [16384 - 8192 - 1])
    ends = peers_topk.row_ends(c)
    assert ends[0] == 16384 - 8192 and ends[-1] == 16383  # rows at the end of the context: the last sees S_k - 1 keys
    b4 = next(c for c in peers_topk.topk_cases() if c.batch == 4)
    assert b4.offsets() == [16384 - 4096 - 1] * 4 and b4.rows == 4 * 4096
    thd = next(c for c in peers_topk.topk_cases() if c.thd)
    assert thd.cu == [0, 5462, 13660, 16384] and thd.n_cols == 8198 and thd.offsets() == [0, 0, 0]
    r4 = next(c for c in peers_topk.topk_cases() if c.ratio == 4)
    assert peers_topk.checked_rows(peers_topk.row_ends(r4), 2048) == 16384 - (4 * 2048 - 1)


def test_topk_cudnn_seq_lens_and_memory():
    assert peers_topk.cudnn_seq_lens([0, 5, 3000, 9000], 2048, 8192) == [2048, 2048, 3000, 8192]
    assert peers_topk.checked_rows([0, 2047, 2048, 5000], 2048) == 2
    c = peers_topk.topk_cases()[1]  # S_q 8192, S_k 65536
    m = peers_topk.memory_bytes(c, 2048, workspace=1056 * 65536 * 4)  # one 1056-row block of fp32 scores
    assert m["scores_matrix"] == 8192 * 65536 * 4 and m["indices"] == 8192 * 2048 * 4
    assert m["dsa_topk"] == 1056 * 65536 * 4 + 8192 * 2048 * 4 and m["ratio"] == pytest.approx((1056 + 256) / 8192)


def test_topk_k_option():
    assert peers._topk_ks("2048,512") == [2048, 512]
    for bad in ("0", "2049", "x", ""):
        with pytest.raises(Exception):
            peers._topk_ks(bad)


def _topk_results():
    cases = []
    for c in peers_topk.topk_cases():
        for k in (2048, 512):
            t = 1000.0 * c.rows * c.n_cols / (8192 * 16384)
            ok = {"rows": 100, "different_sets": 1, "ties": 1, "ok": True}
            runs = {
                "dsa_topk": {"status": "unavailable: this binding has no dsa_indexer.indexer_topk yet"},
                "scores_torch": dict(median_us=1.8 * t, min_us=1.7 * t, reps=9, peak_bytes=4 * c.rows * c.n_cols + 8 * c.rows * k,
                                     warm=dict(median_us=1.7 * t, mode="graph"), status="ok"),
                "scores_cudnn": dict(median_us=1.2 * t, min_us=1.1 * t, reps=9, peak_bytes=4 * c.rows * c.n_cols + 4 * c.rows * k,
                                     warm=dict(median_us=1.15 * t, mode="loop"), status="ok", check=ok),
            }
            cli = {"name": c.name, "k": k, "topk_cold_us": 1.1 * t, "topk_warm_us": 1.05 * t, "select_us": 0.1 * t,
                   "workspace_bytes": 64 << 20, "indices_bytes": 4 * c.rows * k}
            cases.append({"case": peers_topk.asdict(c), "name": c.name, "k": k, "rows": c.rows, "n_cols": c.n_cols, "checked_rows": 100,
                          "runs": runs, "select": {"torch": {"median_us": 0.5 * t}, "cudnn": {"median_us": 0.12 * t},
                                                   "dsa": {"median_us": 0.1 * t}}, "cli": cli})
    paths = {p: {"label": peers_topk.LABELS[p], "available": p != "dsa_topk", "reason": "no binding" if p == "dsa_topk" else "",
                 "notes": ["n"]} for p in peers_topk.PATHS}
    return {"format": 1, "env": _ENV, "cases": cases, "paths": paths, "cli": {"path": "bench.json", "rows": []}, "elapsed_s": 3.0}


def test_topk_section_and_targets():
    r = _topk_results()
    s = peers_topk.render_topk(r)
    assert s.startswith(peers_topk.TOPK_BEGIN) and s.rstrip().endswith(peers_topk.TOPK_END)
    row = next(l for l in s.splitlines() if l.startswith("| topk bshd S_q 8192 S_k 16384 r1 | 2048 |"))
    assert "1.10 ms / 1.05 ms (CLI)" in row and "1.80 ms / 1.70 ms" in row and "1.20 ms / 1.15 ms †" in row
    assert "| 1.09x / 1.10x | 1.64x / 1.62x |" in row  # cuDNN path / ours, torch path / ours: cold / warm
    assert "100 us / 500 us / 120 us" in row and "ok scores_cudnn (1 sets differ, 1 ties, of 100 rows)" in row
    t = dict(peers_topk.targets(r["cases"]))
    assert t["cold: no slower than scores + cuDNN-frontend top-k (time ratio <= 1.05)"].startswith("met in all 16 rows")
    assert t["warm: >= 1.3x faster than scores + torch.topk"].startswith("met in all 16 rows")
    assert t["our selection alone at least as fast as cuDNN-frontend's on the same score rows (speed-up >= 1)"].startswith("met")
    mem = t["peak memory <= 1/8 of the scores path's at S_k >= 65536"]
    assert mem.startswith("met in all 6 rows") and "S_k 4096" not in mem  # the S_k 65536, 131072 and 262144 rows, both k
    r["cases"][0]["cli"]["topk_cold_us"] = 5000.0
    r["cases"][2]["cli"]["workspace_bytes"] = 1056 * 65536 * 4  # a 1056-row block at S_k 65536: 0.16 of the matrix
    t = dict(peers_topk.targets(r["cases"]))
    assert t["cold: no slower than scores + cuDNN-frontend top-k (time ratio <= 1.05)"].startswith("**missed** in 1 of 16")
    assert t["peak memory <= 1/8 of the scores path's at S_k >= 65536"].startswith("**missed** in 1 of 6: topk bshd S_q 8192 S_k 65536 r1 k 2048 0.155")
    assert "unavailable: this binding has no dsa_indexer.indexer_topk yet" in s


def test_topk_results_re_render_beside_the_scores_section(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\n" + peers.BEGIN + "\nscores\n" + peers.END + "\n")
    r = _topk_results()
    peers.save_json(r, tmp_path, peers_topk.TOPK_JSON)
    assert peers.main(["--op", "topk", "--from-json", str(tmp_path / peers_topk.TOPK_JSON), "--out", str(tmp_path)]) == 0
    text = doc.read_text()
    assert "\nscores\n" in text and text.count(peers_topk.TOPK_BEGIN) == 1
    assert text.index(peers.END) < text.index(peers_topk.TOPK_BEGIN)
    again = json.loads((tmp_path / peers_topk.TOPK_JSON).read_text())
    assert peers_topk.render_topk(again) == peers_topk.render_topk(r)


# ---------------------------------------------------------------- FP8 rows ------------------

import peers_fp8  # noqa: E402


def _cli_fp8_cases(src: str) -> list:
    """fp8_bench_cases() of tools/cli_fp8.cpp: (name, s_q, s_k, ratio, end_at_sk)."""
    body = _cpp_function(src, "std::vector<Fp8Case> fp8_bench_cases(")
    out = []
    for line in body.splitlines():
        line = line.strip()
        if m := re.fullmatch(r'cases\.push_back\(\{"([^"]*)", fp8_bshd\(([0-9]+), ([0-9]+), ([0-9]+), (true|false)\)\}\);', line):
            name, sq, sk, r, end = m.groups()
            out.append((name, int(sq), int(sk), int(r), end == "true"))
        elif "cases." in line:
            raise AssertionError(f"the parser of fp8_bench_cases does not read: {line}")
    return out


def test_fp8_cases_match_the_cli():
    src = (REPO_ROOT / "tools" / "cli_fp8.cpp").read_text()
    cli = _cli_fp8_cases(src)
    cases = peers_fp8.fp8_cases()
    assert [(c.name, c.s_q, c.s_k, c.ratio, c.end_at_sk) for c in cases] == cli
    assert cases[0].name == peers_fp8.HEADLINE and "if (o.quick) cases.resize(1);" in src
    assert peers_fp8.fp8_cases(quick=True) == cases[:1]
    helper = _cpp_function(src, "HostProblem fp8_bshd(")
    assert "p.offsets.assign(1, static_cast<int32_t>(sk - sq - 1));" in helper  # the offset rule of Fp8Case.offset
    assert "p.heads = 64;" in helper and "p.sm_scale = 0.125f;" in helper and "p.batch = 1;" in helper
    for c in cases:
        assert (c.heads, c.batch, c.sm_scale) == (64, 1, 0.125)
    # the sampled rows are the CLI's: same construction
    rows_src = _cpp_function(src, "std::vector<int64_t> fp8_check_rows(")
    assert "{int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(63), int64_t(64), int64_t(127), int64_t(128)}" in rows_src
    assert "s.insert(rows * i / 8 + i);" in rows_src and "for (int i = 1; i < 8; ++i)" in rows_src


def test_fp8_windows_end_at_sk():
    c = next(c for c in peers_fp8.fp8_cases() if c.s_k == 65536)
    assert c.offset() == 65536 - 2048 - 1
    assert c.row_end(0) == 65536 - 2048 and c.row_end(2047) == 65535  # row i sees [0, i + S_k - S_q)
    h = peers_fp8.fp8_cases()[0]
    assert (h.offset(), h.row_end(0), h.row_end(1), h.row_end(8191)) == (0, 0, 1, 4096)
    for case in (peers_fp8.Fp8Case("a", 40, 20, 2), peers_fp8.Fp8Case("b", 24, 40, 1, True), peers_fp8.Fp8Case("c", 33, 9, 4, batch=2)):
        brute = case.batch * sum(1 for i in range(case.s_q) for j in range(case.s_k) if j < (case.offset() + i + 1) // case.ratio)
        assert case.visible_pairs() == brute
        assert case.flops() == 2 * 64 * 128 * brute


def test_fp8_check_rows():
    rows = peers_fp8.check_rows(2048)
    assert rows == sorted(set(rows)) and rows[0] == 0 and rows[-1] == 2047 and len(rows) >= 16
    assert {63, 64, 1983, 1984} <= set(rows)
    assert all(0 <= r < 10 for r in peers_fp8.check_rows(10))


def test_fp8_arguments():
    a = peers.parse_args(["--precision", "fp8", "--skip", "bf16,cudnn", "--families", "generic,lean"])
    assert (a.precision, a.skip, a.families, a.op) == ("fp8", ["bf16", "cudnn"], ["generic", "lean"], "scores")
    assert peers.parse_args([]).precision == "bf16"
    for bad in (["--precision", "fp16"], ["--precision", "fp8", "--op", "topk"], ["--skip", "frob"], ["--families", "lean,x"]):
        with pytest.raises(SystemExit) as e:
            peers.parse_args(bad)
        assert e.value.code == 2, bad


def _fp8_t(us, tflops, pct, **kw):
    return dict(median_us=us, min_us=0.9 * us, reps=9, tflops=tflops, pct_ceiling=pct, **kw)


def _fp8_results():
    """An FP8 run: lean and generic FP8 (equal bits), auto not served, cuDNN FP8, our BF16 lean."""
    impls = {
        "fp8_lean": {"label": "dsa-indexer lean FP8", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-3, "family": "lean"},
        "fp8_generic": {"label": "dsa-indexer generic FP8", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-3, "family": "generic"},
        "fp8_auto": {"label": "dsa-indexer auto FP8", "available": True, "reason": "", "notes": ["lib"], "tol": 2e-3, "family": "auto"},
        "cudnn_fp8": {"label": "cuDNN-frontend SM90 FP8", "available": True, "reason": "", "notes": ["cudnn-frontend 1.32.0"], "tol": 2e-3},
        "bf16_lean": {"label": "dsa-indexer lean BF16", "available": True, "reason": "", "notes": ["bf16 inputs"], "tol": 2e-7, "family": "lean"},
    }
    ok = {"rel_l2": 3e-7, "pattern_mismatch": 0, "non_finite": 0, "visible": 100, "ok": True, "rows": 23}
    cases = []
    for c in peers_fp8.fp8_cases():
        head = c.name == peers_fp8.HEADLINE
        lean = _fp8_t(1000.0, 1150.0 if head else 1000.0, 85.0, status="ok", check=ok, run_to_run=True, equals_generic=True,
                      warm=_fp8_t(950.0, 1210.0 if head else 1050.0, 90.0, mode="graph"))
        generic = _fp8_t(1250.0, 920.0, 68.0, status="ok", check=ok, run_to_run=True, warm=_fp8_t(1200.0, 958.0, 71.0, mode="graph"))
        cudnn = _fp8_t(1600.0 if head else 1400.0, 700.0, 52.0, status="ok", check=dict(ok, rel_l2=1e-3),
                       warm=_fp8_t(1500.0 if head else 1300.0, 750.0, 55.0, mode="loop", graph_error="RuntimeError: capture failed"))
        bf16 = _fp8_t(1700.0, 680.0, 87.0, status="ok", check=dict(ok, rel_l2=1e-8), warm=_fp8_t(1500.0, 770.0, 98.0, mode="graph"))
        if c.s_k == 65536:
            cudnn = {"status": "failed: ValueError: q_causal_offsets: not supported with precision='fp8'", "traceback": "..."}
        runs = {"fp8_lean": lean, "fp8_generic": generic,
                "fp8_auto": {"status": "not served: q/k dtype: expected one named for e4m3 inputs (family lean serves them by name only)"},
                "cudnn_fp8": cudnn, "bf16_lean": bf16}
        cases.append({"case": peers_fp8.asdict(c), "name": c.name, "visible_pairs": c.visible_pairs(), "flops": c.flops(),
                      "check_rows": 23, "runs": runs})
    ceilings = {"fp8": {"n": 8192, "median_us": 820.0, "tflops": 1341.0, "reps": 10, "fast_accum": False},
                "fp8_fast": {"n": 8192, "median_us": 780.0, "tflops": 1410.0, "reps": 10, "fast_accum": True},
                "bf16": {"n": 8192, "median_us": 1400.0, "tflops": 785.0, "reps": 10}}
    return {"format": 1, "env": _ENV, "impls": impls, "cases": cases, "ceilings": ceilings,
            "ceilings_end": {"fp8": dict(ceilings["fp8"], tflops=1330.0), "fp8_fast": dict(ceilings["fp8_fast"], tflops=1400.0)},
            "elapsed_s": 42.0}


def test_fp8_section_content():
    r = _fp8_results()
    s = peers_fp8.render_fp8(r)
    assert s.startswith(peers_fp8.FP8_BEGIN) and s.rstrip().endswith(peers_fp8.FP8_END)
    assert "**1341 TFLOP/s**" in s and "`use_fast_accum=True`: 780 us = **1410 TFLOP/s**" in s and "use the higher, 1410 TFLOP/s" in s
    assert "again at the end of the run: 1400" in s and "**785 TFLOP/s**" in s
    cold, warm = s.split("### Cold")[1].split("### Warm")
    warm = warm.split("### Speed-ups")[0]
    assert "| dsa-indexer lean FP8 | dsa-indexer generic FP8 | dsa-indexer auto FP8 | cuDNN-frontend SM90 FP8 | dsa-indexer lean BF16 |" in cold
    head = next(l for l in cold.splitlines() if l.startswith(f"| {peers_fp8.HEADLINE} |"))
    assert "1000.0 us · 1150 TF/s · 85%" in head and "— (q/k dtype: expected one named for e4m3 inputs" in head
    assert "1700.0 us · 680 TF/s · 87%" in head
    assert "1500.0 us · 750 TF/s · 55% †" in warm and "†" not in cold
    sp = s.split("### Speed-ups")[1].split("###")[0]
    assert "| case | lean FP8 vs cuDNN-frontend SM90 FP8 | lean FP8 vs lean BF16 | lean FP8 vs generic FP8 | generic FP8 vs cuDNN-frontend SM90 FP8 |" in sp
    row = next(l for l in sp.splitlines() if l.startswith(f"| {peers_fp8.HEADLINE} |"))
    assert row == f"| {peers_fp8.HEADLINE} | 1.60x / 1.58x | 1.70x / 1.58x | 1.25x / 1.26x | 1.28x / 1.25x |"
    long = next(l for l in sp.splitlines() if l.startswith("| fp8 H64 r1 S_q 2048 S_k 65536 end |"))
    assert long.startswith("| fp8 H64 r1 S_q 2048 S_k 65536 end | — / — | 1.70x / 1.58x |")
    t = s.split("### Targets (issue 22)")[1].split("###")[0]
    assert "| >= 1100 TFLOP/s useful at fp8 H64 r2 S_q 8192 S_k 4096 (moonshot 1250) | 1150 TF/s (lean) met | 1210 TF/s (lean) met |" in t
    assert "| >= 80 % of the same run's FP8 GEMM ceiling at fp8 H64 r2 S_q 8192 S_k 4096 | 85 % (lean) met | 90 % (lean) met |" in t
    assert "| >= 1.5x cuDNN-frontend's SM90 FP8 path on every shape | **missed** in 2 of 3: fp8 H64 r1 S_q 2048 S_k 8192 end 1.40x (lean)" in t
    assert "| >= 1.6x our BF16 lean at fp8 H64 r2 S_q 8192 S_k 4096 | 1.70x (lean) met | 1.58x (lean) **missed** |" in t
    corr = s.split("### Correctness")[1].split("###")[0]
    assert f"| {peers_fp8.HEADLINE} (23 rows) | 3.0e-07 ok, = generic | 3.0e-07 ok | — | 1.0e-03 ok | 1.0e-08 ok |" in corr
    assert "- cuDNN-frontend SM90 FP8 (fp8 H64 r1 S_q 2048 S_k 65536 end): failed: ValueError: q_causal_offsets" in s
    assert "- dsa-indexer auto FP8 (every case): not served: q/k dtype" in s
    assert "warm time not graph-captured (†): RuntimeError: capture failed" in s


def test_fp8_targets_skip_failed_checks_and_pick_the_fastest_checked_family():
    r = _fp8_results()
    head = r["cases"][0]["runs"]
    head["fp8_generic"].update(median_us=900.0, tflops=1280.0, pct_ceiling=91.0)  # faster than lean: ours is generic
    assert peers_fp8.ours(r["cases"][0], "cold")[0] == "fp8_generic"
    head["fp8_generic"]["check"] = dict(head["fp8_generic"]["check"], ok=False)  # ...unless its check failed
    assert peers_fp8.ours(r["cases"][0], "cold")[0] == "fp8_lean"
    for run in r["cases"][0]["runs"].values():
        if "check" in run:
            run["check"] = dict(run["check"], ok=False)
    t = {what: (c, w) for what, c, w in peers_fp8.targets(r["cases"][:1])}
    assert all(v == ("not measured", "not measured") for v in t.values())


def test_fp8_section_beside_the_others_and_json_round_trip(tmp_path):
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\n" + peers.BEGIN + "\nscores\n" + peers.END + "\n\n" + peers_topk.TOPK_BEGIN + "\ntopk\n" + peers_topk.TOPK_END + "\n")
    r = _fp8_results()
    peers.save_json(r, tmp_path, peers_fp8.FP8_JSON)
    again = json.loads((tmp_path / peers_fp8.FP8_JSON).read_text())
    assert peers_fp8.render_fp8(again) == peers_fp8.render_fp8(r)
    args = ["--precision", "fp8", "--from-json", str(tmp_path / peers_fp8.FP8_JSON), "--out", str(tmp_path)]
    assert peers.main(args) == 0
    assert peers.main(args) == 0  # replaces its own section, once
    text = doc.read_text()
    assert "\nscores\n" in text and "\ntopk\n" in text
    assert text.count(peers_fp8.FP8_BEGIN) == 1 and text.count(peers_fp8.FP8_END) == 1
    assert text.index(peers_topk.TOPK_END) < text.index(peers_fp8.FP8_BEGIN)


def test_fp8_repository_doc_has_the_markers():
    text = (REPO_ROOT / "docs" / "BENCHMARKS.md").read_text()
    assert text.count(peers_fp8.FP8_BEGIN) == 1 and text.count(peers_fp8.FP8_END) == 1


def test_fp8_deepgemm_column():
    """DeepGEMM's column: --skip deepgemm is accepted; without deep_gemm the loader gives the
    import's failure as the reason; when measured it is a speed-up pair of ours and its cells
    render as the others'."""
    assert peers.parse_args(["--precision", "fp8", "--skip", "deepgemm"]).skip == ["deepgemm"]
    import importlib.util

    if importlib.util.find_spec("deep_gemm") is None:
        fn, notes, reason = peers_fp8.load_deepgemm()
        assert fn is None and notes == [] and reason.startswith("import failed: ") and "deepgemm_peer.sh" in reason
    r = _fp8_results()
    r["impls"][peers_fp8.DEEPGEMM] = {"label": "DeepGEMM FP8", "available": True, "reason": "", "notes": ["deep_gemm 2.8.2"],
                                      "tol": 2e-3}
    ok = {"rel_l2": 4e-4, "pattern_mismatch": 0, "non_finite": 0, "visible": 100, "ok": True, "rows": 23}
    for row in r["cases"]:
        row["runs"][peers_fp8.DEEPGEMM] = _fp8_t(1100.0, 1045.0, 74.0, status="ok", check=ok, warm=_fp8_t(1050.0, 1095.0, 78.0, mode="graph"))
    s = peers_fp8.render_fp8(r)
    assert "- DeepGEMM FP8: deep_gemm 2.8.2" in s
    sp = s.split("### Speed-ups")[1].split("###")[0]
    assert "lean FP8 vs DeepGEMM FP8" in sp
    row = next(l for l in sp.splitlines() if l.startswith(f"| {peers_fp8.HEADLINE} |"))
    assert "1.10x / 1.11x" in row
    cold = s.split("### Cold")[1].split("### Warm")[0]
    assert "1100.0 us · 1045 TF/s · 74%" in cold


def test_fp8_deepgemm_compat_column():
    """Our drop-in's column: --skip compat is accepted, it calls deepgemm_compat in DeepGEMM's
    2.8.2 form on DeepGEMM's operands, and it is a speed-up pair against DeepGEMM's column."""
    assert peers.parse_args(["--precision", "fp8", "--skip", "compat,deepgemm"]).skip == ["compat", "deepgemm"]
    fn, notes, reason = peers_fp8.load_deepgemm_compat()
    assert callable(fn) and reason == "" and "deepgemm_compat.fp8_fp4_mqa_logits" in notes[0]
    keys = ["fp8_lean", peers_fp8.DEEPGEMM, peers_fp8.COMPAT]
    assert (peers_fp8.COMPAT, peers_fp8.DEEPGEMM) in peers_fp8.speedup_pairs(keys)
    assert ("fp8_lean", peers_fp8.DEEPGEMM) in peers_fp8.speedup_pairs(keys)
    assert not any(peers_fp8.COMPAT in p for p in peers_fp8.speedup_pairs(["fp8_lean", peers_fp8.COMPAT]))
    r = _fp8_results()
    r["impls"][peers_fp8.DEEPGEMM] = {"label": "DeepGEMM FP8", "available": True, "reason": "", "notes": [], "tol": 2e-3}
    r["impls"][peers_fp8.COMPAT] = {"label": "dsa-indexer deepgemm_compat FP8", "available": True, "reason": "", "notes": [],
                                    "tol": 2e-3}
    ok = {"rel_l2": 4e-4, "pattern_mismatch": 0, "non_finite": 0, "visible": 100, "ok": True, "rows": 23}
    for row in r["cases"]:
        row["runs"][peers_fp8.DEEPGEMM] = _fp8_t(1100.0, 1045.0, 74.0, status="ok", check=ok)
        row["runs"][peers_fp8.COMPAT] = _fp8_t(1320.0, 871.0, 62.0, status="ok", check=ok)
    sp = peers_fp8.render_fp8(r).split("### Speed-ups")[1].split("###")[0]
    assert "deepgemm_compat FP8 vs DeepGEMM FP8" in sp
    row = next(l for l in sp.splitlines() if l.startswith(f"| {peers_fp8.HEADLINE} |"))
    assert "0.83x" in row  # 1100 / 1320: the drop-in slower


def test_lean_trace_item_waits():
    """tools/lean_trace.py's per-item waits: each consumer's first item apart, the later ones'
    median and 90th percentile, across a wrap of the 32-bit clock."""
    np = pytest.importorskip("numpy")
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        import lean_trace as lt
    finally:
        sys.path.pop(0)
    grid, consumers = 2, 2
    words = np.zeros(grid * lt.ROLES * lt.WORDS, dtype="<u4")
    waits = {(0, 0): [100, 10, 20], (0, 1): [300, 30], (1, 0): [500, 40, 50, 60], (1, 1): []}
    for (cta, c), ds in waits.items():
        base = (cta * lt.ROLES + c) * lt.WORDS
        words[base] = len(ds)
        for i, d in enumerate(ds):
            rec = base + 1 + i * lt.RECORD
            start = (1 << 32) - 5 if d == 30 else 1000 * (i + 1)  # one wait across the clock's wrap
            words[rec:rec + 3] = [lt.ITEM, start, (start + d) % (1 << 32)]
    first, median, p90 = lt.item_waits(words, grid, consumers)
    assert first == pytest.approx((100 + 300 + 500) / 3)
    assert median == pytest.approx(float(np.median([10, 20, 30, 40, 50, 60])))
    assert p90 == pytest.approx(float(np.percentile([10, 20, 30, 40, 50, 60], 90)))
    assert lt.item_waits(np.zeros(lt.ROLES * lt.WORDS, dtype="<u4"), 1, 2) == (None, None, None)
