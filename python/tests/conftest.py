"""Makes the in-tree package importable (python/dsa_indexer) without installing it, and adds
`--wheels DIR...` (cuDNN-frontend's wheels for test_cudnn_compat_gpu.py, the same folders
bench/peers.py --wheels takes: plain wheel folders, or bench/peer_wheels.py part folders)."""

import os
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PYTHON_DIR.parent
# DSA_TEST_INSTALLED=1: test the installed package (a wheel in a virtual environment), not
# the source tree's copy.
if os.environ.get("DSA_TEST_INSTALLED") != "1" and str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))


def pytest_addoption(parser):
    parser.addoption(
        "--wheels", nargs="+", default=[], metavar="DIR",
        help="folders holding cuDNN-frontend's wheels (bench/requirements-peers.txt) for the side-by-side test; put it last",
    )


def require_hopper():
    """torch, or a module-level skip: without torch, a CUDA device, or a Hopper (sm_90) one."""
    import pytest

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device", allow_module_level=True)
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"needs a Hopper (sm_90) device, found {torch.cuda.get_device_name()}", allow_module_level=True)
    return torch
