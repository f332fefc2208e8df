"""Probe: one dsa-indexer call from PyTorch, then a normal interpreter exit (diagnoses a crash
seen at exit after the Python GPU tests)."""
import sys

import torch

sys.path.insert(0, "python")
import dsa_indexer  # noqa: E402

q = torch.randn(1, 64, 64, 128, device="cuda").to(torch.bfloat16)
k = torch.randn(1, 64, 1, 128, device="cuda").to(torch.bfloat16)
w = torch.randn(1, 64, 64, device="cuda").to(torch.bfloat16)
s = dsa_indexer.indexer_forward(q, k, w, ratio=int(sys.argv[1]) if len(sys.argv) > 1 else 2)
torch.cuda.synchronize()
print("scores finite:", int(torch.isfinite(s).sum()), "of", s.numel(), flush=True)
print("library:", dsa_indexer.library_path(), flush=True)
