#!/usr/bin/env bash
# One GPU test case under compute-sanitizer racecheck (called by gpu_session.sh racecheck).
#   racecheck_case.sh "IDX<TAB>TEST CASE NAME"     (environment: cs, b, rdir, RACECHECK_TIMEOUT,
#   optional RACECHECK_DEADLINE in epoch seconds)
# rc 124 in results.txt: the case ran past its time limit (not a hazard, not a pass).
set -u
line=$1
i=${line%%$'\t'*}
name=${line#*$'\t'}
spec=${name//,/\\,}  # a comma separates Catch2 test specs; escape it
s0=$SECONDS
limit=${RACECHECK_TIMEOUT:-540}
if [ -n "${RACECHECK_DEADLINE:-}" ]; then  # epoch seconds by which every case must have ended
  left=$((RACECHECK_DEADLINE - $(date +%s)))
  if [ "$left" -lt "$limit" ]; then limit=$left; fi
  if [ "$limit" -le 5 ]; then
    echo "$i rc=skipped 0 s | $name | not run: the session's racecheck deadline had passed | -" >>"$rdir/results.txt"
    exit 0
  fi
fi
timeout "$limit" "$cs" --tool racecheck --error-exitcode 9 "$b/tests/dsa_gpu_tests" "$spec" --durations yes \
  >"$rdir/$i.log" 2>&1
rc=$?
summary=$(grep -h "RACECHECK SUMMARY" "$rdir/$i.log" | tail -1)
tests=$(grep -hE "^(All tests passed|test cases:)" "$rdir/$i.log" | tail -1)
echo "$i rc=$rc $((SECONDS - s0)) s | $name | ${summary:-no summary} | ${tests:-no Catch2 result}" >>"$rdir/results.txt"
