#!/usr/bin/env bash
# One GPU session: the GPU tests, the demo, the benchmark (and optionally the sanitizers), with
# every log under OUTDIR. Meant for the H200 machine, over a build directory made elsewhere.
#   tools/gpu_session.sh OUTDIR [tests|demo|bench|sanitize|all]...
set -u
out=${1:?usage: gpu_session.sh OUTDIR [steps]}
shift
steps=${*:-all}
mkdir -p "$out"
b=build
export DSA_INDEXER_CACHE_DIR=${DSA_INDEXER_CACHE_DIR:-/tmp/dsa_indexer_cache}
want() { [[ " $steps " == *" all "* || " $steps " == *" $1 "* ]]; }
run() {  # name timeout command...
  local name=$1 t=$2
  shift 2
  local t0=$SECONDS
  timeout "$t" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  tail -n 25 "$out/$name.log"
  return 0
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv; } >"$out/summary.txt" 2>&1
cat "$out/summary.txt"
if want tests; then
  run gpu_reference 150 $b/tests/dsa_gpu_tests "[reference]" --durations yes
  run gpu_generic 170 $b/tests/dsa_gpu_tests "[generic]" --durations yes
  run readme_example 30 $b/tests/readme_example
fi
want demo && run demo 60 $b/tools/dsa-indexer demo
want bench && run bench 150 $b/tools/dsa-indexer bench --json "$out/bench.json"
if want sanitize; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    run "sanitize_$tool" 200 "$cs" --tool "$tool" --error-exitcode 9 $b/tests/dsa_gpu_tests "[generic]" -c "generic: partly visible block left of the last one is masked"
  done
fi
exit 0
