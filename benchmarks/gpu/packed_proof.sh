#!/usr/bin/env bash
# `--experts packed` on the GPU: gpt-oss's MXFP4 experts kept as uint8 blocks and scales, decoded
# inside the fused MoE's GEMMs.
#   cd <tree> && OUT=dir bash benchmarks/gpu/packed_proof.sh
# Stages (STAGES="tests capture" by default):
#   tests    python3 -m pytest -q tests/gpu -k packed: the packed kernel against the bf16 fused MoE at
#            gpt-oss-20b's expert shape, no bf16 expert copy, graph replay (log: $OUT/r/pytest.log)
#   capture  bcgprof capture --experts packed (gpt-oss-20b, every mode) into $OUT/packed, then the
#            side-by-side table against reports/gpt-oss-20b-h200 (benchmarks/gpu/packed_table.py)
# Timeouts: TEST_TIMEOUT (default 120 s), CAP_TIMEOUT (default 360 s); together under a 600 s limit. The short table comes last.
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=$PWD
OUT=${OUT:-/tmp/bcgprof-packed}
STAGES=${STAGES:-"tests capture"}
R=$OUT/r
mkdir -p "$R"
SUMMARY=$R/summary.txt
: >"$SUMMARY"
. "$HERE/benchmarks/gpu/proof_lib.sh"
BASELINE=$HERE/reports/gpt-oss-20b-h200

say "packed experts proof in $HERE ($(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?')); out $OUT"
PYTHONPATH=$HERE python3 - <<'PY' 2>&1 | tee -a "$SUMMARY"
import torch
try:
    import triton
    tv = triton.__version__
except Exception as e:  # reported, the tests then skip
    tv = f"missing ({e})"
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"torch {torch.__version__}, triton {tv}, {name}")
PY

if stage tests; then
  t=$SECONDS
  PYTHONPATH=$HERE timeout "${TEST_TIMEOUT:-120}" python3 -m pytest -q -s -p no:cacheprovider tests/gpu -k packed \
    >"$R/pytest.log" 2>&1
  say "pytest tests/gpu -k packed: exit $? in $((SECONDS - t)) s (log: $R/pytest.log)"
  grep -E "^T=|packed expert layer|forward at|passed|failed|error" "$R/pytest.log" | tail -n 12 | tee -a "$SUMMARY"
fi

if stage capture; then
  if [ -e "$OUT/packed" ]; then
    say "$OUT/packed exists; the capture needs a new directory: remove it or choose another OUT"
  else
    t=$SECONDS
    PYTHONPATH=$HERE timeout "${CAP_TIMEOUT:-360}" python3 -m bcgprof capture --experts packed --out "$OUT/packed" \
      >"$R/capture.out" 2>&1
    say "bcgprof capture --experts packed: exit $? in $((SECONDS - t)) s (output: $R/capture.out; mode logs in $OUT/packed)"
  fi
  if [ -f "$OUT/packed/run.json" ]; then
    PYTHONPATH=$HERE python3 -m bcgprof show "$OUT/packed" --section summary >"$R/packed.summary" 2>&1
    PYTHONPATH=$HERE timeout 60 python3 "$HERE/benchmarks/gpu/packed_table.py" "$BASELINE" "$OUT/packed" >"$R/table.txt" 2>&1
    say "table: exit $? ($R/table.txt)"
  else
    say "no report in $OUT/packed; the end of the capture's output:"
    tail -n 20 "$R/capture.out" | tee -a "$SUMMARY"
  fi
fi

tar czf "$OUT/packed.tgz" -C "$OUT" r $( [ -d "$OUT/packed" ] && echo packed ) 2>/dev/null
say "done"
echo
if [ -f "$R/table.txt" ]; then
  cat "$R/table.txt"
fi
