#!/usr/bin/env bash
# One GPU session: the GPU tests, the demo, the benchmark (and optionally the sanitizers), with
# every log under OUTDIR. Meant for the H200 machine, over a build directory made elsewhere.
#   tools/gpu_session.sh OUTDIR [tests|topk|python|demo|bench|jitcost|hostcost|sanitize|racecheck|profile|all]...
#                                [topk_bench|topk_peers|fused|fp8|fp8_tests|fp8_bench|fp8_peers|validate9a|validate9b|perf9|validate10]
#                                [validate11a|validate11b|perf11a|perf11b|perf12|s12|s12b|s13|s13b|s13c|s13d|s14|s14b|s14c|s15|s15b|s15c|s16]
#                                [digests|ab_epilogue|s17a|s17b|s18|s18min|s18b|s19|s19a|s19b|s20a|s20b|s20c|s20d|s21a|s21b|s21c|s21d|s21e|s22a|s22b|s22c|s22d|s23a|s23b|s23c|s24a|s24b|s24c|s25a|s25b|s25c|s26a|s26b|s26c|s27a|s27b|s27c|s27d|s28b|s28c|s28d|s28e|s29a|s29b|s29c|s29d|s29e|s30a|s30b|s31a|s32a|s32b|s32c|s33a|s34a|deepgemm|trace]
# topk_bench (not in all) runs `dsa-indexer demo --op topk` and the CLI's top-k rows (bench --op
# topk, JSON in OUTDIR/topk_bench.json); topk_peers (not in all; after topk_bench, on the same
# machine) runs bench/peers.py --op topk with that JSON, and cuDNN-frontend from the wheel folders
# in PEERS_WHEELS (space-separated; see bench/README.md), writing OUTDIR/docs.
# fp8 (not in all) runs issue 22's FP8 path: the C++ FP8 GPU tests (dsa_gpu_tests "[fp8]"), the
# Python FP8 GPU tests (pytest -k fp8 over test_gpu, test_topk_gpu, test_torch_op_gpu when the
# operator library is built, and test_cudnn_compat_gpu with cuDNN-frontend from PEERS_WHEELS), the
# CLI's FP8 rows (bench --in e4m3, JSON in OUTDIR/fp8_bench.json) and bench/peers.py --precision
# fp8 (with PEERS_WHEELS), writing OUTDIR/docs; fp8_tests, fp8_bench and fp8_peers run its parts
# alone (the tests, the CLI's rows, the peers), for device calls of at most 10 minutes.
# racecheck (not in all: it takes minutes) runs every GPU test case of the families under
# compute-sanitizer racecheck, one process per test case, RACECHECK_JOBS (4) at a time, each
# limited to RACECHECK_TIMEOUT (540) seconds.
set -u
out=${1:?usage: gpu_session.sh OUTDIR [steps]}
shift
steps=${*:-all}
mkdir -p "$out"
b=${DSA_BUILD_DIR:-build}  # the build directory (carried)
lib=$(ls $b/libdsa_indexer.so.*.*.* 2>/dev/null | head -1)  # the carried library file (links may not travel)
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
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# ncu (full set, source counters) of the first fused sweep launch of [topk_perf] (S_q 8192, S_k
# 16384): its per-instruction page as CSV and its details page, the report itself removed.
ncu_sweep() {  # timeout
  run ncu_sweep "$1" "$ncu_bin" --clock-control none --set full --import-source no --kernel-name regex:sm90_topk_fused_sweep \
    --launch-count 1 -o "$out/sweep" $b/tests/dsa_gpu_tests "[topk_perf]"
  [[ -f $out/sweep.ncu-rep ]] && "$ncu_bin" --import "$out/sweep.ncu-rep" --page source --csv --print-source sass >"$out/sweep_source.csv" 2>&1
  [[ -f $out/sweep.ncu-rep ]] && "$ncu_bin" --import "$out/sweep.ncu-rep" --page details >"$out/sweep_details.txt" 2>&1
  rm -f "$out/sweep.ncu-rep"
}
# every kernel's time in the first fused call of [topk_perf] (its blocks' sweeps, redo launches
# and candidates kernels).
ncu_times() {  # timeout
  run ncu_times "$1" "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum \
    --kernel-name regex:"sm90_topk_(candidates|fused_sweep)" --launch-count 9 $b/tests/dsa_gpu_tests "[topk_perf]"
}
# The lse rows of the top-k bench (S_k 16384 and 131072, B 4; k 2048), the lane order off and on.
lse_rows() {
  for lanes in off on; do
    run "topk_bench_lse_$lanes" 150 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --match "S_k 1" --topk-lse --topk-lse-lanes $lanes
  done
}
# memcheck and racecheck over one small call of every fused launch kind ("[topk_fused_small]").
sanitize_fused() {  # memcheck timeout, racecheck timeout
  run sanitize_memcheck_fused "$1" "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small]"
  run sanitize_racecheck_fused "$2" "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small]"
}
# sanitize_tags NAME TAGS RACECHECK_TIMEOUT [MEMCHECK_TIMEOUT]: racecheck (racecheck_NAME) and, given
# a timeout, memcheck (memcheck_NAME) over the GPU test cases of TAGS, one process each.
sanitize_tags() {
  run "racecheck_$1" "$3" "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "$2"
  [[ -n ${4:-} ]] && run "memcheck_$1" "$4" "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "$2"
  return 0
}
# racecheck_cases TAGS TIMEOUT [DEADLINE]: every GPU test case of TAGS under compute-sanitizer
# racecheck, one process per case (tools/racecheck_case.sh), RACECHECK_JOBS (4) at a time, each
# limited to TIMEOUT seconds and all to the epoch-seconds DEADLINE; results in OUTDIR/racecheck.
racecheck_cases() {
  local t0=$SECONDS
  rdir="$out/racecheck"
  mkdir -p "$rdir"
  $b/tests/dsa_gpu_tests --list-test-names-only "$1" | sed '/^$/d' >"$rdir/names.txt"
  export cs b rdir RACECHECK_TIMEOUT=$2 RACECHECK_DEADLINE=${3:-}
  nl -nrz -w2 "$rdir/names.txt" | xargs -P "${RACECHECK_JOBS:-4}" -d '\n' -n1 tools/racecheck_case.sh
  sort "$rdir/results.txt" -o "$rdir/results.txt"
  echo "== racecheck: $(grep -c " rc=0 " "$rdir/results.txt")/$(wc -l <"$rdir/names.txt") test cases clean (rc 0) in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  cat "$rdir/results.txt"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv; } >"$out/summary.txt" 2>&1
cat "$out/summary.txt"
if want tests; then
  run gpu_reference 150 $b/tests/dsa_gpu_tests "[reference]" --durations yes
  run gpu_generic 170 $b/tests/dsa_gpu_tests "[generic]" --durations yes
  run gpu_lean 200 $b/tests/dsa_gpu_tests "[lean]" --durations yes
  run gpu_compile_mode 400 $b/tests/dsa_gpu_tests "[async],[record]" --durations yes
  run readme_example 30 $b/tests/readme_example
  run multi_gpu 60 $b/tests/dsa_multi_gpu_tests
fi
if want topk; then
  run gpu_topk 300 $b/tests/dsa_gpu_tests "[topk_select],[topk]" --durations yes
  run gpu_topk_fused 300 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  run topk_perf 200 $b/tests/dsa_gpu_tests "[topk_perf]"
fi
# validate9a / validate9b (not in all): the GPU paths built without a device in sessions 8 and 9,
# in two calls of at most 10 minutes each: (a) [lean] (with the split variant and H 32 / 16) and
# [fp8]; (b) the fused top-k against the unfused path, the candidates kernel, the fused timing.
if [[ " $steps " == *" validate9a "* ]]; then
  run gpu_lean 290 $b/tests/dsa_gpu_tests "[lean]" --durations yes
  run gpu_fp8 280 $b/tests/dsa_gpu_tests "[fp8]" --durations yes
fi
if [[ " $steps " == *" validate9b "* ]]; then
  run gpu_topk_fused 250 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  run gpu_topk_select 90 $b/tests/dsa_gpu_tests "[topk_select]" --durations yes
  run topk_perf 200 $b/tests/dsa_gpu_tests "[topk_perf]"
fi
# validate10 (not in all): what session 10 left for the GPU: main's FP8 kernels (x + |x| head
# sum, lean FP8 at 8 KV stages) through the whole [fp8] suite, memcheck over it, racecheck over
# the FP8 cases lean serves (lean == generic on 11 shapes, THD), and the CLI's FP8 rows with the
# FP8 GEMM ceiling (fixed in session 10).
if [[ " $steps " == *" validate10 "* ]]; then
  run gpu_fp8 200 $b/tests/dsa_gpu_tests "[fp8]" --durations yes
  run sanitize_memcheck_fp8 200 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[fp8]"
  run sanitize_racecheck_fp8 150 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests \
    "fp8: lean == generic bitwise,fp8: THD layouts against the fp64 oracle"
  run fp8_bench 150 $b/tools/dsa-indexer bench --in e4m3 --quick --json "$out/fp8_bench.json"
fi
# validate11a/b, perf11a/b (not in all): session 11's lean with four consumer warpgroups (lean4,
# by set_lean_consumers; built without a device) and lean's lse. validate11a: [lean] (ragged
# S_k's producer registers changed), [lean4], [lean_lse], [fp8]; validate11b: memcheck over
# [lean4] and [lean_lse], racecheck over a case of each kind, memcheck over [fp8]. perf11a: the
# whole bf16 table with lean4 rows beside lean and generic; perf11b: the FP8 rows with lean4
# beside lean, and ncu of both at the headline.
if [[ " $steps " == *" validate11a "* ]]; then
  run gpu_lean 200 $b/tests/dsa_gpu_tests "[lean]" --durations yes
  run gpu_lean4 150 $b/tests/dsa_gpu_tests "[lean4]" --durations yes
  run gpu_lean_lse 130 $b/tests/dsa_gpu_tests "[lean_lse]" --durations yes
  run gpu_fp8 110 $b/tests/dsa_gpu_tests "[fp8]" --durations yes
fi
if [[ " $steps " == *" validate11b "* ]]; then
  run sanitize_memcheck_lean4 200 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[lean4],[lean_lse]"
  run sanitize_racecheck_lean4 150 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests \
    "lean4: run to run bitwise*,lean4: FP8 == generic FP8 bitwise*,lean lse: THD packings*"
  run sanitize_memcheck_fp8 150 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[fp8]"
fi
# A copy of main's command-line tool as $b/tools/dsa-indexer-main (statically linked, its
# kernels embedded) adds main's lean rows to the same run: the A/B of the two-consumer kernels
# whose weights gained a second buffer (fp32 W, FP8).
if [[ " $steps " == *" perf11a "* ]]; then
  run bench_lean4 420 $b/tools/dsa-indexer bench --family lean,lean4,generic --reps 10 --json "$out/bench_lean4.json"
  [[ -x $b/tools/dsa-indexer-main ]] && run bench_main 120 $b/tools/dsa-indexer-main bench --family lean --match "S_q 8192" --reps 10
fi
if [[ " $steps " == *" perf11b "* ]]; then
  run fp8_bench_lean4 240 $b/tools/dsa-indexer bench --in e4m3 --family generic,lean,lean4 --json "$out/fp8_bench_lean4.json"
  [[ -x $b/tools/dsa-indexer-main ]] && run fp8_bench_main 120 $b/tools/dsa-indexer-main bench --in e4m3 --family lean --quick
  for fam in lean lean4; do
    run ncu_$fam 120 "$ncu_bin" --clock-control none --kernel-name regex:sm90_indexer_lean --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
      $b/tools/dsa-indexer bench --family $fam --match "bshd H64 r2 S_q 8192" --reps 2
  done
fi
# perf12 (not in all): session 12's measurement in one call of at most 10 minutes: lean, lean4
# and generic on the S_q 8192 rows (H 64 / 32 / 16, fp32 W, B 4) and the prefill rows; THD ratio
# 4 with 8 segments also with lean4f (free-running consumers), as the H 64 S_q 8192 rows; the S_k
# 16384 prefill rows with lse (the split variant and its combine); the FP8 headline row with
# lean4; ncu of lean4 at the headline.
if [[ " $steps " == *" perf12 "* ]]; then
  for m in "S_q 8192:150:lean,lean4,generic" "prefill:90:lean,lean4,generic" "r4 8 segs T_q 8192:60:lean,lean4,lean4f,generic" \
           "bshd H64 r2 S_q 8192:50:lean4f"; do
    sel=${m%%:*}
    rest=${m#*:}
    name=bench_${sel// /_}
    [[ ${rest#*:} == lean4f ]] && name=${name}_lean4f
    run "$name" "${rest%%:*}" $b/tools/dsa-indexer bench --family "${rest#*:}" --reps 10 --match "$sel" --json "$out/$name.json"
  done
  run bench_lse 70 $b/tools/dsa-indexer bench --family lean,lean4,generic --reps 10 --lse --match "S_k 16384" --json "$out/bench_lse.json"
  run fp8_bench_lean4 90 $b/tools/dsa-indexer bench --in e4m3 --family generic,lean,lean4 --quick --json "$out/fp8_bench_lean4.json"
  run ncu_lean4 50 "$ncu_bin" --clock-control none --kernel-name regex:sm90_indexer_lean --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    $b/tools/dsa-indexer bench --family lean4 --match "bshd H64 r2 S_q 8192" --reps 2
fi
# s12 (not in all): validation and first measurement of lean-wide in one call of at most 10
# minutes, for a session with little device time: [lean4] (with the free-running consumers),
# [lean_lse] (the split variant's combine), the H 64 S_q 8192 rows and THD ratio 4 with 8 segments
# for lean, lean4, lean4f and generic, the FP8 headline row, lean FP8 == generic FP8 (two
# consumers: their weights gained a second buffer), then [lean]; at most 8 files.
if [[ " $steps " == *" s12 "* ]]; then
  run gpu_lean4 130 $b/tests/dsa_gpu_tests "[lean4]" --durations yes
  run gpu_lean_lse 100 $b/tests/dsa_gpu_tests "[lean_lse]" --durations yes
  run bench_head 70 $b/tools/dsa-indexer bench --family lean,lean4,lean4f,generic --reps 10 --match "bshd H64 r2 S_q 8192"
  run bench_thd 45 $b/tools/dsa-indexer bench --family lean,lean4,lean4f,generic --reps 10 --match "r4 8 segs T_q 8192"
  run fp8_bench 60 $b/tools/dsa-indexer bench --in e4m3 --family generic,lean,lean4 --quick
  run gpu_fp8_lean 30 $b/tests/dsa_gpu_tests "fp8: lean == generic bitwise" --durations yes
  run gpu_lean 45 $b/tests/dsa_gpu_tests "[lean]" --durations yes
fi
# s12b (not in all): s12's first half alone (about 5 minutes): [lean4], [lean_lse], the H 64
# S_q 8192 rows, the FP8 headline row.
if [[ " $steps " == *" s12b "* ]]; then
  run gpu_lean4 120 $b/tests/dsa_gpu_tests "[lean4]" --durations yes
  run gpu_lean_lse 90 $b/tests/dsa_gpu_tests "[lean_lse]" --durations yes
  run bench_head 60 $b/tools/dsa-indexer bench --family lean,lean4,lean4f,generic --reps 10 --match "bshd H64 r2 S_q 8192"
  run fp8_bench 45 $b/tools/dsa-indexer bench --in e4m3 --family generic,lean,lean4 --quick
fi
# s13 (not in all): session 13's one call of at most 10 minutes: the fused top-k v2 (selector
# warps beside the consumers) bitwise against the unfused path, then, if that passed, its timing
# ([topk_perf]); lean-wide's [lean4] and [lean_lse]; the H 64 S_q 8192 rows of lean, lean4,
# lean4f and generic.
if [[ " $steps " == *" s13 "* ]]; then
  run gpu_topk_fused 200 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  grep -q "All tests passed" "$out/gpu_topk_fused.log" && run topk_perf 130 $b/tests/dsa_gpu_tests "[topk_perf]"
  run gpu_lean4 100 $b/tests/dsa_gpu_tests "[lean4]" --durations yes
  run gpu_lean_lse 80 $b/tests/dsa_gpu_tests "[lean_lse]" --durations yes
  run bench_head 50 $b/tools/dsa-indexer bench --family lean,lean4,lean4f,generic --reps 10 --match "bshd H64 r2 S_q 8192"
fi
# s13b (not in all): ncu (full set, source counters) of the first fused sweep launch of
# [topk_perf] (S_q 8192, S_k 16384), its per-instruction page as CSV, then [lean4] and
# [lean_lse] with the time they take on a fresh machine.
if [[ " $steps " == *" s13b "* ]]; then
  ncu_sweep 150
  run gpu_lean4 230 $b/tests/dsa_gpu_tests "[lean4]" --durations yes
  run gpu_lean_lse 180 $b/tests/dsa_gpu_tests "[lean_lse]" --durations yes
fi
# s13c (not in all): what lean-wide still needs: [lean] (the two-consumer kernels' second weight
# buffer, the ragged producer's registers) and lean FP8 == generic FP8; the fused top-k v2.1
# ([topk_fused], then [topk_perf] and ncu of its first sweep if that passed); the THD ratio-4
# 8-segment rows of lean, lean4, lean4f and generic.
if [[ " $steps " == *" s13c "* ]]; then
  run gpu_lean 170 $b/tests/dsa_gpu_tests "[lean]" --durations yes
  run gpu_fp8_lean 40 $b/tests/dsa_gpu_tests "fp8: lean == generic bitwise" --durations yes
  run gpu_topk_fused 90 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  fused_ok=$(grep -c "All tests passed" "$out/gpu_topk_fused.log")
  [[ $fused_ok == 1 ]] && run topk_perf 100 $b/tests/dsa_gpu_tests "[topk_perf]"
  run bench_thd 45 $b/tools/dsa-indexer bench --family lean,lean4,lean4f,generic --reps 10 --match "r4 8 segs T_q 8192"
  [[ $fused_ok == 1 ]] && ncu_sweep 60
fi
# s14 (not in all): the fused top-k's sampled sweep (session 14): [topk_fused] (sampled, its
# redo, the exact sweep), then [topk_perf] and ncu of one sampled sweep if that passed.
if [[ " $steps " == *" s14 "* ]]; then
  run gpu_topk_fused 150 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  if grep -q "All tests passed" "$out/gpu_topk_fused.log"; then
    run topk_perf 200 $b/tests/dsa_gpu_tests "[topk_perf]"
    ncu_sweep 90
    ncu_times 90
  fi
fi
# s14b (not in all): the candidates kernel's column order by bitmap (against the select kernel),
# the fused top-k's tests and its timing.
if [[ " $steps " == *" s14b "* ]]; then
  run gpu_topk_cand 60 $b/tests/dsa_gpu_tests "topk candidates: bitwise the select kernel's outputs from candidate lists of the same rows" --durations yes
  run gpu_topk_fused 150 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  grep -q "All tests passed" "$out/gpu_topk_fused.log" && run topk_perf 200 $b/tests/dsa_gpu_tests "[topk_perf]"
fi
# s15 (not in all): s14b, then every kernel's time in the first fused call of [topk_perf] (S_k
# 16384: 3 blocks x sweep and redo, candidates) when the fused tests passed.
if [[ " $steps " == *" s15 "* ]]; then
  run gpu_topk_cand 90 $b/tests/dsa_gpu_tests "topk candidates: bitwise the select kernel's outputs from candidate lists of the same rows" --durations yes
  run gpu_topk_fused 150 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  if grep -q "All tests passed" "$out/gpu_topk_fused.log"; then
    run topk_perf 220 $b/tests/dsa_gpu_tests "[topk_perf]"
    ncu_times 90
  fi
fi
# s15b (not in all): [topk_perf] (with the one-block and 12288-entry rows), then s14c's
# sanitizers with shorter limits, for one call of at most 10 minutes.
if [[ " $steps " == *" s15b "* ]]; then
  run topk_perf 130 $b/tests/dsa_gpu_tests "[topk_perf]"
  sanitize_fused 180 260
fi
# s15c (not in all): ncu of the lean scores kernel and of the fused sweep at the same shape
# ("[topk_profile]": S_q 8192, S_k 16384, one call each), their details pages side by side.
if [[ " $steps " == *" s15c "* ]]; then
  for kn in sm90_indexer_lean sm90_topk_fused_sweep; do
    run "ncu_$kn" 120 "$ncu_bin" --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy \
      --kernel-name regex:"$kn" --launch-count 1 $b/tests/dsa_gpu_tests "[topk_profile]"
  done
fi
# s16 (not in all): the fused top-k's validation and timing in one call of at most 10 minutes:
# [topk_fused] (with session 15's last cases: several blocks at a 64 MiB budget, lists past the
# candidates kernel's staging), the sanitizers over [topk_fused_small], [topk_perf], then the
# CLI's top-k rows (cold and warm, fused columns included; k 2048 only) when the tests passed.
if [[ " $steps " == *" s16 "* ]]; then
  run gpu_topk_fused 150 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  sanitize_fused 60 90
  if grep -q "All tests passed" "$out/gpu_topk_fused.log"; then
    run topk_perf 130 $b/tests/dsa_gpu_tests "[topk_perf]"
    run topk_bench 150 $b/tools/dsa-indexer bench --op topk --topk-k 2048 --json "$out/topk_bench.json"
  fi
fi
# s17a (not in all): issue 23's sanitizers on lean's newer variants: memcheck over the split
# variant and H 32 / 16 ([lean_split], [lean_heads]), then racecheck over their cases, one
# process per case (the racecheck step's script), all within about 9 minutes.
if [[ " $steps " == *" s17a "* ]]; then
  run sanitize_memcheck_lean 200 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[lean_split],[lean_heads]"
  racecheck_cases "[lean_split],[lean_heads]" 300 $(($(date +%s) + 330))
fi
# s18 (not in all): the output digests against tests/gpu/golden_digests.txt first (LeanArgs grew
# a field, dsa_window.cuh a template parameter: every kernel's bits must hold), then the
# window_start columns (issue 22's DeepGEMM layout): [window_start], the PyTorch operator built
# against this machine's torch (python/tests/gpu_torch_run.sh with no test step) and the binding's
# window / DeepGEMM tests through it and through ctypes, in about 4 minutes. s18min: the same
# without the operator (the binding's tests through ctypes only), for a call of at most 4 minutes.
if [[ " $steps " == *" s18 "* || " $steps " == *" s18min "* ]]; then
  run digests 300 $b/tests/dsa_gpu_tests "[digests]"  # ~95 s on a cold kernel cache
  run gpu_window_start 90 $b/tests/dsa_gpu_tests "[window_start]" --durations yes
  op_lib=""
  if [[ " $steps " == *" s18 "* ]]; then
    GPU_TORCH_STEPS=none run torch_op 60 bash python/tests/gpu_torch_run.sh "$out/torch"
    tar -C "$out" -czf "$out/torch.tgz" torch && rm -rf "$out/torch"
    op_lib=$b/libdsa_indexer_torch.so
  fi
  run python_window 75 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} ${op_lib:+DSA_INDEXER_TORCH_OP=$op_lib} \
    python3 -m pytest -q -rs -p no:cacheprovider -k "window or deepgemm" python/tests/test_gpu.py
fi
# s19 (not in all; carry build/peers/deepgemm): session 19's FP8 weight fold (lean_fp8_weights)
# checked and measured, about 9-10 minutes, so in two device calls: s19a, [digests] first (its
# bits must hold), lean FP8 == generic FP8 (BSHD, split, H 32 / 16, THD), the CLI's FP8 rows of
# lean, lean4 and generic (every cell bitwise against generic FP8) and test_gpu.py -k deepgemm
# (about 5 minutes); s19b, deepgemm (the FP8 rows: lean FP8, our deepgemm_compat drop-in and
# DeepGEMM) and trace (the per-item Q and weight waits).
[[ " $steps " == *" s19 "* ]] && steps="$steps s19a s19b"
if [[ " $steps " == *" s19a "* ]]; then
  run digests 300 $b/tests/dsa_gpu_tests "[digests]"
  run fp8_lean_generic 150 $b/tests/dsa_gpu_tests "fp8: lean == generic bitwise"
  run fp8_families 150 $b/tools/dsa-indexer bench --in e4m3 --family lean,lean4,generic --reps 10 --json "$out/fp8_families.json"
  # the DeepGEMM drop-in's layouts and call forms through ctypes (2.8.2's positional max_seqlen_k)
  run python_deepgemm 60 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} \
    python3 -m pytest -q -rs -p no:cacheprovider -k deepgemm python/tests/test_gpu.py
fi
[[ " $steps " == *" s19b "* ]] && steps="$steps deepgemm trace"
# s20a / s20b (not in all): session 20's FP8 lean (two Q buffers, the consumers fold their weights)
# checked and measured in two device calls: s20a, [digests] (the recorded bits must hold), the
# whole [fp8] suite (lean == generic bitwise, lean4 FP8, lean lse FP8, THD, edges), the CLI's FP8
# rows of lean, lean4 and generic, and the trace (about 7 minutes); s20b, memcheck over "fp8: lean
# == generic bitwise" and [fp8_reuse] (several items per CTA: the Q buffers reused), racecheck
# over [fp8_reuse], then deepgemm.
if [[ " $steps " == *" s20a "* ]]; then
  run digests 300 $b/tests/dsa_gpu_tests "[digests]"
  run gpu_fp8 240 $b/tests/dsa_gpu_tests "[fp8]" --durations yes
  run fp8_families 150 $b/tools/dsa-indexer bench --in e4m3 --family lean,lean4,generic --reps 10 --json "$out/fp8_families.json"
  steps="$steps trace"
fi
# s20c / s20d (not in all; two calls back to back, the machine kept): s20c stages cuDNN-frontend's
# wheels of part 1 (carry .whl/parts/p1 and the library only: 64 MiB); s20d (carry .whl/parts/p2,
# the library, dsa_gpu_tests, dsa-indexer) runs lean's row windows (B 1 explicit windows through its
# THD kernel: [lean_windows], [window_start]), the DeepGEMM drop-in's tests, then the FP8 peers: lean
# and generic FP8, cuDNN-frontend's SM90 FP8 path, our deepgemm_compat drop-in, bf16 lean.
if [[ " $steps " == *" s20c "* ]]; then
  run stage_p1 120 python3 bench/peer_wheels.py stage .whl/parts/p1 --to /tmp/dsa_peers_stage
fi
if [[ " $steps " == *" s20d "* ]]; then
  run gpu_lean_windows 200 $b/tests/dsa_gpu_tests "[lean_windows],[window_start]" --durations yes
  run python_deepgemm 60 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} \
    python3 -m pytest -q -rs -p no:cacheprovider -k deepgemm python/tests/test_gpu.py
  PYTHONUNBUFFERED=1 DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run fp8_peers_cudnn 300 python3 bench/peers.py \
    --precision fp8 --families lean,generic --skip deepgemm --jitcost none --out "$out/docs" --max-seconds 200 \
    --wheels /tmp/dsa_peers_stage .whl/parts/p2
fi
# s21a / s21b (not in all; two calls of at most 10 minutes): what session 20 left unchecked after
# its last kernel change (LeanArgs gained ks / ke / win_stride, appended): s21a, [digests] and every
# lean suite ([lean] with THD, split and H 32 / 16, [lean4], [lean_lse]); s21b, the unfused top-k
# (its windowed blocks pinned to generic) and its FP8 inputs, built in session 20 without a device
# (the C++ case in [topk], the Python ones, memcheck); then `deepgemm` in a third call (DeepGEMM
# beside lean FP8 and our drop-in, now lean's row windows).
if [[ " $steps " == *" s21a "* ]]; then
  run digests 300 $b/tests/dsa_gpu_tests "[digests]"
  run gpu_lean_all 280 $b/tests/dsa_gpu_tests "[lean],[lean4],[lean_lse]" --durations yes
fi
if [[ " $steps " == *" s21b "* ]]; then
  run gpu_topk 240 $b/tests/dsa_gpu_tests "[topk_select],[topk]" --durations yes
  run python_topk_fp8 120 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} \
    python3 -m pytest -q -rs -p no:cacheprovider -k fp8 python/tests/test_topk_gpu.py
  run sanitize_memcheck_topk_fp8 180 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "topk: FP8 inputs select exactly from the FP8 scores"
fi
# s21c (not in all): after s21a / s21b, the lean gate case corrected for row windows (B 1 explicit
# windows are lean's now; B 2 is refused), [lean_windows] and [window_start] after the review's
# shared window arithmetic, the PyTorch operator built here and the FP8 top-k / operator tests
# through it, and our DeepGEMM drop-in beside lean FP8 (no DeepGEMM build), about 5 minutes.
if [[ " $steps " == *" s21c "* ]]; then
  run gpu_lean_gate 60 $b/tests/dsa_gpu_tests "lean: a forced lean call names the failed gate on the real device"
  run gpu_lean_windows 150 $b/tests/dsa_gpu_tests "[lean_windows],[window_start]" --durations yes
  GPU_TORCH_STEPS=none run torch_op 60 bash python/tests/gpu_torch_run.sh "$out/torch"
  tar -C "$out" -czf "$out/torch.tgz" torch && rm -rf "$out/torch"
  run python_fp8_op 150 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} DSA_INDEXER_TORCH_OP=$b/libdsa_indexer_torch.so \
    python3 -m pytest -q -rs -p no:cacheprovider -k fp8 python/tests/test_topk_gpu.py python/tests/test_torch_op_gpu.py
  PYTHONUNBUFFERED=1 DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run fp8_compat 200 python3 bench/peers.py \
    --precision fp8 --families lean --skip cudnn,bf16,deepgemm --jitcost none --out "$out/docs" --max-seconds 150
fi
# s21d / s21e (not in all; two calls): lean THD at H 32 and 16 (q-tiles of 16 and 32 packed
# tokens). s21d: [digests] (H 64's kernels keep their bits), every THD suite and the lean heads
# suites, memcheck over the new THD heads cases; s21e: racecheck over one of them and the THD rows
# of the CLI bench (H 64, 32, 16; lean against generic, same run).
if [[ " $steps " == *" s21d "* ]]; then
  run digests 300 $b/tests/dsa_gpu_tests "[digests]"
  run gpu_thd_heads 200 $b/tests/dsa_gpu_tests "[thd],[lean_heads]" --durations yes
  run sanitize_memcheck_thd_heads 150 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests \
    "lean THD heads: H 32 and 16 lse\, four consumers\, FP8,lean THD heads: H 32 and 16 offsets near INT32_MAX and negative\, empty and 1-token segments"
fi
if [[ " $steps " == *" s21e "* ]]; then
  run sanitize_racecheck_thd_heads 300 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests \
    "lean THD heads: H 32 and 16 offsets near INT32_MAX and negative\, empty and 1-token segments"
  run bench_thd 240 $b/tools/dsa-indexer bench --match thd --reps 10 --json "$out/bench_thd.json"
fi
# s22a / s22b / s22c (not in all; three calls): session 22's top-k policy (unfused blocks within the
# budget at any S_k, lean split where they hold fewer rows than a wave; automatic calls fused past
# half a wave). s22a: the automatic case, then the CLI's top-k rows (auto, unfused and fused by
# name, k 2048 and 512) and the old one-wave blocks at S_k 131072 / 262144 in the same run.
# s22b: the unfused suites and every fused case (its blocks now within 256 MiB); s22c: memcheck
# over the automatic case.
if [[ " $steps " == *" s22a "* ]]; then
  run gpu_topk_auto 120 $b/tests/dsa_gpu_tests "[topk_auto]" --durations yes
  run topk_bench 300 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --json "$out/topk_bench.json"
  for c in "S_k 131072" "S_k 262144"; do
    run "topk_onewave_${c// /_}" 100 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "$c" --topk-one-wave
  done
fi
if [[ " $steps " == *" s22b "* ]]; then
  run gpu_topk 200 $b/tests/dsa_gpu_tests "[topk_select],[topk]" --durations yes
  run gpu_topk_fused 300 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
fi
if [[ " $steps " == *" s22c "* ]]; then
  run sanitize_memcheck_topk_auto 300 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_auto]"
