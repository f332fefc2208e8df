#!/usr/bin/env bash
# ThreadSanitizer over the caches (docs/RELIABILITY.md, item 5): a separate build with
# -DDSA_INDEXER_SANITIZE=thread, then the kernel-cache, disk-cache, bad-disk, corruption,
# isolation, background-worker and recording unit tests (not [async_process]: TSan does not
# support a forked child that starts threads) and a shortened multi-process race (every racing
# process runs under TSan too). Any report fails the run (halt_on_error), as does any failing test.
#   tests/tsan/run_tsan.sh                 # race: 3 rounds
#   TSAN_RACE_ROUNDS=20 tests/tsan/run_tsan.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${TSAN_BUILD_DIR:-build-tsan}
ROUNDS=${TSAN_RACE_ROUNDS:-3}
mkdir -p "$BUILD"

# No --as-needed workaround: nothing links the libcuda stub (the library dlopens libcuda), which
# tests/check_needed.cmake checks, so the instrumented tests start on a machine without a driver.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSA_INDEXER_SANITIZE=thread >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target dsa_unit_tests dsa_cache_race_test

# halt_on_error: the first report ends the process with exitcode 66, which fails the step.
# handle_segv=0: the compile-isolation tests need helpers that die *by the signal*, as an
# uninstrumented compiler does, not by TSan's SEGV report and exit.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1:handle_segv=0}
"$BUILD/tests/dsa_unit_tests" "[kernel_cache],[disk_cache],[disk_faults],[disk_corruption],[isolation],[isolation_limits],[concurrent_maintenance],[special_files],[async],[record]"
"$BUILD/tests/reliability/dsa_cache_race_test" --driver "$BUILD/tests/reliability/dsa_cache_race_driver" \
  --work "$BUILD/tsan_race" --procs 16 --rounds "$ROUNDS"
echo "tsan: clean"
