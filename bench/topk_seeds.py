"""Times indexer_topk's paths on one BSHD shape for several input seeds (session 28): the fused
path's sampled sweep sends a q-tile whose rows it may have cut short to an exact redo, so its
time depends on the inputs, while the unfused path's does not. Each seed draws q, k, w as
bench/peers_topk.py does (N(0,1) from a CUDA torch generator, rounded to bf16, zeros replaced;
rows ending at S_k), then times the scores alone and each top-k path (median of 5 calls after
one, device events, µs).

    DSA_INDEXER_LIBRARY=build/libdsa_indexer.so PYTHONPATH=python \\
        python3 bench/topk_seeds.py --sq 2048 --sk 262144 --seeds 0 42 43
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sq", type=int, default=2048)
    ap.add_argument("--sk", type=int, default=262144)
    ap.add_argument("--k", type=int, nargs="+", default=[2048, 512])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 42, 43])
    args = ap.parse_args()

    import torch

    import dsa_indexer

    heads, dim = 64, 128

    def median_us(fn, n=5):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000)
        return sorted(times)[n // 2]

    for seed in args.seeds:
        g = torch.Generator(device="cuda").manual_seed(seed)

        def nz(shape):
            x = torch.randn(shape, generator=g, device="cuda").to(torch.bfloat16)
            return torch.where(x == 0, torch.ones_like(x), x)

        q, k, w = nz((1, args.sq, heads, dim)), nz((1, args.sk, 1, dim)), nz((1, args.sq, heads))
        offs = torch.tensor([args.sk - args.sq - 1], dtype=torch.int32, device="cuda")
        kw = dict(ratio=1, sm_scale=0.125, q_causal_offsets=offs)
        line = [f"seed {seed}: scores {median_us(lambda: dsa_indexer.indexer_forward(q, k, w, **kw)):.1f}"]
        for top_k in args.k:
            for fam in ("auto", "topk_unfused", "topk_fused"):
                t = median_us(lambda: dsa_indexer.indexer_topk(q, k, w, top_k=top_k, family=fam, **kw))
                line.append(f"k {top_k} {fam} {t:.1f}")
        print("; ".join(line), flush=True)


if __name__ == "__main__":
    main()