fi
# s22d (not in all): the unfused top-k's THD blocks on lean's row-windows variant (padded to whole
# q-tiles; row-window variants keyed on one q-tile; kTopkLeanWindowBlocks, off until this passes):
# [topk]'s THD case (its saturated packing both ways), the FP8 case, the CLI's THD top-k row both
# ways, [lean_windows], memcheck over the THD case.
if [[ " $steps " == *" s22d "* ]]; then
  run gpu_topk_thd 40 $b/tests/dsa_gpu_tests "topk: THD local and global indices" --durations yes
  run gpu_topk_fp8 60 $b/tests/dsa_gpu_tests "topk: FP8 inputs select exactly from the FP8 scores" --durations yes
  run topk_bench_thd 40 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd --topk-lean-windows off
  run topk_bench_thd_lean 40 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd --topk-lean-windows on
  run gpu_lean_windows 90 $b/tests/dsa_gpu_tests "[lean_windows]" --durations yes
  run sanitize_memcheck_topk_thd 60 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "topk: THD local and global indices"
fi
# s23a (not in all): s22d, then lean THD keyed on one q-tile (every THD variant: one compile for
# every T_q; its code is byte-identical, session 23): the THD cases of lean, lean heads, lean lse,
# lean4, FP8 and the golden digests.
if [[ " $steps " == *" s23a "* ]]; then
  run gpu_lean_thd 240 $b/tests/dsa_gpu_tests "[lean][thd]" --durations yes
  run gpu_lean_thd_more 200 $b/tests/dsa_gpu_tests "lean lse: THD packings against the oracle and bitwise against generic,lean4: THD against the fp64 oracle\, bitwise against generic and two consumers,fp8: THD layouts against the fp64 oracle" --durations yes
  run gpu_digests 120 $b/tests/dsa_gpu_tests "[digests]" --durations yes
