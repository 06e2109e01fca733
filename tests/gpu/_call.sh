#!/usr/bin/env bash
# one device call: the H200 proof (default capture gated at zero tolerance), layers, every-third list, GPU tests
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=/tmp/w; R=$W/r; mkdir -p $R
S=$R/summary.txt; : > $S
say() { echo "$*" | tee -a $S; }
zg() { python3 -m bcgprof gate --baseline "$1" --current "$2" --per-bucket --rel-tol 0 --abs-tol-mib 0 > "$2.gate" 2>&1; say "zgate $2 vs $1: exit $? :: $(head -n 1 $2.gate)"; }
pack() { tar -cf $OUT/all.tar -C $W . 2>/dev/null; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "gpu: $GPU; $(python3 -c 'import torch;print(torch.__version__)')"
case "$GPU" in *H200*) REF=reports/gpt-oss-20b-h200; TR=reports/gpt-oss-20b-h200-traced;;
  *) REF=reports/gpt-oss-20b-h100-traced; TR=reports/gpt-oss-20b-h100-traced;; esac
t=$SECONDS
python3 -m bcgprof capture --out $R/default > $R/default.log 2>&1; say "default capture: exit $? in $((SECONDS-t)) s"
zg $REF $R/default
[ "$REF" != "$TR" ] && zg $TR $R/default
python3 tests/gpu/same_figures.py $TR $R/default > $R/same.log 2>&1; say "same_figures vs $TR: exit $? :: $(grep -E 'differing|rows' $R/same.log | head -5 | tr '\n' ' ')"
pack
t=$SECONDS
python3 benchmarks/capture_timeline.py --json $R/layers-timeline.json -- --num-layers 2,4 --out $R/layers > $R/layers.log 2>&1; say "layers 2,4: exit $? in $((SECONDS-t)) s"
tail -n 25 $R/layers.log >> $S
case "$GPU" in *H200*) for n in 2 4; do zg reports/gpt-oss-20b-h200-layers/layers-$n $R/layers/layers-$n; done;; esac
pack
case "$GPU" in *H200*)
  t=$SECONDS
  python3 -m bcgprof capture --buckets 8,20,32,80,128,176,224,288,384,480,640,832,1024,1792,2560,3328,4096,5632,7168,8704,10240,11776,13312,14848,16384 --out $R/third > $R/third.log 2>&1
  say "third: exit $? in $((SECONDS-t)) s"; pack;;
esac
t=$SECONDS
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu -k "not 16k" > $R/gpu_tests.log 2>&1; say "gpu tests: $(tail -n 1 $R/gpu_tests.log) ($((SECONDS-t)) s)"
grep -E "^(FAILED|ERROR)" $R/gpu_tests.log | head -10 | tee -a $S
pack
echo ======; cat $S
