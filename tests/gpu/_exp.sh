#!/usr/bin/env bash
# experiment: the floor's stack window recorded for allocations only (context="alloc") against "all"
set -uo pipefail
export PYTHONUNBUFFERED=1
W=/tmp/w; R=$W/exp; mkdir -p $R; S=$W/r/summary.txt; mkdir -p $W/r; touch $S
say() { echo "$*" | tee -a $S; }
HERE=$PWD
rm -rf /tmp/alloc && cp -r $HERE /tmp/alloc
sed -i 's/context="all" if self._stacks else None/context=("all" if self._always_stacks else "alloc") if self._stacks else None/' /tmp/alloc/bcgprof/measure/tracing.py
grep -n 'context=' /tmp/alloc/bcgprof/measure/tracing.py | tee -a $S
for pair in "base:$HERE" "alloc:/tmp/alloc"; do
  n=${pair%%:*}; tree=${pair#*:}
  (cd $tree && PYTHONPATH=$tree python3 -m bcgprof capture --num-layers 2,4 --modes floor --out $R/$n > $R/$n.log 2>&1); say "$n floor 2,4: exit $?"
  for d in 2 4; do python3 - $R/$n/layers-$d/run.json <<'PY' | tee -a $S
import json,sys; m=json.load(open(sys.argv[1]))["extra"]["modes"]["floor"]; print(sys.argv[1].split("/")[-3:-1], {k: m[k] for k in ("prewarm_s","warmup_s","capture_s","measure_s","verify_s","wall_s")})
PY
  done
done
for d in 2 4; do
  a=$R/base/layers-$d; b=$R/alloc/layers-$d
  cmp -s $a/sites.csv $b/sites.csv; say "layers-$d sites.csv identical: $([ $? = 0 ] && echo yes || echo NO)"
  PYTHONPATH=$HERE python3 tests/gpu/same_figures.py $a $b 2>&1 | tr '\n' ' ' | tee -a $S; echo | tee -a $S
done
(PYTHONPATH=$HERE python3 -m cProfile -o $R/floor.prof -m bcgprof capture --in-process --num-layers 2 --modes floor --out $R/prof > $R/prof.log 2>&1); say "cProfile floor in-process: exit $?"
python3 -c "import pstats; pstats.Stats('$R/floor.prof').sort_stats('cumtime').print_stats(40)" > $R/prof.txt 2>&1
grep -E "measure|sites|_snapshot|pool_peak|_site_of|linecache|take|capture_done|write" $R/prof.txt | head -30 | tee -a $S
tar -cf $OUT/all.tar -C $W . 2>/dev/null