fi
# s23b (not in all): where the fused path's time goes at long rows: every kernel's device time
# (ncu, gpu__time_duration) in the top-k bench's S_k 131072 row at k 2048 (two reps: the scores
# alone, the automatic call = fused, unfused and fused by name), summed per kernel name.
if [[ " $steps " == *" s23b "* ]]; then
  run ncu_long 420 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"sm90_" --launch-count 600 $b/tools/dsa-indexer bench --op topk --reps 2 --topk-k 2048 --match "S_k 131072"
  python3 - "$out/ncu_long.log" >"$out/ncu_long_summary.txt" 2>&1 <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
seq, agg = [], collections.OrderedDict()
for r in body:
    if r[mi] != "gpu__time_duration.sum": continue
    name = r[ki].split("(")[0][:90]
    ns = float(r[vi].replace(",", ""))
    seq.append((name, ns))
    a = agg.setdefault(name, [0, 0.0]); a[0] += 1; a[1] += ns
for n, (c, t) in agg.items(): print(f"{c:5d} launches {t/1e6:10.3f} ms total {t/c/1e3:10.1f} us mean  {n}")
print("sequence (name, us):")
for n, t in seq: print(f"{t/1e3:10.1f}  {n}")
PY
  tail -n 20 "$out/ncu_long_summary.txt"
