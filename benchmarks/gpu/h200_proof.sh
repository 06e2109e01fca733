#!/usr/bin/env bash
# Everything bcgprof checks on a GPU machine, stage by stage; logs and reports land under $OUT
# (one tarball) and a short summary is printed last.
#   OUT=dir STAGES="env tests kernels forward build proof sites" bash benchmarks/gpu/h200_proof.sh
# Stages:
#   env      GPU, driver, torch, triton
#   tests    pytest tests/gpu (all but the slow 16k builds)
#   kernels  python -m bcgprof.models.kernels.bench from $OLD (a checkout whose stacks still had the
#            unfused MoE, so old and new paths are timed side by side) or this tree
#   forward  eager forward at 16384 tokens of gpt-oss-20b, this tree and $OLD
#   build    python -m bcgprof.measure.benchmark --build-profile
#   proof    the default capture (three modes) from $OLD, gated with zero tolerance against
#            reports/gpt-oss-20b-h200
#   sites    floor captures (16384 tokens) of gpt-oss-20b and Qwen3-30B-A3B: sites.csv, the pool's peak
#   default  the default capture from this tree (the reference report; its wall time is the benchmark's)
#   snapshot a small capture with --snapshot (the memory_viz pickles, gzipped)
#   variants shared-largest's configurations: a sparse list, a 20-bucket subset, Qwen3-30B-A3B and
#            Llama-3.1-8B at 4 layers
#   full     the default buckets as full graphs;  smallest  captured smallest first
#   decode   decode captures: gpt-oss-20b breakable and full, Llama-3.1-8B
#   layers   `--num-layers 2,4` of gpt-oss-20b, Llama-3.1-8B, Qwen3-30B-A3B, gpt-oss-120b (for predict)
#   llama-full, qwen-full   the default captures of Llama-3.1-8B and Qwen3-30B-A3B at full depth
#   advise   the list `bcgprof advise` picks from reports/gpt-oss-20b-h200 for $BUDGET (default 2.25GiB),
#            per mode, captured in that mode
#   again    gpt-oss-20b at 2,4 layers again, gated with zero tolerance against reports/gpt-oss-20b-h200-layers
#   gate     the default capture again, gated with zero tolerance against reports/gpt-oss-20b-h200
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
. "$HERE/benchmarks/gpu/proof_lib.sh"
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
    (cd "$tree" && PYTHONPATH=$tree timeout 180 python3 "$HERE/benchmarks/gpu/forward_time.py" --model gpt-oss-20b) \
      >>"$R/forward.log" 2>&1
  done
  say "forward at 16384:"; grep '^{' "$R/forward.log" | tee -a "$SUMMARY"
fi

if stage build; then
  PYTHONPATH=$HERE timeout 120 python3 -m bcgprof.measure.benchmark --build-profile >"$R/build_profile.log" 2>&1
  cat "$R/build_profile.log" | tee -a "$SUMMARY"
fi

if stage proof; then
  t=$SECONDS
  (cd "$OLD" && PYTHONPATH=$OLD timeout 400 python3 -m bcgprof capture --modes per-bucket,shared,floor \
     --out "$R/proof") >"$R/proof.out" 2>&1
  say "proof capture ($OLD): exit $? in $((SECONDS - t)) s"
  PYTHONPATH=$HERE python3 -m bcgprof gate --baseline reports/gpt-oss-20b-h200 --current "$R/proof" --each-bucket \
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

