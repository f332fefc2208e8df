#!/usr/bin/env python3
"""Timelines of lean's phase stamps (tests/gpu/test_lean_trace.cpp writes NAME.bin with
DSA_TEST_TRACE_OUT; layout in templates/sm90_indexer_lean_args.cuh, LeanTrace).

    tools/lean_trace.py DIR [--ctas 2] [--tiles 40]

For every DIR/*.bin: NAME.png, the first --tiles KV tiles of the first --ctas CTAs, one lane per
consumer (waiting for the KV stage, for its ring turn, the product in flight, the epilogue) and
one for the producer (its waits for free stages and Q buffers), in SM cycles from the CTA's
first stamp; and a line per file with the share of a CTA's span during which at least one
product was in flight (the tensor pipe's upper bound of busy time, from the consumers' issue to
their wait's return).
"""
import argparse
import pathlib

import numpy as np

ROLES, PRODUCER, WORDS, RECORD = 5, 4, 16384, 8
ITEM, TILE, KV, Q = 1, 2, 3, 4


def records(words, cta, role):
    region = words[(cta * ROLES + role) * WORDS:(cta * ROLES + role + 1) * WORDS]
    n = int(region[0])
    return region[1:1 + n * RECORD].reshape(n, RECORD).astype(np.int64)


def unwrap(r, t0):
    """Stamps relative to t0 (the 32-bit clock may wrap once)."""
    return (r - t0) % (1 << 32)


def busy_share(words, grid, consumers):
    shares = []
    for cta in range(grid):
        spans = []
        t0 = None
        for c in range(consumers):
            r = records(words, cta, c)
            r = r[(r[:, 0] & 0xFF) == TILE]
            if len(r) == 0:
                continue
            t0 = r[0, 1] if t0 is None else t0
            spans += [(unwrap(a, t0), unwrap(b, t0)) for a, b in zip(r[:, 3], r[:, 5])]
        if not spans:
            continue
        spans.sort()
        busy, end = 0, -1
        lo_all, hi_all = spans[0][0], max(b for _, b in spans)
        for a, b in spans:
            if a > end:
                busy += b - a
                end = b
            elif b > end:
                busy += b - end
                end = b
        shares.append(busy / max(hi_all - lo_all, 1))
    return float(np.mean(shares)) if shares else 0.0


def item_waits(words, grid, consumers):
    """The consumers' per-item waits for Q and weights (SM cycles): (mean of each consumer's
    first item, median and 90th percentile of the later items), None where there is none."""
    first, later = [], []
    for cta in range(grid):
        for c in range(consumers):
            r = records(words, cta, c)
            it = r[(r[:, 0] & 0xFF) == ITEM]
            d = [int(unwrap(b, a)) for a, b in zip(it[:, 1], it[:, 2])]
            if d:
                first.append(d[0])
                later += d[1:]
    return (float(np.mean(first)) if first else None, float(np.median(later)) if later else None,
            float(np.percentile(later, 90)) if later else None)


def plot(name, words, consumers, ctas, tiles, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(ctas, 1, figsize=(16, 2.2 * ctas + 1), squeeze=False)
    colors = {"kv wait": "#bbbbbb", "ring wait": "#f4a582", "product": "#2166ac", "epilogue": "#b2182b",
              "Q wait": "#1b7837", "stage wait": "#999999"}
    for cta in range(ctas):
        ax = axes[cta][0]
        rs = [records(words, cta, c) for c in range(consumers)]
        tile_rs = [r[(r[:, 0] & 0xFF) == TILE][:tiles] for r in rs]
        starts = [r[0, 1] for r in tile_rs if len(r)]
        if not starts:
            continue
        t0 = min(starts)
        t1 = max(unwrap(r[-1, 6], t0) for r in tile_rs if len(r))
        for c, (r, tr) in enumerate(zip(rs, tile_rs)):
            for x in tr:
                s = [unwrap(v, t0) for v in x[1:7]]
                for (a, b), label in zip([(0, 1), (1, 2), (3, 4), (4, 5)], ["kv wait", "ring wait", "product", "epilogue"]):
                    ax.broken_barh([(s[a], s[b] - s[a])], (c - 0.4, 0.8), color=colors[label])
            for x in r[(r[:, 0] & 0xFF) == ITEM]:
                a, b = unwrap(x[1], t0), unwrap(x[2], t0)
                if a <= t1:
                    ax.broken_barh([(a, b - a)], (c - 0.4, 0.8), color=colors["Q wait"])
        p = records(words, cta, PRODUCER)
        for x in p:
            a, b = unwrap(x[1], t0), unwrap(x[2], t0)
            if a <= t1:
                ax.broken_barh([(a, b - a)], (consumers - 0.4, 0.8),
                               color=colors["stage wait"] if (x[0] & 0xFF) == KV else colors["Q wait"])
        ax.set_xlim(0, t1)
        ax.set_yticks(range(consumers + 1), [f"consumer {c}" for c in range(consumers)] + ["producer"])
        ax.set_title(f"{name}: CTA {cta}, first {tiles} KV tiles (SM cycles)", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=v) for v in colors.values()]
    fig.legend(handles, list(colors), loc="lower center", ncol=len(colors), fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--ctas", type=int, default=2)
    ap.add_argument("--tiles", type=int, default=40)
    a = ap.parse_args()
    for f in sorted(pathlib.Path(a.dir).glob("*.bin")):
        words = np.fromfile(f, dtype="<u4")
        grid = len(words) // (ROLES * WORDS)
        consumers = sum(1 for c in range(4) if any(records(words, cta, c).size for cta in range(min(grid, 4))))
        share = busy_share(words, grid, consumers)
        print(f"lean_trace {f.stem}: {grid} CTAs, {consumers} consumers; a product in flight during {100 * share:.1f} % "
              f"of a CTA's span (mean over CTAs)")
        first, median, p90 = item_waits(words, grid, consumers)
        fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        print(f"lean_trace {f.stem}: Q and weights wait per item (cycles): first items' mean {fmt(first)}, "
              f"later items' median {fmt(median)} (p90 {fmt(p90)})")
        plot(f.stem, words, consumers, min(a.ctas, grid), a.tiles, f.with_suffix(".png"))


if __name__ == "__main__":
    main()