fi
# s23c (not in all): ncu's full set of one lean scores launch and one fused sweep launch of the
# top-k bench's S_k 131072 row (k 2048): their details pages and raw metrics side by side.
if [[ " $steps " == *" s23c "* ]]; then
  for kern in "sm90_topk_fused_sweep" "sm90_indexer_lean"; do
    tag=$kern
    run "ncu_full_$tag" 200 "$ncu_bin" --clock-control none --set full --import-source no --kernel-name "$kern" \
      --launch-count 1 -o "$out/$tag" $b/tools/dsa-indexer bench --op topk --reps 1 --topk-k 2048 --match "S_k 131072"
    [[ -f $out/$tag.ncu-rep ]] && "$ncu_bin" --import "$out/$tag.ncu-rep" --page details >"$out/${tag}_details.txt" 2>&1
    [[ -f $out/$tag.ncu-rep ]] && "$ncu_bin" --import "$out/$tag.ncu-rep" --page raw --csv >"$out/${tag}_raw.csv" 2>&1
    rm -f "$out/$tag.ncu-rep"
  done
fi
# s24a (not in all): the fused sweep's partitioned appends (set_topk_fused_part, built in session 23;
# off: exact but slower on an H100 in session 24): [topk_fused_part] (bitwise against the unfused path),
# memcheck and racecheck over its small case, the bench's S_k 131072 and 16384 rows with the
# appends both ways (fused by name in every row; auto = fused at 131072), and every kernel's time
# of the S_k 131072 row with them on (as s23b).
if [[ " $steps " == *" s24a "* ]]; then
  run gpu_topk_fused_part 240 $b/tests/dsa_gpu_tests "[topk_fused_part]" --durations yes
  run sanitize_memcheck_part 90 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small][topk_fused_part]"
  run sanitize_racecheck_part 120 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small][topk_fused_part]"
  for part in off on; do
    run "topk_bench_part_$part" 120 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "S_k 1" --topk-fused-part $part
  done
  run ncu_long_part 200 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:"sm90_topk_(fused_sweep|candidates)" --launch-count 40 $b/tools/dsa-indexer bench --op topk --reps 1 --topk-k 2048 \
    --match "S_k 131072" --topk-fused-part on
