#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1
W=/tmp/w; mkdir -p $W
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $GPU"
case "$GPU" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0;; esac
PYTHONPATH=$PWD timeout 470 python3 benchmarks/capture_vs_commit.py --tree _old --rounds 1 --out $W/cmp > $W/cmp.log 2>&1; echo "exit $?"
tar -cf $OUT/all.tar -C $W . 2>/dev/null
tail -n 20 $W/cmp.log
