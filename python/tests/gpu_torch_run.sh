#!/usr/bin/env bash
# Issues 13 and 20 on the GPU machine (H200, torch installed): the registered operators' tests
# (scores and top-k), the cuDNN-frontend side-by-side tests (the forward wrapper, and the top-k
# wrapper against cuDNN-frontend's standalone top-k) and the host-cost measurement, every log
# under OUTDIR.
#
#   python/tests/gpu_torch_run.sh OUTDIR [WHEEL_DIR...]
#
# Every step has a timeout; the last one (the binding tests on the operator) runs only when the
# others left time, so that a run stays within one device call.
# WHEEL_DIR...: cuDNN-frontend's wheels as bench/peers.py --wheels takes them (e.g.
# /tmp/dsa_peers_stage .whl/parts/p2 after a first call that staged part 1); without them the
# side-by-side test skips and the host-cost table has no cuDNN-frontend rows.
#
# Needs build/libdsa_indexer.so.0.1.0 (else build/libdsa_indexer.so). The operator library
# build/libdsa_indexer_torch.so is used if it loads; otherwise it is compiled here with g++
# against this machine's torch (about 20 s; CMake's -DDSA_INDEXER_BUILD_TORCH_OP=ON does the
# same with the whole build, which needs libfmt). build/tools/dsa-indexer, when present, gives
# the C++ host-cost figure. Writes OUTDIR/summary.txt, one log per step, OUTDIR/docs/hostcost.json
# and OUTDIR/docs/BENCHMARKS.md (the generated host-cost section in place).
set -u
out=${1:?usage: gpu_torch_run.sh OUTDIR [WHEEL_DIR...]}
shift
wheels=("$@")
cd "$(dirname "$0")/../.."
mkdir -p "$out"
py=${PYTHON:-python3}
b=build
lib=$(ls $b/libdsa_indexer.so.*.*.* 2>/dev/null | head -1)
lib=${lib:-$b/libdsa_indexer.so}
# The operator's NEEDED entry is the soname; a carried build directory may lack the links.
[ -e $b/libdsa_indexer.so.0 ] || ln -sf "$(basename "$lib")" $b/libdsa_indexer.so.0
export DSA_INDEXER_LIBRARY=$lib
export DSA_INDEXER_TORCH_OP=$b/libdsa_indexer_torch.so
export DSA_INDEXER_CACHE_DIR=${DSA_INDEXER_CACHE_DIR:-/tmp/dsa_indexer_cache}
export PYTHONUNBUFFERED=1
t_start=$SECONDS

run() {  # name timeout command...
  local name=$1 t=$2
  shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  tail -n 15 "$out/$name.log"
}

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  $py -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$out/summary.txt" 2>&1
cat "$out/summary.txt"

op_loads() {
  $py -c 'import sys; sys.path.insert(0, "python"); import dsa_indexer; b = dsa_indexer.backend(); print(b); sys.exit(b.name != "torch.ops")' \
    >>"$out/op_build.log" 2>&1
}
if ! op_loads; then
  # The flags of python/csrc/CMakeLists.txt, without CMake (this machine may lack libfmt).
  torch_dir=$($py -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
  t0=$SECONDS
  g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -o $b/libdsa_indexer_torch.so python/csrc/torch_op.cpp python/csrc/torch_topk_op.cpp \
    -Iinclude -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda_inc" \
    -L"$torch_dir/lib" -Wl,--no-as-needed "$lib" -lc10 -lc10_cuda -ltorch_cpu -ltorch_cuda -ltorch -Wl,-rpath,'$ORIGIN' \
    >>"$out/op_build.log" 2>&1
  echo "== op_build: rc=$? in $((SECONDS - t0)) s (g++ against $torch_dir)" | tee -a "$out/summary.txt"
  op_loads || { echo "== the operator does not load; see op_build.log" | tee -a "$out/summary.txt"; tail -n 20 "$out/op_build.log"; }
fi
tail -n 1 "$out/op_build.log" | tee -a "$out/summary.txt"

pyt=($py -m pytest -q -rs -p no:cacheprovider)
# GPU_TORCH_STEPS picks the steps (default all): op topk side_by_side hostcost binding
steps=" ${GPU_TORCH_STEPS:-op topk side_by_side hostcost binding} "
want() { [[ "$steps" == *" $1 "* ]]; }
want op && run torch_op_tests ${T_OP_TESTS:-150} "${pyt[@]}" python/tests/test_torch_fake.py python/tests/test_torch_op_gpu.py
# The top-k through both backends (the operators and ctypes), CUDA graphs, torch.compile.
want topk && run topk_tests ${T_TOPK_TESTS:-150} "${pyt[@]}" python/tests/test_topk_gpu.py
want side_by_side && run cudnn_side_by_side ${T_SIDE_BY_SIDE:-150} "${pyt[@]}" python/tests/test_cudnn_compat_gpu.py ${wheels[@]:+--wheels "${wheels[@]}"}
cli=none
[ -x $b/tools/dsa-indexer ] && cli=$b/tools/dsa-indexer
want hostcost && run hostcost ${T_HOSTCOST:-120} $py bench/hostcost.py --out "$out/docs" --cli "$cli" ${wheels[@]:+--wheels "${wheels[@]}"}
if want binding && [ -z "${SKIP_BINDING_TESTS:-}" ] && [ $((SECONDS - t_start)) -lt 150 ]; then
  run binding_tests_on_the_op 90 "${pyt[@]}" python/tests/test_gpu.py
else
  echo "== binding_tests_on_the_op: not run (time)" | tee -a "$out/summary.txt"
fi
echo "== total $((SECONDS - t_start)) s" | tee -a "$out/summary.txt"