fi
# s24b (not in all): the fused path on FP8 inputs (E4M3 q / k with their scales; session 24):
# [topk_fused_fp8] (bitwise against the unfused path), memcheck and racecheck over its small case,
# the unfused FP8 top-k case, and the FP8 top-k bench rows at S_k 16384 and 131072.
if [[ " $steps " == *" s24b "* ]]; then
  run gpu_topk_fused_fp8 300 $b/tests/dsa_gpu_tests "[topk_fused_fp8]" --durations yes
  run gpu_topk_fp8 120 $b/tests/dsa_gpu_tests "topk: FP8 inputs select exactly from the FP8 scores"
  run sanitize_memcheck_fused_fp8 90 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_fp8_small]"
  run sanitize_racecheck_fused_fp8 120 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_fp8_small]"
  run topk_bench_fp8 180 $b/tools/dsa-indexer bench --op topk --in e4m3 --reps 10 --topk-k 2048,512 --match "S_k 1"
fi
# s24c (not in all): s24a and s24b's essentials for a short device budget (about 7 minutes): both
# GPU test sets, memcheck over both small cases, the S_k 131072 row at k 2048 with the partitioned
# appends off and on.
if [[ " $steps " == *" s24c "* ]]; then
  run gpu_topk_fused_part 120 $b/tests/dsa_gpu_tests "[topk_fused_part]"
  run gpu_topk_fused_fp8 120 $b/tests/dsa_gpu_tests "[topk_fused_fp8]"
  run sanitize_memcheck_part 45 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small][topk_fused_part]"
  run sanitize_memcheck_fused_fp8 45 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_fp8_small]"
  for part in off on; do
    run "topk_bench_part_$part" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --match "S_k 131072" --topk-fused-part $part
  done
fi
# s25a (not in all): session 25's fused path: FP8 inputs after the barrier fix ([topk_fused_fp8]),
# the lse through both paths ([topk_fused]: fused == unfused bitwise with lse in every protocol;
# [topk]: the unfused path against the reference, its BSHD lse from sm90_topk_lse), memcheck over
# both small fused cases. s25b: racecheck over them, and the FP8 top-k bench rows at S_k 16384 and
# 131072 (k 2048 and 512).
if [[ " $steps " == *" s25a "* ]]; then
  run gpu_topk_fused_fp8 200 $b/tests/dsa_gpu_tests "[topk_fused_fp8]" --durations yes
  run gpu_topk_fused 240 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  run gpu_topk 150 $b/tests/dsa_gpu_tests "[topk]" --durations yes
  run sanitize_memcheck_fused_fp8 60 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_fp8_small]"
  run sanitize_memcheck_fused 60 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small]"
fi
if [[ " $steps " == *" s25b "* ]]; then
  run sanitize_racecheck_fused_fp8 150 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_fp8_small]"
  run sanitize_racecheck_fused 150 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk_fused_small]"
  run topk_bench_fp8 240 $b/tools/dsa-indexer bench --op topk --in e4m3 --reps 10 --topk-k 2048,512 --match "S_k 1"
fi
# s25c (not in all): what turning the lane-order lse on needs (kTopkLseLanes, session 25): the
# replay kernel against the oracle on special cells ([topk_lse]), the lse rows of the top-k bench
# with it on and off (S_k 16384 and 131072, k 2048), and the FP8 rows with the fused path by name.
if [[ " $steps " == *" s25c "* ]]; then
  run gpu_topk_lse 60 $b/tests/dsa_gpu_tests "[topk_lse]"
  lse_rows
  run topk_bench_fp8 150 $b/tools/dsa-indexer bench --op topk --in e4m3 --reps 10 --topk-k 2048 --match "S_k 1"
fi
# s27c (not in all): session 27's defaults (the short-row selection, THD fused row ranges and
# ragged ends on): racecheck and memcheck of the short-row kernel (an empty row's max read fixed),
# the THD fused cases under the new defaults, the unfused cases and the selection kernels, the
# THD and ratio-4 rows of the top-k bench, then the sanitizers over the small fused cases.
if [[ " $steps " == *" s27c "* ]]; then
  sanitize_tags short "[topk_short][topk_select]" 90 90
  run gpu_topk_fused_thd 200 $b/tests/dsa_gpu_tests "[topk_fused_thd]" --durations yes
  run gpu_topk_unfused 150 $b/tests/dsa_gpu_tests "[topk],[topk_select]" --durations yes
  run topk_bench_thd 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd
  run topk_bench_r4 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match r4
  sanitize_fused 100 120
fi
# s28b / s28c (not in all; two calls back to back, the machine kept, around the cuDNN-frontend
# wheels: a call carries 64 MiB): the 8-word short-row selection (session 27, off:
# kTopkSelectMedium) and the top-k peers. s28b (carry .whl/parts/p1, the library and
# dsa_gpu_tests) stages part 1, runs the kernel against the oracle and bitwise the general one
# and the whole path with it ([topk_short]), then racecheck and memcheck over the kernel case;
# s28c (carry .whl/parts/p2, the library and dsa-indexer) times the S_k 8192 ratio-2 row (rows of
# 4097..8192 keys) with the 8-word kernel off and on, then the top-k peers (cuDNN-frontend's radix
# top-k and torch.topk after our scores, our unfused and fused calls) on every top-k bench row.
if [[ " $steps " == *" s28b "* ]]; then
  run stage_p1 120 python3 bench/peer_wheels.py stage .whl/parts/p1 --to /tmp/dsa_peers_stage
  run gpu_topk_short 150 $b/tests/dsa_gpu_tests "[topk_short]" --durations yes
  sanitize_tags short "[topk_short][topk_select]" 90 90
