#!/usr/bin/env bash
# Prints one of the README's two set-up commands as written there (the ```sh blocks of its
# "## Set-up" section: the first is the main job, the second the tests), so that CI runs them
# verbatim and they cannot drift from what works.
#   tools/readme_commands.sh main|tests [README]
set -euo pipefail
which=${1:?usage: readme_commands.sh main|tests [README]}
readme=${2:-$(dirname "$0")/../README.md}
case $which in main) n=1 ;; tests) n=2 ;; *) echo "readme_commands.sh: main or tests, not '$which'" >&2; exit 2 ;; esac
cmd=$(awk -v n="$n" '
  /^## / { in_setup = ($0 ~ /^## Set-up/) }
  in_setup && /^```sh$/ { block++; grab = (block == n); next }
  in_setup && /^```$/ { grab = 0; next }
  grab { print }
' "$readme")
lines=$(printf '%s\n' "$cmd" | grep -c . || true)
if [ "$lines" -ne 1 ]; then
  echo "readme_commands.sh: expected one command line in block $n of $readme's set-up section, found $lines" >&2
  exit 1
fi
printf '%s\n' "$cmd"
