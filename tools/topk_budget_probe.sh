#!/usr/bin/env bash
# The top-k rows at long S_k under two blockings, one device call (session 22): the library's
# default (both paths within 256 MiB at any S_k; unfused blocks of fewer rows than a wave run lean
# split) and the unfused path's blocks of one wave of rows at least (before session 22). Usage:
#   tools/topk_budget_probe.sh OUTDIR [k list] [case substrings...]
set -u
out=$1; ks=${2:-512,2048}; shift 2 || shift $#
cases=("$@"); [[ ${#cases[@]} -gt 0 ]] || cases=("S_k 65536" "S_k 131072" "S_k 262144")
b=build/tools/dsa-indexer
mkdir -p "$out"
for c in "${cases[@]}"; do
  tag=${c// /_}
  for v in default onewave; do
    extra=()
    [[ $v == onewave ]] && extra=(--topk-one-wave)
    echo "== $c / $v" | tee -a "$out/probe.log"
    timeout 200 $b bench --op topk --reps 10 --topk-k "$ks" --match "$c" "${extra[@]}" \
      --json "$out/probe_${tag}_$v.json" 2>&1 | grep -E "^topk|error|Error|budget" | tee -a "$out/probe.log"
  done
done