fi
if [[ " $steps " == *" s28c "* ]]; then
  for sh in off on; do
    run "topk_bench_medium_$sh" 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "S_k 8192" --topk-select-medium $sh
  done
  PYTHONUNBUFFERED=1 DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run topk_peers 400 python3 bench/peers.py --op topk \
    --out "$out/docs" --topk-k 2048,512 --max-seconds "${PEERS_MAX_SECONDS:-300}" --wheels /tmp/dsa_peers_stage .whl/parts/p2
fi
# s28d (not in all): the register rows (session 28, off: kTopkSelectRegs): the short-row kernel
# after its body moved into topk_select_row_regs and the register rows' two launches, each against
# the oracle and bitwise the general kernel; the whole path with the register rows; the THD and
# S_k 8192 ratio-2 rows with them off and on; then racecheck and memcheck over the kernel cases.
# (The session-28 call also timed the S_k 262144 row by seed in between: bench/topk_seeds.py now.)
if [[ " $steps " == *" s28d "* ]]; then
  run gpu_topk_short 120 $b/tests/dsa_gpu_tests "[topk_select][topk_short]" --durations yes
  run gpu_topk_regs 90 $b/tests/dsa_gpu_tests "[topk][topk_regs]" --durations yes
  for sh in off on; do
    run "topk_bench_regs_thd_$sh" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd --topk-select-regs $sh
    run "topk_bench_regs_r2_$sh" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "S_k 8192" --topk-select-regs $sh
  done
  sanitize_tags regs "[topk_select][topk_short]" 110 45
fi
# s29a (not in all): what session 28 left unmeasured: the register rows (off: kTopkSelectRegs) on
# BSHD long rows, where their first launch only skips (S_k 16384 and 65536; and the THD row
# again), off and on; the automatic-policy case with the policy set by the case ([topk_auto]).
if [[ " $steps " == *" s29a "* ]]; then
  for sh in off on; do
    for m in "S_k 16384" "S_k 65536" thd; do
      run "topk_bench_regs_${sh}_${m// /_}" 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --match "$m" --topk-select-regs $sh
    done
  done
  run gpu_topk_auto 120 $b/tests/dsa_gpu_tests "[topk_auto]" --durations yes
fi
# s29b (not in all; s29a's second call): racecheck over the register rows' kernel case alone, with
# room to finish, and the fused path's failed rows by input seed ([topk_seeds]).
if [[ " $steps " == *" s29b "* ]]; then
  sanitize_tags regs "[topk_select][topk_regs]" 240
  run topk_seeds 240 $b/tests/dsa_gpu_tests "[topk_seeds]"
fi
# s29c (not in all): the register rows' policy (session 29: a long-row launch takes them where at
# least half of its rows are known to fit): the unfused GPU cases and the selection kernels under
# the default, then every top-k bench row at k 2048 under the default (the THD row should take the
# register rows, the BSHD rows the general kernel: the header line says which when forced only).
if [[ " $steps " == *" s29c "* ]]; then
  run gpu_topk_unfused 200 $b/tests/dsa_gpu_tests "[topk],[topk_select]" --durations yes
  run topk_bench_default 300 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --json "$out/topk_bench.json"
fi
# s29d (not in all): the register rows' first launch (sm90_topk_select_short<512>) on one CTA per
# row against strided grids of 2, 4, 8 (the default) and 16 CTAs per SM, on the THD row (where the
# policy takes the register rows), k 2048 and 512.
if [[ " $steps " == *" s29d "* ]]; then
  i=0
  for n in 8 0 2 4 16 8; do
    i=$((i + 1))
    run "topk_bench_regs_ctas_${i}_$n" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd --topk-regs-ctas $n
  done
fi
# s29e (not in all): the narrow register rows (session 29, off: kTopkSelectRegsNarrow): the
# register-rows GPU cases (the kernels, the whole path, the narrow rows bitwise the 512-thread
# ones), then the THD row with them off and on (the bench's calls have no softmax and no lse).
if [[ " $steps " == *" s29e "* ]]; then
  run gpu_topk_regs 150 $b/tests/dsa_gpu_tests "[topk_regs]" --durations yes
  for sh in off on; do
    run "topk_bench_narrow_$sh" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match thd --topk-regs-narrow $sh
  done
fi
# s31a (not in all): the split redo's launch by slots (session 30, built after its GPU runs, off:
# kTopkFusedRedoSlotItems): the split redo's GPU cases (both item orders), the seeds (whole-row,
# split by q-tiles, split by slots, unfused), and the sanitizers over the small case.
# s32a (not in all): the same with the join that cuts (session 31, off: kTopkFusedRedoJoinCut; 16
# chunks at k 2048 / S_k 262144 instead of 7) in the cases and timings, then the other fused cases
# (the keeper's code moved to its own header; NVRTC gives the same machine code).
# s32b (not in all): s32a's first part with the redo pool too (session 32, off:
# kTopkFusedRedoPool; every failed q-tile split, each chunk joined under the rows' locks) in the
# cases and timings; s32c (not in all, a call of its own: s32b takes most of one) the other
# fused cases.
# s33a (not in all): the redo pool as the default with its rows seeded (session 33): s32b's cases
# and timings (the pool seeded and not), then the other fused cases (s32c).
if [[ " $steps " == *" s31a "* || " $steps " == *" s32a "* || " $steps " == *" s32b "* || " $steps " == *" s33a "* ]]; then
  run gpu_topk_redo 300 $b/tests/dsa_gpu_tests "[topk_fused_redo]" --durations yes
  run gpu_topk_seeds 150 $b/tests/dsa_gpu_tests "[topk_seeds]" --durations yes
  run gpu_topk_redo_skew 90 $b/tests/dsa_gpu_tests "[topk_redo_skew]" --durations yes
  run memcheck_redo 120 "$cs" --tool memcheck $b/tests/dsa_gpu_tests "[topk_fused_small][topk_fused_redo]"
  run racecheck_redo 200 "$cs" --tool racecheck --racecheck-report hazard $b/tests/dsa_gpu_tests "[topk_fused_small][topk_fused_redo]"
fi
if [[ " $steps " == *" s32a "* || " $steps " == *" s32c "* || " $steps " == *" s33a "* ]]; then
  run gpu_topk_fused 240 $b/tests/dsa_gpu_tests "[topk_fused]~[topk_fused_redo]" --durations yes
fi
# s34a (not in all): where a failed q-tile's millisecond goes with the seeded redo pool (session
# 33: seed 2 at S_q 2048 / S_k 262144 k 2048 15.60 ms against about 14.6 without a failure): every
# kernel's time of the skew case's calls (9 failed q-tiles: the sampled sweep, the slots, the
# seeds, the pool's sweep, the candidates), then the seeds' timings again.
if [[ " $steps " == *" s34a "* ]]; then
  run ncu_redo_pool 300 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum \
    --kernel-name regex:"sm90_topk_(fused_sweep|fused_redo_pool|redo_seed|redo_slots|candidates)" $b/tests/dsa_gpu_tests "[topk_redo_skew]"
  run gpu_topk_seeds 150 $b/tests/dsa_gpu_tests "[topk_seeds]" --durations yes
fi
# s30b (not in all): the split redo (session 30, off: kTopkFusedRedoSplit): its GPU cases (bitwise
# the unfused path with 1, 8 and 4096 slots), the fused cases it must leave as they were, and the
# input seeds at S_q 2048 / S_k 262144 (the whole-row redo's time, the split redo's, the unfused).
if [[ " $steps " == *" s30b "* ]]; then
  run gpu_topk_redo 200 $b/tests/dsa_gpu_tests "[topk_fused_redo]" --durations yes
  run gpu_topk_seeds 120 $b/tests/dsa_gpu_tests "[topk_seeds]" --durations yes
  run gpu_topk_fused 200 $b/tests/dsa_gpu_tests "[topk_fused]~[topk_fused_redo]" --durations yes
