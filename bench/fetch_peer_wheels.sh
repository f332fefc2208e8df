#!/usr/bin/env bash
# Downloads the pinned wheels of bench/requirements-peers.txt into .whl/ (git-ignored) for
# Python 3.12 manylinux x86_64 and splits them into part folders that fit one device call each
# (.whl/parts/p1, p2: see bench/peer_wheels.py). Run from the repository root, on a machine
# that reaches PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' .gitignore || echo /.whl/ >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl -r bench/requirements-peers.txt
python3 bench/peer_wheels.py pack --src .whl --out .whl/parts --part-mib 56