# cap NAME ARGS...: one `bcgprof capture` into $R/NAME, its wall time and per-mode totals
cap() {
  local name=$1; shift
  if (( SECONDS - start > ${DEADLINE:-100000} )); then say "$name: skipped (past the deadline)"; return; fi
  local t=$SECONDS
  PYTHONPATH=$HERE timeout ${CAP_TIMEOUT:-400} python3 -m bcgprof capture "$@" --out "$R/$name" >"$R/$name.out" 2>&1
  local rc=$?
  say "$name: exit $rc in $((SECONDS - t)) s ($*)"
  [[ -d $R/$name ]] && PYTHONPATH=$HERE python3 - "$R/$name" <<'PY' | tee -a "$SUMMARY"
import sys
from pathlib import Path
from bcgprof.report import read_report
for d in sorted(p.parent for p in Path(sys.argv[1]).glob("**/summary.csv")):
  r = read_report(d)
  print(f" {d.name}: {r.run.layers} layers, {r.run.started_at[11:19]}..{r.run.ended_at[11:19]}")
  for s in r.summary:
    print(f"  {s.mode:<15} device {s.device_used_bytes / 2**20:9.1f} MiB  pool {s.pool_bytes / 2**20:9.1f} MiB  "
          f"non-torch {s.non_torch_bytes / 2**20:7.1f} MiB  segments {s.segments:>5}  ok {s.buckets} failed {s.failed}")
PY
  grep -E "error|Error" "$R/$name.out" | tail -n 3 | tee -a "$SUMMARY"
}

if stage kerneltest; then
  PYTHONPATH=$HERE timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kernels_gpu.py -k allocates \
    >"$R/kerneltest.log" 2>&1
  say "kernel memory tests: $(tail -n 1 "$R/kerneltest.log")"
fi
if stage decodetest; then
  PYTHONPATH=$HERE timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_gpu.py \
    tests/gpu/test_variants_gpu.py >"$R/decodetest.log" 2>&1
  say "decode and variant GPU tests: $(tail -n 1 "$R/decodetest.log")"
  grep -E "^(FAILED|ERROR)" "$R/decodetest.log" | head | tee -a "$SUMMARY"
fi
if stage default; then cap default; fi
if stage variants; then
  cap sparse --buckets 1024,2048,4096,8192
  cap subset20 --buckets 24,48,128,208,704,768,1024,1280,3072,3840,4096,5120,6144,8192,8704,10240,10752,11776,12288,16384
  cap qwen3-30b-a3b-4l --model Qwen3-30B-A3B --num-layers 4
  cap llama-3.1-8b-4l --model Llama-3.1-8B --num-layers 4
fi
if stage decode; then
  cap decode --phase decode
  cap decode-full --phase decode --graph full
fi
if stage snapshot; then
  cap snapshot --snapshot --buckets 4096,8192,16384
  for f in "$R"/snapshot/*.pickle; do [[ -f $f ]] && gzip -9 "$f"; done
  ls -la "$R/snapshot" | tee -a "$SUMMARY"
fi
if stage full; then cap full --graph full; fi
if stage smallest; then cap smallest-first --order smallest-first --modes per-bucket,shared,floor; fi
if stage llama-decode; then cap llama-decode --model Llama-3.1-8B --phase decode --context-len 2048; fi
if stage layers; then
  for model in gpt-oss-20b Llama-3.1-8B Qwen3-30B-A3B gpt-oss-120b; do
    cap "$(echo $model | tr 'A-Z' 'a-z')-layers" --model $model --num-layers 2,4
  done
fi
if stage llama-full; then cap llama-3.1-8b --model Llama-3.1-8B; fi
if stage qwen-full; then cap qwen3-30b-a3b --model Qwen3-30B-A3B; fi
if stage advise; then
  for mode in ${ADVISE_MODES:-per-bucket shared shared-largest}; do
    PYTHONPATH=$HERE python3 -m bcgprof advise --from reports/gpt-oss-20b-h200 --budget ${BUDGET:-2.25GiB} --mode $mode \
      -f json >"$R/advice-$mode.json"
    spec=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["spec"])' "$R/advice-$mode.json")
    cap advised-$mode --buckets "$spec" --modes $mode
  done
fi
# zgate BASELINE CURRENT: a zero-tolerance gate, its exit code and first lines
if stage again; then
  cap gpt-oss-20b-again --num-layers 2,4
  for n in 2 4; do zgate reports/gpt-oss-20b-h200-layers/layers-$n "$R/gpt-oss-20b-again/layers-$n"; done
fi
if stage gate; then
  cap default-again
  zgate reports/gpt-oss-20b-h200 "$R/default-again"
fi

tar czf "$OUT/proof.tgz" -C "$OUT" r
say "total $((SECONDS - start)) s"
