#!/usr/bin/env bash
# Everything bcgprof checks on a GPU machine, stage by stage; logs and reports land under $OUT
# (one tarball) and a short summary is printed last.
#   OUT=dir STAGES="env tests kernels forward build proof sites" bash tests/gpu/h200_proof.sh
# Stages:
#   env      GPU, driver, torch, triton
#   tests    pytest tests/gpu (all but the slow 16k builds)
#   kernels  python -m bcgprof.models.kernels.bench from $OLD (a checkout whose stacks still had the
#            unfused MoE, so old and new paths are timed side by side) or this tree
#   forward  eager forward at 16384 tokens of gpt-oss-20b, this tree and $OLD
#   build    python -m bcgprof.benchmark --build-profile
#   proof    the default capture (three modes) from $OLD, gated with zero tolerance against
#            reports/gpt-oss-20b-h200
#   sites    floor captures (16384 tokens) of gpt-oss-20b and Qwen3-30B-A3B: sites.csv, the pool's peak
#   default  the default capture from this tree, with --snapshot
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=$PWD
OUT=${OUT:-/tmp/bcgprof-proof}
OLD=${OLD:-}
STAGES=${STAGES:-"env tests build sites"}
R=$OUT/r
mkdir -p "$R"
SUMMARY=$R/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
stage() { [[ " $STAGES " == *" $1 "* ]]; }
start=$SECONDS

if stage env; then
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$R/env.txt"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" | tee -a "$R/env.txt"
fi

if stage tests; then
  t=$SECONDS
  PYTHONPATH=$HERE timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu -k "not 16k" >"$R/gpu_tests.log" 2>&1
  say "gpu tests: $(tail -n 1 "$R/gpu_tests.log") ($((SECONDS - t)) s)"
  grep -E "^(FAILED|ERROR)" "$R/gpu_tests.log" | head -20 | tee -a "$SUMMARY"
fi

if stage kernels; then
  t=$SECONDS
  tree=${OLD:-$HERE}
  (cd "$tree" && PYTHONPATH=$tree timeout 240 python3 -m bcgprof.models.kernels.bench) >"$R/kernels_bench.log" 2>&1
  say "kernel bench ($tree, $((SECONDS - t)) s):"; tail -n 12 "$R/kernels_bench.log" | tee -a "$SUMMARY"
fi

if stage forward; then
  for tree in $HERE $OLD; do
    (cd "$tree" && PYTHONPATH=$tree timeout 180 python3 "$HERE/tests/gpu/forward_time.py" --model gpt-oss-20b) \
      >>"$R/forward.log" 2>&1
  done
  say "forward at 16384:"; grep '^{' "$R/forward.log" | tee -a "$SUMMARY"
fi

if stage build; then
  PYTHONPATH=$HERE timeout 120 python3 -m bcgprof.benchmark --build-profile >"$R/build_profile.log" 2>&1
  cat "$R/build_profile.log" | tee -a "$SUMMARY"
fi

if stage proof; then
  t=$SECONDS
  (cd "$OLD" && PYTHONPATH=$OLD timeout 400 python3 -m bcgprof capture --modes per-bucket,shared,floor \
     --out "$R/proof") >"$R/proof.out" 2>&1
  say "proof capture ($OLD): exit $? in $((SECONDS - t)) s"
  PYTHONPATH=$HERE python3 -m bcgprof gate --baseline reports/gpt-oss-20b-h200 --current "$R/proof" --per-bucket \
    --rel-tol 0 --abs-tol-mib 0 >"$R/proof_gate.out" 2>&1
  say "zero-tolerance gate: exit $?"; head -n 3 "$R/proof_gate.out" | tee -a "$SUMMARY"
fi

if stage sites; then
  for model in gpt-oss-20b Qwen3-30B-A3B; do
    t=$SECONDS
    PYTHONPATH=$HERE timeout 200 python3 -m bcgprof capture --model $model --modes floor --buckets 16384 \
      --out "$R/floor-$model" >"$R/floor-$model.out" 2>&1
    say "floor $model: exit $? in $((SECONDS - t)) s"
    PYTHONPATH=$HERE python3 - "$R/floor-$model" <<'PY' | tee -a "$SUMMARY"
import sys
from bcgprof.report import read_report
r = read_report(sys.argv[1])
live = sum(s.bytes for s in r.sites if s.kind == "site")
slack = sum(s.bytes for s in r.sites if s.kind == "slack")
pool = r.buckets[0].pool_bytes
print(f"  pool {pool:,}  peak live {live:,}  slack {slack:,}  live+slack==pool {live + slack == pool}")
for s in sorted(r.sites, key=lambda s: -s.bytes)[:8]:
    print(f"    {s.bytes:>14,}  {s.site}")
PY
  done
fi

if stage default; then
  t=$SECONDS
  PYTHONPATH=$HERE timeout 500 python3 -m bcgprof capture --snapshot --out "$R/default" >"$R/default.out" 2>&1
  say "default capture: exit $? in $((SECONDS - t)) s"
  tail -n 8 "$R/default.out" | tee -a "$SUMMARY"
  ls -la "$R/default" | tee -a "$SUMMARY"
fi

tar czf "$OUT/proof.tgz" -C "$OUT" r
say "total $((SECONDS - start)) s"
