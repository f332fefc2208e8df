#!/usr/bin/env bash
# DeepGEMM 2.8.2 as a measured peer of the FP8 rows (issue 22), on the GPU machine: builds it from
# the files tools/fetch_deepgemm.sh put in DIR (carried; the machine has no network) into DIR/site,
# then makes one small fp8_fp4_mqa_logits call under Python's faulthandler (and gdb when installed),
# so that a crash leaves its stack in OUTDIR/deepgemm_call.log. On success, PYTHONPATH=DIR/site
# makes `bench/peers.py --precision fp8` measure its column (bench/peers_fp8.py).
#   bench/deepgemm_peer.sh DIR OUTDIR
set -u
dir=${1:?usage: deepgemm_peer.sh DIR OUTDIR}
out=${2:?usage: deepgemm_peer.sh DIR OUTDIR}
mkdir -p "$out" "$dir/root" "$dir/site"
dir=$(cd "$dir" && pwd)  # absolute: pip builds in a temporary directory, where a relative include path names nothing
py=${PYTHON:-python3}
# The elfutils headers from the Debian packages (dpkg-deb, else ar + tar).
for deb in "$dir"/libdw-dev_*.deb "$dir"/libelf-dev_*.deb; do
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$deb" "$dir/root"
  else
    (tmp=$(mktemp -d) && cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$dir/root" && rm -rf "$tmp")
  fi
done
export CPLUS_INCLUDE_PATH="$dir/root/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}"
export C_INCLUDE_PATH="$dir/root/usr/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
t0=$SECONDS
# How it builds and runs there (session 19): with the interpreter's recorded compiler
# (/opt/gcc/bin/g++, a wrapper around g++ 13.3) the first call crashed inside std::regex in
# deep_jit::CUDA::get_compiler_info (an endless recursion; with -Bsymbolic-functions added, a wrong
# locale-facet call instead); with the system g++ and -Bsymbolic-functions it works. Which of the
# two is needed, and what the wrapper changes, was not separated. DG_LDFLAGS and DG_CXX override.
export LDFLAGS="${DG_LDFLAGS--Wl,-Bsymbolic-functions}${LDFLAGS:+ $LDFLAGS}"
cxx=${DG_CXX:-$(command -v /usr/bin/g++ || command -v g++)}
export CXX=$cxx LDSHARED="$cxx -shared"
DG_FORCE_BUILD=1 $py -m pip install --no-deps --no-build-isolation --no-index --target "$dir/site" "$dir"/deepinfer_gemm-*.tar.gz \
  >"$out/deepgemm_build.log" 2>&1
echo "== deepgemm build: rc=$? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
tail -n 5 "$out/deepgemm_build.log"
cat >"$out/deepgemm_call.py" <<'PY'
import faulthandler, sys
faulthandler.enable()
import torch
import deep_gemm
print("deep_gemm", getattr(deep_gemm, "__version__", "?"), deep_gemm.__file__, flush=True)
S, S_kv, H, D = 128, 1024, 64, 128
q = torch.randn(S, H, D, device="cuda").to(torch.float8_e4m3fn)
kv = torch.randn(S_kv, D, device="cuda").to(torch.float8_e4m3fn)
kv_scale = torch.rand(S_kv, device="cuda") + 0.5
weights = torch.randn(S, H, device="cuda")
ks = torch.zeros(S, dtype=torch.int32, device="cuda")
ke = torch.arange(S, dtype=torch.int32, device="cuda") + (S_kv - S + 1)
fn = getattr(deep_gemm, "fp8_fp4_mqa_logits", None) or deep_gemm.fp8_mqa_logits  # 2.8's name, else the older one
print("calling", fn.__name__, flush=True)
if "clean_logits" in (fn.__doc__ or ""):
    logits = fn((q, None), (kv, kv_scale), weights, ks, ke, clean_logits=True)
else:  # 2.8.2: compressed logits (S, max_seqlen_k) only, cells past a row's window not written
    logits = fn((q, None), (kv, kv_scale), weights, ks, ke, S_kv)
torch.cuda.synchronize()
print("ok", tuple(logits.shape), logits.stride(), logits.dtype, flush=True)
PY
if command -v gdb >/dev/null; then
  PYTHONPATH="$dir/site" timeout 300 gdb -q -batch -ex run -ex bt --args $py "$out/deepgemm_call.py" >"$out/deepgemm_call.log" 2>&1
else  # without gdb: the native stack from a preloaded SIGSEGV/SIGABRT handler (backtrace(3)), when built
  pre=""
  gcc -shared -fPIC -O1 -o "$dir/segv_bt.so" "$(dirname "$0")/segv_backtrace.c" && pre=$dir/segv_bt.so
  PYTHONPATH="$dir/site" LD_PRELOAD=$pre timeout 300 $py "$out/deepgemm_call.py" >"$out/deepgemm_call.log" 2>&1
fi
echo "== deepgemm call: rc=$? ($(grep -c '^ok ' "$out/deepgemm_call.log") ok)" | tee -a "$out/summary.txt"
tail -n 30 "$out/deepgemm_call.log"
find "$HOME/.deep_gemm" -maxdepth 3 2>/dev/null | head -20 >"$out/deepgemm_cache.txt"  # what its JIT left
