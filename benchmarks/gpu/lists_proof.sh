#!/usr/bin/env bash
# Captures a queue of bucket lists on the GPU, each as users run it, within one device command's
# time; every finished report is appended to $OUT/reports.tar at once, so that a run cut short
# still brings back what finished. Run from the repository root:
#   OUT=dir JOBS="name|expected_s|capture args;..." [GATE="name=reports/baseline ..."] bash benchmarks/gpu/lists_proof.sh
# A job starts only when its expected seconds fit in what is left of BUDGET_S (default 570).
# GATE pairs a captured report with a committed one (or, by an absolute path such as $OUT/r/NAME, with
# another captured here) for a zero-tolerance per-bucket gate; a pair ending in :allow-mismatch gates
# reports whose run settings differ (say --warmup 1 against 2).
set -uo pipefail
export PYTHONUNBUFFERED=1
HERE=$PWD
OUT=${OUT:-/tmp/bcgprof-lists}
R=$OUT/r
mkdir -p "$R"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
STAGES=""
. "$HERE/benchmarks/gpu/proof_lib.sh"
BUDGET_S=${BUDGET_S:-570}
start=$SECONDS
IFS=';' read -r -a jobs <<<"${JOBS:-}"
for job in "${jobs[@]}"; do
  [[ -z ${job// /} ]] && continue
  IFS='|' read -r name expected args <<<"$job"
  name=${name// /}
  left=$((BUDGET_S - (SECONDS - start)))
  if (( left < expected )); then say "$name: skipped (expects ${expected} s, ${left} s left)"; continue; fi
  t=$SECONDS
  # shellcheck disable=SC2086  # args is a capture command line without quoted spaces
  PYTHONPATH=$HERE timeout "$left" python3 -m bcgprof capture $args --out "$R/$name" >"$R/$name.log" 2>&1
  say "$name: exit $? in $((SECONDS - t)) s (bcgprof capture $args)"
  tar -rf "$OUT/reports.tar" -C "$R" "$name" "$name.log" 2>/dev/null
done
for pair in ${GATE:-}; do
  name=${pair%%=*}; base=${pair#*=}
  more=()
  if [[ $base == *:allow-mismatch ]]; then base=${base%:allow-mismatch}; more=(--allow-mismatch); fi
  [[ -f $R/$name/run.json ]] || continue
  [[ $base == /* ]] || base=$HERE/$base  # a committed report, or (absolute) one captured above: $OUT/r/NAME
  zgate "$base" "$R/$name" ${more[@]+"${more[@]}"}
  tar -rf "$OUT/reports.tar" -C "$R" "$name.gate"
done
say "total $((SECONDS - start)) s"