fi
# s30a (not in all): long rows by 256 threads and rows of 4097..8192 cells by the register rows
# (session 29, both off: kTopkSelectNarrowLong, kTopkSelectRegsMid): their GPU cases (bitwise the
# default kernels without softmax) and the register rows' (the narrow rows' kernel-level and
# misaligned THD checks, added after session 29's runs), then the BSHD long rows with the first off and on and the
# ratio-2 row (S_k 8192) with the second (the bench's calls have no softmax and no lse: its select
# column is the selection alone).
if [[ " $steps " == *" s30a "* ]]; then
  run gpu_topk_narrow 240 $b/tests/dsa_gpu_tests "[topk_narrow_long],[topk_regs_mid],[topk_regs]" --durations yes
  for sh in off on; do
    run "topk_bench_regs_mid_$sh" 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "S_k 8192" --topk-regs-mid $sh
  done
  for sh in off on; do
    for m in "S_k 16384" "S_k 65536"; do
      run "topk_bench_narrow_long_${sh}_${m// /_}" 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match "$m" --topk-narrow-long $sh
    done
  done
fi
# s28e (not in all): s28d's kernel cases after the test module's fix (the general kernels that
# skip the register rows need the dynamic shared memory attribute), the whole path with the
# register rows (512 threads), racecheck and memcheck over the kernel cases.
if [[ " $steps " == *" s28e "* ]]; then
  run gpu_topk_short 100 $b/tests/dsa_gpu_tests "[topk_select][topk_short]" --durations yes
  run gpu_topk_regs 60 $b/tests/dsa_gpu_tests "[topk][topk_regs]" --durations yes
  sanitize_tags regs "[topk_select][topk_short]" 100 45
fi
# s27d (not in all): s27c within the last minutes of a session's device time: no memcheck (the
# short-row kernel's was clean before the fix) and no sanitizers over the small fused cases.
if [[ " $steps " == *" s27d "* ]]; then
  sanitize_tags short "[topk_short][topk_select]" 60
  run gpu_topk_fused_thd 110 $b/tests/dsa_gpu_tests "[topk_fused_thd]" --durations yes
  run topk_bench_thd 60 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --match thd
  run gpu_topk_unfused 90 $b/tests/dsa_gpu_tests "[topk],[topk_select]" --durations yes
fi
# s27b (not in all): the short-row selection (session 27): its kernel against the oracle and
# bitwise the general one, the whole path with it ([topk_short]); the ratio-4 and THD rows with
# it off and on (the selection alone is the 'sel' column), k 2048 and 512.
if [[ " $steps " == *" s27b "* ]]; then
  run gpu_topk_short 120 $b/tests/dsa_gpu_tests "[topk_short]" --durations yes
  for sh in off on; do
    run "topk_bench_short_$sh" 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048,512 --match r4 --topk-select-short $sh
  done
fi
# s27a (not in all): what session 26 left unrun: the THD fused cases with packings whose blocks
# end on segments in every protocol, the ragged last block and the row-range blocks (their cases
# set topk_fused_ragged_thd / topk_fused_thd_rows; alone: their first variants compile), the replay's
# branch-free batches against the oracle and bitwise through the BSHD fused cases, the lse rows.
if [[ " $steps " == *" s27a "* ]]; then
  run gpu_topk_fused_thd 300 $b/tests/dsa_gpu_tests "[topk_fused_thd]" --durations yes
  run gpu_topk_lse 60 $b/tests/dsa_gpu_tests "[topk_lse]"
  run gpu_topk_fused 200 $b/tests/dsa_gpu_tests "[topk_fused]~[topk_fused_thd]" --durations yes
  lse_rows
fi
# s26c (not in all): fused THD by name (session 26): its GPU cases bitwise against the unfused
# path, the BSHD and FP8 fused cases, the unfused cases and the digests (the selection's block
# size of THD blocks is now chosen per call), memcheck and racecheck over the small cases, the THD
# top-k row with the fused column. Then s26b's step.
if [[ " $steps " == *" s26c "* ]]; then
  run gpu_topk_fused_thd 200 $b/tests/dsa_gpu_tests "[topk_fused],[topk_fused_thd],[topk_fused_fp8]"
  run gpu_topk_unfused 120 $b/tests/dsa_gpu_tests "[topk],[digests],[topk_lse]"
  lse_rows
  sanitize_fused 120 150
  run topk_bench_thd 90 $b/tools/dsa-indexer bench --op topk --reps 10 --topk-k 2048 --match thd
  steps="$steps s26b"
fi
# s26a (not in all): the lse replay with its loads a batch ahead (session 26): [topk_lse], the
# fused cases (every check_fused also runs the lse with the lane order, bitwise between the
# paths), the lse rows with the lane order off and on.
if [[ " $steps " == *" s26a "* ]]; then
  run gpu_topk_lse 60 $b/tests/dsa_gpu_tests "[topk_lse]"
  run gpu_topk_fused 150 $b/tests/dsa_gpu_tests "[topk_fused]"
  lse_rows
fi
# s26b (not in all): ncu (full set) of one selection launch of the ratio-4 row (S_q 16384, S_k
# 4096, k 2048: 16384 rows of at most 4096 keys), its details page and per-instruction CSV.
if [[ " $steps " == *" s26b "* ]]; then
  run ncu_select_r4 150 "$ncu_bin" --clock-control none --set full --import-source no --kernel-name regex:sm90_topk_select \
    --launch-count 1 -o "$out/sel" $b/tools/dsa-indexer bench --op topk --reps 1 --topk-k 2048 --match "r4"
  [[ -f $out/sel.ncu-rep ]] && "$ncu_bin" --import "$out/sel.ncu-rep" --page source --csv --print-source sass >"$out/sel_source.csv" 2>&1
  [[ -f $out/sel.ncu-rep ]] && "$ncu_bin" --import "$out/sel.ncu-rep" --page details >"$out/sel_details.txt" 2>&1
  rm -f "$out/sel.ncu-rep"
fi
if [[ " $steps " == *" s20b "* ]]; then
  run sanitize_memcheck_fp8 150 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "fp8: lean == generic bitwise,[fp8_reuse]"
  run sanitize_racecheck_fp8 200 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[fp8_reuse]"
  steps="$steps deepgemm"
fi
# deepgemm (not in all; carry build/peers/deepgemm from tools/fetch_deepgemm.sh): DeepGEMM 2.8.2
# built on this machine and one small call (bench/deepgemm_peer.sh: a crash's stack in
# OUTDIR/deepgemm/deepgemm_call.log); when it works, the FP8 rows with its column beside lean FP8
# (bench/peers.py --precision fp8, cuDNN and our BF16 column left out), about 9 minutes at most.
if [[ " $steps " == *" deepgemm "* ]]; then
  run deepgemm 300 bash bench/deepgemm_peer.sh build/peers/deepgemm "$out/deepgemm"
  if grep -q "^ok " "$out/deepgemm/deepgemm_call.log" 2>/dev/null; then
    PYTHONUNBUFFERED=1 PYTHONPATH=build/peers/deepgemm/site DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} \
      run deepgemm_peers 240 python3 bench/peers.py --precision fp8 --families lean --skip cudnn,bf16 --out "$out/docs" --max-seconds 120
  fi
  tar -C "$out" -czf "$out/deepgemm.tgz" deepgemm && rm -rf "$out/deepgemm"
fi
# s18b (not in all): the phase timeline (trace) and the free-running THD rows (s17b), about 6 minutes.
[[ " $steps " == *" s18b "* ]] && steps="$steps trace s17b"  # (their blocks follow)
# s17b (not in all): lean's two consumers free-running (bench family leanf) beside the ring (lean)
# and generic on the THD rows, and lean / leanf on the H 64 headline rows, in about 3 minutes.
if [[ " $steps " == *" s17b "* ]]; then
  run bench_thd 140 $b/tools/dsa-indexer bench --match thd --family lean,leanf,generic --reps 10 --json "$out/bench_thd.json"
  run bench_head 50 $b/tools/dsa-indexer bench --match "bshd H64 r2 S_q 8192" --family lean,leanf --reps 10
fi
# trace (not in all): the phases of lean's loop from its kTrace variants' clock stamps
# ("[lean_trace]": the headline bf16 and FP8, THD ratio 4 with 8 short segments with the ring and
# free-running; per consumer the mean cycles per KV tile waiting for the stage, for its turn,
# issuing, waiting for the product, in the epilogue, between tiles), tools/lean_trace.py's
# timelines and tensor-pipe bound, the raw stamps and the plots in OUTDIR/lean_trace.tgz.
if [[ " $steps " == *" trace "* ]]; then
  mkdir -p "$out/trace"
  DSA_TEST_TRACE_OUT="$out/trace" run lean_trace 150 $b/tests/dsa_gpu_tests "[lean_trace]" --durations yes
  run lean_trace_plots 60 python3 tools/lean_trace.py "$out/trace"
  tar -C "$out" -czf "$out/lean_trace.tgz" trace && rm -rf "$out/trace"
