#!/usr/bin/env bash
# Does replaying the allocator traces reproduce the graph pool to the byte? Run from the repository
# root on a CUDA machine; everything lands under $OUT and a short table is printed last.
#   OUT=dir bash benchmarks/gpu/replay_proof.sh            (STAGES="env profile gate replay fresh test")
# Stages:
#   env      GPU, driver, torch
#   profile  the default capture (gpt-oss-20b, 74 buckets, four modes) with traces, into $OUT/profile
#   gate     that capture gated with zero tolerance against reports/gpt-oss-20b-h200: recording the
#            traces changed no measured figure (and the model's requests are those of the held-out reports)
#   replay   benchmarks/gpu/replay_check.py: the profile's own list replayed (every row's pool_bytes, every
#            allocation's address), then the committed H200 lists predicted from it row by row
#   fresh    a sparse list captured now ($OUT/fresh-sparse) and predicted from the profile
#   test     pytest tests/gpu/test_replay_gpu.py (a tiny model: own list and a captured subset)
# The whole run takes about 7 minutes on an H200; fresh and test are skipped when less than LEFT_S
# (default 150) seconds of a 10-minute budget (BUDGET_S=600) remain, so the table always comes.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/bcgprof-replay-proof}
STAGES=${STAGES:-"env profile gate replay fresh test"}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
HERE=$PWD
. "$HERE/benchmarks/gpu/proof_lib.sh"
BUDGET_S=${BUDGET_S:-600}
LEFT_S=${LEFT_S:-150}
time_for() {  # a stage that may be skipped: is there time for it and the replay after it?
  if (( BUDGET_S - (SECONDS - start) < LEFT_S + $1 )); then say "$2: skipped (time)"; return 1; fi
}
start=$SECONDS
HELD_OUT=""
for name in sparse subset20 second-13824-per-bucket second-13824-shared-largest second-15360-per-bucket \
            second-15360-shared-largest advised-per-bucket advised-shared advised-shared-largest; do
  [[ -f reports/gpt-oss-20b-h200-$name/run.json ]] && HELD_OUT="$HELD_OUT reports/gpt-oss-20b-h200-$name"
done

if stage env; then
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$OUT/env.txt"
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/env.txt"
fi

if stage profile; then
  t=$SECONDS
  rm -rf "$OUT/profile"
  timeout $((BUDGET_S - LEFT_S)) python3 -m bcgprof capture --out "$OUT/profile" >"$OUT/profile.log" 2>&1
  say "profile: exit $? in $((SECONDS - t)) s; traces: $(ls -l "$OUT"/profile/traces-*.csv.gz 2>/dev/null \
    | awk '{s += $5} END {printf "%.2f MiB in %d files", s / 1048576, NR}')"
fi

if stage gate; then
  python3 -m bcgprof gate --baseline reports/gpt-oss-20b-h200 --current "$OUT/profile" --each-bucket \
    --rel-tol 0 --abs-tol-mib 0 >"$OUT/gate.log" 2>&1
  say "gate against reports/gpt-oss-20b-h200 (zero tolerance): exit $? ($(tail -n 1 "$OUT/gate.log"))"
fi

if stage fresh && time_for 90 "fresh sparse capture"; then
  t=$SECONDS
  rm -rf "$OUT/fresh-sparse"
  timeout 150 python3 -m bcgprof capture --buckets 1024,2048,4096,8192,13824,16384 --out "$OUT/fresh-sparse" \
    >"$OUT/fresh-sparse.log" 2>&1
  say "fresh sparse capture: exit $? in $((SECONDS - t)) s"
  [[ -f $OUT/fresh-sparse/run.json ]] && HELD_OUT="$HELD_OUT $OUT/fresh-sparse"
fi

if stage test && time_for 90 "gpu test"; then
  t=$SECONDS
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_replay_gpu.py >"$OUT/gpu_test.log" 2>&1
  say "gpu test: $(tail -n 1 "$OUT/gpu_test.log") ($((SECONDS - t)) s)"
  grep -E "^(FAILED|ERROR|E )" "$OUT/gpu_test.log" | head -20 | tee -a "$SUMMARY"
fi

if stage replay; then
  # shellcheck disable=SC2086  # HELD_OUT is a list of paths without spaces
  timeout 240 python3 benchmarks/gpu/replay_check.py "$OUT/profile" $HELD_OUT >"$OUT/replay.txt" 2>&1
  code=$?
  say ""
  say "replay (exit $code):"
  tee -a "$SUMMARY" <"$OUT/replay.txt"
fi
say "total $((SECONDS - start)) s; everything in $OUT"
