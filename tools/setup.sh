#!/usr/bin/env bash
# Installs what building and testing dsa-indexer needs from Debian, when it is missing:
#   tools/setup.sh          the build and the tests: cmake, g++, make, fmt, Catch2, CLI11, pytest
#   tools/setup.sh fuzz     also clang, its runtime and llvm (the fuzzers of .ci/run)
# The README's two commands and .ci/run start with it, so a fresh machine with the CUDA toolkit
# needs nothing else. It installs only packages that dpkg does not list (root, or sudo), and
# checks for the CUDA toolkit, which Debian does not provide in a new enough version.
set -euo pipefail
pkgs="cmake g++ make libfmt-dev catch2 libcli11-dev python3-pytest"
[ "${1:-}" = fuzz ] && pkgs="$pkgs clang libclang-rt-14-dev llvm"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "setup: installing from Debian:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq $missing >/dev/null
fi
if [ ! -f /usr/local/cuda/include/nvrtc.h ] && ! command -v nvcc >/dev/null; then
  echo "setup: the CUDA toolkit (NVRTC >= 12.3, for sm_90a) is required but was not found" >&2
  exit 1
fi
