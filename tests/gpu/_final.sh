#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=/tmp/w; R=$W/r; mkdir -p $R; S=$R/summary.txt; : > $S
say() { echo "$*" | tee -a $S; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); say "gpu: $GPU"
t=$SECONDS; python3 -m bcgprof capture --num-layers 2,4 --out $R/layers > $R/layers.log 2>&1; say "layers 2,4: exit $? in $((SECONDS-t)) s"
case "$GPU" in *H200*) REF=reports/gpt-oss-20b-h200-layers;; *) REF="";; esac
for n in 2 4; do
  [ -n "$REF" ] && { python3 -m bcgprof gate --baseline $REF/layers-$n --current $R/layers/layers-$n --per-bucket --rel-tol 0 --abs-tol-mib 0 > $R/g$n.txt 2>&1; say "zgate layers-$n vs $REF: exit $?"; }
done
python3 -c "
from bcgprof.report import read_report
for n in (2,4): r=read_report('$R/layers/layers-%d'%n); print('read layers-%d:'%n, len(r.buckets), 'rows', len(r.sites), 'site rows')" 2>&1 | tee -a $S
t=$SECONDS; timeout 95 python3 -m pytest -q -p no:cacheprovider tests/gpu -k "not 16k" > $R/gpu_tests.log 2>&1; say "gpu tests: $(tail -n 1 $R/gpu_tests.log) ($((SECONDS-t)) s)"
grep -E "^(FAILED|ERROR)" $R/gpu_tests.log | head -10 | tee -a $S
tar -cf $OUT/all.tar -C $W . 2>/dev/null
echo ====; cat $S
