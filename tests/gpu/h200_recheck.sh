#!/usr/bin/env bash
# After model changes: GPU tests (without the slow 16k builds) and the default capture again.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bcgprof-recheck}
mkdir -p "$OUT/r"
start=$SECONDS
python3 -m pytest -q tests/gpu -k "not 16k" >"$OUT/r/gpu_tests.log" 2>&1
echo "gpu tests: $(tail -n 1 "$OUT/r/gpu_tests.log") ($((SECONDS - start)) s)"
grep -E "^(FAILED|ERROR)" "$OUT/r/gpu_tests.log"
t0=$SECONDS
python3 -m bcgprof capture --out "$OUT/r/final" >"$OUT/r/final.out" 2>&1
echo "capture exit $? wall $((SECONDS - t0)) s"
cat "$OUT/r/final/summary.csv"
tar czf "$OUT/recheck.tgz" -C "$OUT" r && rm -rf "$OUT/r"
