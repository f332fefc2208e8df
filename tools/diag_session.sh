export DSA_INDEXER_LIBRARY=build/libdsa_indexer.so.0.1.0
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 120 $CS --tool memcheck --print-limit 5 build/tools/dsa-indexer jitcost > $OUT/memcheck_jitcost.log 2>&1; echo "memcheck jitcost rc=$?"; grep -vE "^  sm90" $OUT/memcheck_jitcost.log | head -30
timeout 60 python3 tools/probe_exit.py > $OUT/probe.log 2>&1; echo "probe rc=$?"; cat $OUT/probe.log | tail -5
CG=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
timeout 120 $CG -q -batch -ex "set pagination off" -ex run -ex bt -ex "info sharedlibrary" --args python3 tools/probe_exit.py > $OUT/gdb.log 2>&1; echo "gdb rc=$?"; grep -A25 "signal SIG" $OUT/gdb.log | head -40
PYTHONUNBUFFERED=1 timeout 260 python3 bench/peers.py --out $OUT/docs --skip cudnn --max-seconds 200 > $OUT/peers.log 2>&1; echo "peers rc=$?"; tail -30 $OUT/peers.log
