#!/usr/bin/env bash
# Fetches what bench/deepgemm_peer.sh needs to build DeepGEMM 2.8.2 on the GPU machine (which has
# no network) into DIR (default build/peers/deepgemm, about 3.5 MB: carry it): its source
# distribution from PyPI (`deepinfer-gemm`, checked against its sha256) and Debian's libdw-dev
# and libelf-dev packages (their elfutils headers; DeepGEMM dlopens libdw at run time).
#   tools/fetch_deepgemm.sh [DIR]
set -euo pipefail
dir=${1:-build/peers/deepgemm}
mkdir -p "$dir"
sdist=deepinfer_gemm-2.8.2.tar.gz
sha=aad050965750f809b8dbb744a8db54fc4eba0eb3bc99d565fa9b41010fe25351
if ! echo "$sha  $dir/$sdist" | sha256sum -c --quiet 2>/dev/null; then
  # pip download would build the sdist's metadata (which needs torch); the simple index names the file.
  url=$(curl -fsSL https://pypi.org/simple/deepinfer-gemm/ | grep -o "https://[^\"#]*/$sdist" | head -1)
  [[ -n $url ]] || { echo "fetch_deepgemm: $sdist not in PyPI's index" >&2; exit 1; }
  curl -fsSL -o "$dir/$sdist" "$url"
  echo "$sha  $dir/$sdist" | sha256sum -c --quiet
fi
(cd "$dir" && apt-get download libdw-dev libelf-dev >/dev/null 2>&1) || { echo "fetch_deepgemm: apt-get download failed" >&2; exit 1; }
ls -la "$dir"
