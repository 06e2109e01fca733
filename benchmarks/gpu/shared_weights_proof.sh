#!/usr/bin/env bash
# `--weights one-layer` on the GPU: captures with one layer's weights for every layer, checked against
# the committed captures with distinct weights at zero tolerance, and models too large for the card.
#   OUT=dir STAGES="gpt-oss-20b llama" bash benchmarks/gpu/shared_weights_proof.sh
# Stages:
#   gpt-oss-20b   the default capture with --weights one-layer, against reports/gpt-oss-20b-h200
#   llama         Llama-3.1-8B likewise, against reports/llama-3.1-8b-h200
#   gpt-oss-120b  gpt-oss-120b at full depth (36 layers), the default buckets, every mode
#   qwen3-235b    Qwen3-235B-A22B at full depth (94 layers), the default buckets, every mode
# For each pair: the gate (per bucket, --rel-tol 0 --abs-tol-mib 0) and every figure column of
# buckets.csv compared row for row (all but the timings and the sampled device peak).
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=$PWD
OUT=${OUT:-/tmp/bcgprof-shared}
STAGES=${STAGES:-"gpt-oss-20b llama"}
R=$OUT/r
mkdir -p "$R"
SUMMARY=$R/summary.txt
: >"$SUMMARY"
. "$HERE/benchmarks/gpu/proof_lib.sh"

cap() {
  local name=$1; shift
  local t=$SECONDS
  PYTHONPATH=$HERE timeout "${CAP_TIMEOUT:-540}" python3 -m bcgprof capture "$@" --out "$R/$name" >"$R/$name.out" 2>&1
  say "$name: exit $? in $((SECONDS - t)) s (bcgprof capture $*)"
  PYTHONPATH=$HERE python3 -m bcgprof show "$R/$name" --section summary >"$R/$name.summary" 2>&1 && cat "$R/$name.summary" | tee -a "$SUMMARY" >/dev/null
}

same() {  # baseline current: the zero-tolerance gate, then every figure column row for row
  zgate "$1" "$2"
  PYTHONPATH=$HERE python3 - "$1" "$2" <<'PY' | tee -a "$SUMMARY"
import csv, sys
SKIP = {"warmup_ms", "capture_ms", "device_peak_delta_bytes", "detail"}  # timings; the NVML sampler's peak
def rows(d):
    with open(f"{d}/buckets.csv") as f:
        return {(r["mode"], r["rank"], r["bucket"]): r for r in csv.DictReader(f)}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
cols = [c for c in next(iter(a.values())) if c not in SKIP]
diff = {c: sum(1 for k in a if k in b and a[k][c] != b[k][c]) for c in cols}
print(f"  rows {len(a)} vs {len(b)}, same keys: {a.keys() == b.keys()}; figure columns compared: {len(cols)}")
print("  columns that differ: " + (", ".join(f"{c} ({n} rows)" for c, n in diff.items() if n) or "none"))
PY
  PYTHONPATH=$HERE python3 - "$2" <<'PY' | tee -a "$SUMMARY"
import json, sys
run = json.load(open(f"{sys.argv[1]}/run.json"))
print(f"  weights: {run.get('weights')}; layers {run.get('layers')}")
PY
}

if stage gpt-oss-20b; then
  cap gpt-oss-20b-shared --weights one-layer
  same reports/gpt-oss-20b-h200 "$R/gpt-oss-20b-shared"
fi
if stage llama; then
  cap llama-3.1-8b-shared --model Llama-3.1-8B --weights one-layer
  same reports/llama-3.1-8b-h200 "$R/llama-3.1-8b-shared"
fi
if stage gpt-oss-120b; then
  cap gpt-oss-120b-shared --model gpt-oss-120b --weights one-layer
fi
if stage qwen3-235b; then
  cap qwen3-235b-a22b-shared --model Qwen3-235B-A22B --weights one-layer
fi
tar czf "$OUT/shared.tgz" -C "$OUT" r
say "done"
