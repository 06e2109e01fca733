#!/usr/bin/env bash
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in *H200*) bash tests/gpu/_call.sh;; esac
bash tests/gpu/_exp.sh
echo =====; cat /tmp/w/r/summary.txt
