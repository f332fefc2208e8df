#!/usr/bin/env bash
# Builds the GPU test binary and the CLI of an earlier commit (the baseline of an A/B run or of
# a bitwise check) into build/baseline/, with this tree's tests/ (so that the baseline binary
# has the digest test, tests/gpu/test_digests.cpp, and the same test cases as this tree):
#   tools/build_baseline.sh REV
# A git worktree of REV in ${BASELINE_SRC:-/tmp/dsa_baseline_src}, configured and built like
# build/ (Release; about 8 minutes on 2 cores). tools/gpu_session.sh's steps that compare
# against a baseline (digests, ab_*) run build/baseline/dsa_gpu_tests and build/baseline/dsa-indexer;
# carry build/baseline to the GPU machine.
set -euo pipefail
rev=${1:?usage: tools/build_baseline.sh REV}
root=$(git rev-parse --show-toplevel)
src=${BASELINE_SRC:-/tmp/dsa_baseline_src}
git -C "$root" worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
git -C "$root" worktree prune
git -C "$root" worktree add --detach "$src" "$rev" >/dev/null
rm -rf "$src/tests"
cp -a "$root/tests" "$src/tests"
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$src/build" -j"$(nproc)" --target dsa_gpu_tests dsa-indexer
mkdir -p "$root/build/baseline"
cp "$src/build/tests/dsa_gpu_tests" "$src/build/tools/dsa-indexer" "$root/build/baseline/"
git -C "$src" rev-parse HEAD >"$root/build/baseline/REV"
echo "baseline $(cat "$root/build/baseline/REV") in $root/build/baseline"
