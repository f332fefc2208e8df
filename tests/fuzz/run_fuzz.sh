#!/usr/bin/env bash
# The C API fuzzer and the manifest/planner fuzzer (docs/RELIABILITY.md, item 5): builds tests/fuzz with clang (libFuzzer, ASan,
# UBSan) in its own build directory and runs it time-boxed over a copy of the checked-in seed
# corpus. Fails on any crash (sanitizer report, abort on a broken invariant, timeout, OOM), or
# when fewer than MIN_RUNS inputs ran. Needs clang, libclang-rt-14-dev and llvm (Debian).
#   tests/fuzz/run_fuzz.sh            # 2e6 runs (about 40 s on 2 cores), at most 240 s
#   FUZZ_RUNS=20000000 FUZZ_MAX_TIME=600 tests/fuzz/run_fuzz.sh
#   FUZZ_MANIFEST_RUNS / FUZZ_MANIFEST_MAX_TIME: the manifest target (5e5 runs, at most 90 s)
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
RUNS=${FUZZ_RUNS:-2000000}
MAX_TIME=${FUZZ_MAX_TIME:-240}
MIN_RUNS=${FUZZ_MIN_RUNS:-100000}
mkdir -p "$BUILD"

CC=clang CXX=clang++ cmake -S tests/fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target fuzz_c_api fuzz_manifest

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# run_target NAME SEED_DIR RUNS MAX_TIME MIN_RUNS
run_target() {
  local name=$1 seeds=$2 runs_wanted=$3 max_time=$4 min_runs=$5
  # libFuzzer adds what it finds to the first corpus directory: a scratch copy keeps the
  # checked-in seeds as they are.
  local work="$BUILD/${name}_work"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$seeds"/* "$work/corpus/"
  local rc=0
  "$BUILD/$name" -runs="$runs_wanted" -max_total_time="$max_time" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log.txt" 2>&1 || rc=$?
  grep -v -e '^#' -e '^"' -e '^ *$' -e 'NEW_FUNC' "$work/log.txt" | tail -n 12
  local runs crashes
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -n 1)
  crashes=$(find "$work/artifacts" -type f | wc -l)
  echo "$name: exit status $rc, $runs executions, $crashes crash artifacts"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    echo "$name: FAILED (reproduce with: $BUILD/$name <artifact>)" >&2
    ls -l "$work/artifacts" >&2
    exit 1
  fi
  if [ -z "$runs" ] || [ "$runs" -lt "$min_runs" ]; then
    echo "$name: FAILED: only ${runs:-0} executions, at least $min_runs required" >&2
    exit 1
  fi
  echo "$name: OK"
}

run_target fuzz_c_api tests/fuzz/corpus "$RUNS" "$MAX_TIME" "$MIN_RUNS"
# The manifest parser and the planner (issue 12 item 7): UBSan over every accepted manifest.
run_target fuzz_manifest tests/fuzz/corpus_manifest "${FUZZ_MANIFEST_RUNS:-500000}" "${FUZZ_MANIFEST_MAX_TIME:-90}" \
  "${FUZZ_MANIFEST_MIN_RUNS:-50000}"
