#!/usr/bin/env bash
# bcgprof record on the GPU: the example programs (the loop also with --trace), bcgprof capture recorded as an outside program, the
# hook's overhead, and the zero-tolerance gate of the default capture. Writes under $OUT; prints a table last.
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/record-proof}; mkdir -p "$OUT"
B="python -m bcgprof"
E=examples/record
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
step() { echo "== $*" >&2; }
step graph loop
$B record --bucket loops:capture_one:size --out "$OUT/recorded-loop" -- python $E/graph_loop.py > "$OUT/loop.log" 2>&1; echo "rc $?" >> "$OUT/loop.log"
step traced loop: record --trace, predict from the recording, the GPU test
$B record --trace --bucket loops:capture_one:size --out "$OUT/traced-loop" -- python $E/graph_loop.py 6 > "$OUT/traced.log" 2>&1; echo "rc $?" >> "$OUT/traced.log"
$B predict --from "$OUT/traced-loop" --buckets 256,512,768,1024,1280,1536 --rows >> "$OUT/traced.log" 2>&1; echo "rc $?" >> "$OUT/traced.log"
python -m pytest -q -m gpu tests/gpu/test_record_trace_gpu.py >> "$OUT/traced.log" 2>&1; echo "rc $?" >> "$OUT/traced.log"
step child process
$B record --bucket loops:capture_one:size --out "$OUT/recorded-child" -- python $E/child_capture.py > "$OUT/child.log" 2>&1; echo "rc $?" >> "$OUT/child.log"
step torchrun
$B record --bucket loops:capture_one:size --out "$OUT/recorded-torchrun" -- torchrun --nproc-per-node 1 $E/torchrun_capture.py > "$OUT/torchrun.log" 2>&1; echo "rc $?" >> "$OUT/torchrun.log"
step compiled
$B record --out "$OUT/recorded-compiled" -- python $E/compiled.py > "$OUT/compiled.log" 2>&1; echo "rc $?" >> "$OUT/compiled.log"
step capture natively and recorded
L="--modes per-bucket --buckets 1024:8192:1024 --num-layers 4"
$B capture $L --out "$OUT/native" > "$OUT/native.log" 2>&1; echo "rc $?" >> "$OUT/native.log"
$B record --bucket bcgprof.measure.capture:Capturer._capture_one:bucket --out "$OUT/recorded-capture" -- \
    python -m bcgprof capture $L --out "$OUT/native-under-hook" > "$OUT/recorded-capture.log" 2>&1; echo "rc $?" >> "$OUT/recorded-capture.log"
$B gate --baseline "$OUT/native" --current "$OUT/native-under-hook" --each-bucket --rel-tol 0 --abs-tol-mib 0 > "$OUT/hook-gate.log" 2>&1; echo "rc $?" >> "$OUT/hook-gate.log"
python benchmarks/gpu/record_table.py "$OUT" > "$OUT/table.txt" 2>&1
step overhead
[ "${SKIP_OVERHEAD:-0}" = 1 ] || python benchmarks/record_overhead.py --rounds 2 --sizes 16 --trace --out "$OUT/overhead" > "$OUT/overhead.log" 2>&1; echo "rc $?" >> "$OUT/overhead.log"
rm -rf "$OUT"/*/.record/site
# the recordings, as one file (a device call brings back a limited number of files)
tar -czf "$OUT/recordings.tar.gz" -C "$OUT" recorded-loop traced-loop recorded-child recorded-torchrun recorded-compiled \
    recorded-capture native native-under-hook 2>/dev/null
if [ "${SKIP_DEFAULT:-0}" != 1 ]; then
  step default capture and gate
  $B capture --out "$OUT/default" > "$OUT/default.log" 2>&1; echo "rc $?" >> "$OUT/default.log"
  BASE=reports/gpt-oss-20b-h200; grep -q H100 "$OUT/gpu.txt" && BASE=reports/gpt-oss-20b-h100-traced
  echo "baseline $BASE" > "$OUT/default-gate.log"
  $B gate --baseline $BASE --current "$OUT/default" --each-bucket --rel-tol 0 --abs-tol-mib 0 >> "$OUT/default-gate.log" 2>&1; echo "rc $?" >> "$OUT/default-gate.log"
fi
for f in loop traced child torchrun compiled native recorded-capture hook-gate overhead default default-gate; do
  [ -f "$OUT/$f.log" ] && { echo "--- $f"; grep -E "program:|rc |PASS|FAIL|ratio|a bucket|error|report |baseline|hook took|trace|passed|failed" "$OUT/$f.log" | tail -6; }
done
cat "$OUT/table.txt"
