#!/usr/bin/env bash
# Everything bcgprof checks on a GPU machine, in one go: GPU tests (all but the slow
# 16k-token builds), the default capture (gpt-oss-20b, 74 buckets, three modes), and the
# benchmark, which runs the default capture a second time.
# Usage: OUT=dir [BENCH=0] bash tests/gpu/h200_proof.sh   (logs and reports land under $OUT)
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bcgprof-proof}
mkdir -p "$OUT/r"
start=$SECONDS
python3 -m pytest -q tests/gpu -k "not 16k" >"$OUT/r/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -n 1 "$OUT/r/gpu_tests.log") ($((SECONDS - start)) s)"

t0=$SECONDS
python3 -m bcgprof capture --out "$OUT/r/run1" >"$OUT/r/run1.out" 2>&1
echo "run1 exit $? wall $((SECONDS - t0)) s"
tail -n 30 "$OUT/r/run1.out"
cat "$OUT/r/run1/summary.csv"

if [[ ${BENCH:-1} != 0 ]] && (( SECONDS - start < 280 )); then
  python3 -m bcgprof.benchmark --out "$OUT/r/bench" --json "$OUT/r/bench.json" >"$OUT/r/bench.out" 2>&1
  echo "bench exit $?"; tail -n 8 "$OUT/r/bench.out"
else
  echo "benchmark skipped"
fi
tar czf "$OUT/proof.tgz" -C "$OUT" r && rm -rf "$OUT/r"
echo "total $((SECONDS - start)) s"
