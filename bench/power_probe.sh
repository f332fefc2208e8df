#!/usr/bin/env bash
# Clocks and power per timing mode (issue 23: warm slower than cold at large shapes). nvidia-smi
# samples the card every 20 ms while `dsa-indexer bench --mode cold`, then `--mode warm`, times one
# shape (twice each, alternating); the summary gives each mode's busy samples (utilization >= 90 %):
# median SM clock, median power, and the share with the software power cap active.
#   bench/power_probe.sh OUTDIR [MATCH] [FAMILY]
set -u
out=${1:?usage: power_probe.sh OUTDIR [MATCH] [FAMILY]}
match=${2:-bshd H64 r2 S_q 16384}
fam=${3:-lean}
cli=${DSA_CLI:-build/tools/dsa-indexer}
mkdir -p "$out"
q=timestamp,utilization.gpu,power.draw.instant,power.draw,clocks.sm,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,temperature.gpu
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -i 0 >/dev/null 2>&1 || q=${q/power.draw.instant,/}
echo "$q" >"$out/smi.csv"
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -i 0 -lms 20 >>"$out/smi.csv" &
smi=$!
sleep 1
: >"$out/marks.txt"
for mode in cold warm cold warm; do
  reps=$([ $mode = cold ] && echo 1000 || echo 200)
  echo "$mode start $(date '+%Y/%m/%d %H:%M:%S.%3N')" >>"$out/marks.txt"
  "$cli" bench --match "$match" --family "$fam" --reps "$reps" --mode "$mode" >>"$out/power_bench.log" 2>&1
  echo "$mode end $(date '+%Y/%m/%d %H:%M:%S.%3N')" >>"$out/marks.txt"
done
sleep 0.5
kill "$smi"
python3 - "$out" <<'PY'
import csv, statistics, sys
from datetime import datetime
out = sys.argv[1]
rows = list(csv.reader(open(f"{out}/smi.csv")))
head = [h.strip() for h in rows[0][0].split(",")] if len(rows[0]) == 1 else [h.strip() for h in rows[0]]
samples = []
for r in rows[1:]:
    r = [x.strip() for x in r]
    if len(r) != len(head):
        continue
    d = dict(zip(head, r))
    try:
        d["t"] = datetime.strptime(d["timestamp"], "%Y/%m/%d %H:%M:%S.%f")
    except ValueError:
        continue
    samples.append(d)
marks = [l.split(" ", 2) for l in open(f"{out}/marks.txt").read().splitlines()]
windows = []
for i in range(0, len(marks), 2):
    windows.append((marks[i][0], datetime.strptime(marks[i][2], "%Y/%m/%d %H:%M:%S.%f"), datetime.strptime(marks[i + 1][2], "%Y/%m/%d %H:%M:%S.%f")))
pw = "power.draw.instant" if "power.draw.instant" in head else "power.draw"
for mode, t0, t1 in windows:
    busy = [s for s in samples if t0 <= s["t"] <= t1 and s["utilization.gpu"].isdigit() and int(s["utilization.gpu"]) >= 90]
    if not busy:
        print(f"{mode}: no busy samples"); continue
    clk = statistics.median(float(s["clocks.sm"]) for s in busy)
    pwr = statistics.median(float(s[pw]) for s in busy)
    cap = sum(s["clocks_event_reasons.sw_power_cap"] == "Active" for s in busy) / len(busy)
    hw = sum(s["clocks_event_reasons.hw_slowdown"] == "Active" for s in busy) / len(busy)
    print(f"{mode}: {len(busy)} busy samples, SM clock median {clk:.0f} MHz, {pw} median {pwr:.0f} W, "
          f"sw power cap active {100 * cap:.0f} %, hw slowdown {100 * hw:.0f} %")
PY
grep -E "^bshd|^thd" "$out/power_bench.log"