fi
# digests (not in all; needs build/baseline from tools/build_baseline.sh REV): the output bits of
# tests/gpu/test_digests.cpp's fixed problems recorded by the baseline build, then the current
# build held to them (OUTDIR/golden_digests.txt: commit it as tests/gpu/golden_digests.txt once
# the baseline is the reference); then lean's and FP8's suites as a sanity check of the new build.
if [[ " $steps " == *" digests "* ]]; then
  bl=$b/baseline
  echo "baseline: $(cat $bl/REV 2>/dev/null || echo none)" | tee -a "$out/summary.txt"
  DSA_TEST_DIGESTS_OUT="$out/golden_digests.txt" run digests_baseline 200 $bl/dsa_gpu_tests "[digests]" --durations yes
  DSA_TEST_DIGESTS_EXPECT="$out/golden_digests.txt" DSA_TEST_DIGESTS_OUT="$out/digests.txt" \
    run digests 200 $b/tests/dsa_gpu_tests "[digests]" --durations yes
  run gpu_lean 150 $b/tests/dsa_gpu_tests "[lean]" --durations yes
fi
# ab_epilogue (not in all; needs build/baseline): session 16's leaner consumer loop (weights
# widened once per item, wgmma descriptors in uniform registers) against the baseline's CLI on
# the same machine, interleaved A B B A: the headline lean / generic rows, H 32 and 16, FP8's
# headline, the top-k rows (fused column included).
if [[ " $steps " == *" ab_epilogue "* ]]; then
  bl=$b/baseline
  for v in A B B A; do
    cli=$b/tools/dsa-indexer
    [[ $v == A ]] && cli=$bl/dsa-indexer
    n=$(ls "$out" | grep -c "^ab_head_$v") || true
    run ab_head_${v}$n 90 $cli bench --match "bshd H64 r2 S_q 8192" --family lean,generic --reps 10
    run ab_fp8_${v}$n 90 $cli bench --in e4m3 --quick --reps 10
  done
  for v in A B; do
    cli=$b/tools/dsa-indexer
    [[ $v == A ]] && cli=$bl/dsa-indexer
    run ab_h32_$v 60 $cli bench --match H32 --family lean,generic --reps 10
    run ab_h16_$v 60 $cli bench --match H16 --family lean,generic --reps 10
    run ab_topk_$v 150 $cli bench --op topk --quick --topk-k 2048
  done
fi
# s14c (not in all): issue 21's sanitizers over the fused top-k (sampled sweep, its redo and the
# exact sweep, then the candidates kernel), memcheck and racecheck over one small call of each
# ("[topk_fused_small]": shared-memory hazards between the consumers' appends, the cut and the selectors).
if [[ " $steps " == *" s14c "* ]]; then
  sanitize_fused 240 300
fi
# s13d (not in all): s13c's first half for a call of about 3 minutes: [lean], lean FP8 ==
# generic FP8, then [topk_fused].
if [[ " $steps " == *" s13d "* ]]; then
  run gpu_lean 120 $b/tests/dsa_gpu_tests "[lean]" --durations yes
  run gpu_fp8_lean 30 $b/tests/dsa_gpu_tests "fp8: lean == generic bitwise" --durations yes
  run gpu_topk_fused 60 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
fi
# fused (not in all): the fused top-k's tests and timing alone.
if [[ " $steps " == *" fused "* ]]; then
  run gpu_topk_fused 300 $b/tests/dsa_gpu_tests "[topk_fused]" --durations yes
  run gpu_topk_select 120 $b/tests/dsa_gpu_tests "[topk_select]" --durations yes
  run topk_perf 200 $b/tests/dsa_gpu_tests "[topk_perf]"
fi
want python && DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run python_gpu 150 python3 -m pytest -q -p no:cacheprovider python/tests/test_gpu.py
if [[ " $steps " == *" topk_bench "* ]]; then
  run topk_demo 120 $b/tools/dsa-indexer demo --op topk
  run topk_bench 480 $b/tools/dsa-indexer bench --op topk --topk-k "${TOPK_K:-2048,512}" --json "$out/topk_bench.json"
fi
if [[ " $steps " == *" topk_peers "* ]]; then
  # shellcheck disable=SC2086 (PEERS_WHEELS is a list of folders)
  PYTHONUNBUFFERED=1 DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run topk_peers 560 python3 bench/peers.py --op topk \
    --out "$out/docs" --topk-k "${TOPK_K:-2048,512}" --max-seconds 480 \
    $([[ -f "$out/topk_bench.json" ]] && echo --topk-cli-json "$out/topk_bench.json") ${PEERS_WHEELS:+--wheels $PEERS_WHEELS}
fi
want_fp8() { [[ " $steps " == *" fp8 "* || " $steps " == *" fp8_$1 "* ]]; }
if want_fp8 tests; then
  run gpu_fp8 300 $b/tests/dsa_gpu_tests "[fp8]" --durations yes
  op_lib=""
  [[ -f $b/libdsa_indexer_torch.so ]] && op_lib=$b/libdsa_indexer_torch.so
  # PEERS_WHEELS is a list of folders; --wheels goes last for pytest.
  # shellcheck disable=SC2086
  run python_fp8 400 env DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} ${op_lib:+DSA_INDEXER_TORCH_OP=$op_lib} \
    python3 -m pytest -q -rs -p no:cacheprovider -k fp8 python/tests/test_gpu.py python/tests/test_topk_gpu.py \
    python/tests/test_torch_op_gpu.py python/tests/test_cudnn_compat_gpu.py ${PEERS_WHEELS:+--wheels $PEERS_WHEELS}
fi
want_fp8 bench && run fp8_bench 400 $b/tools/dsa-indexer bench --in e4m3 --json "$out/fp8_bench.json"
if want_fp8 peers; then
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 DSA_INDEXER_LIBRARY=${lib:-$b/libdsa_indexer.so} run fp8_peers 560 python3 bench/peers.py --precision fp8 \
    --out "$out/docs" --max-seconds 480 ${PEERS_WHEELS:+--wheels $PEERS_WHEELS}
fi
# perf9 (not in all): session 9's shapes timed in one call: the chunked-prefill rows (lean's
# split variant by name against generic), H 32 and 16 (lean by name against generic), the
# headline FP8 rows (bench --in e4m3 --quick) and the top-k rows with the fused column (quick).
if [[ " $steps " == *" perf9 "* ]]; then
  run bench_prefill 150 $b/tools/dsa-indexer bench --match prefill --reps 10 --json "$out/bench_prefill.json"
  run bench_h32 60 $b/tools/dsa-indexer bench --match H32 --reps 10
  run bench_h16 60 $b/tools/dsa-indexer bench --match H16 --reps 10
  run fp8_bench 150 $b/tools/dsa-indexer bench --in e4m3 --quick --json "$out/fp8_bench.json"
  run topk_bench 150 $b/tools/dsa-indexer bench --op topk --quick --topk-k 2048
fi
want demo && run demo 60 $b/tools/dsa-indexer demo
want bench && run bench 280 $b/tools/dsa-indexer bench --json "$out/bench.json"
want jitcost && run jitcost 120 $b/tools/dsa-indexer jitcost --json "$out/jitcost.json"
want hostcost && run hostcost 200 $b/tools/dsa-indexer-hostcost
if want sanitize; then
  # memcheck and synccheck over the whole GPU suite of both families; racecheck (slow with
  # 220 KB of shared memory per CTA) over a representative subset of each family.
  run sanitize_memcheck 240 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[reference],[generic],[lean]"
  run sanitize_memcheck_topk 240 "$cs" --tool memcheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[topk]"
  run sanitize_synccheck 180 "$cs" --tool synccheck --error-exitcode 9 $b/tests/dsa_gpu_tests "[reference],[generic],[lean]"
  run sanitize_racecheck 120 "$cs" --tool racecheck --error-exitcode 9 $b/tests/dsa_gpu_tests \
    "reference: explicit windows,generic: partly visible block left of the last one is masked,generic: THD segment boundaries inside a q-tile"
fi
if [[ " $steps " == *" racecheck "* ]]; then
  racecheck_cases "${RACECHECK_TAGS:-[reference],[generic],[lean]}" "${RACECHECK_TIMEOUT:-540}" "${RACECHECK_DEADLINE:-}"
fi
if want profile; then
  for fam in lean generic; do
    run ncu_$fam 120 "$ncu_bin" --clock-control none --kernel-name regex:sm90_indexer_$fam --launch-skip 5 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy $b/tools/dsa-indexer demo
  done
fi
exit 0
