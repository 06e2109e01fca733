#!/usr/bin/env bash
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
W=/tmp/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 150 python3 benchmarks/mode_parts.py --modes per-bucket --out $W/parts > $W/parts.log 2>&1; echo "parts exit $?"
timeout 150 python3 -m cProfile -o $W/pb.prof -m bcgprof capture --in-process --modes per-bucket --out $W/prof > $W/prof.log 2>&1; echo "prof exit $?"
python3 -c "import pstats; s=pstats.Stats('$W/pb.prof'); s.sort_stats('tottime').print_stats(25)" > $W/prof_tot.txt 2>&1
python3 -c "import pstats; s=pstats.Stats('$W/pb.prof'); s.sort_stats('cumtime').print_stats('bcgprof/(measure|report|bcg)', 40)" > $W/prof_cum.txt 2>&1
tar -cf $OUT/all.tar -C $W . 2>/dev/null
tail -n 30 $W/parts.log; echo; sed -n 1,45p $W/prof_tot.txt | cut -c1-150
