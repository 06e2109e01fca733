"""Capture under memory pressure: does the first bucket bcgprof predicts to run out fail first?

    PYTHONPATH=. python3 benchmarks/gpu/free_check.py OUT_DIR MODEL:REPORT:FREE_MIB[,FREE_MIB...] ...

For each model: a one-bucket capture (the largest) learns what the process takes before its first
bucket's warm-up (model, pre-warm, CUDA context), as NVML free before the process less NVML free
when that warm-up begins. Then, for each FREE_MIB, benchmarks/gpu/hold_memory.py holds memory so that
FREE_MIB are free when the first warm-up begins, and a per-bucket capture of the report's list
runs. The prediction (bcgprof.analysis.predict.needs_free, from the committed REPORT's measured rows) is
printed beside what happened: the first bucket that failed, its status, and the last that captured.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pynvml

from bcgprof.analysis.predict.needs_free import measured_needs
from bcgprof.report import read_report

MIB = 1 << 20
HERE = Path(__file__).resolve().parent


def nvml_free() -> int:
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free)


def capture(model: str, out: Path, buckets: str, log: Path) -> float:
    t = time.time()
    cmd = [sys.executable, "-m", "bcgprof", "capture", "--model", model, "--modes", "per-bucket",
           "--buckets", buckets, "--out", str(out)]
    with open(log, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=300, check=False)
    return time.time() - t


def first_free(report) -> int:
    """NVML free when the first bucket's warm-up began: free after it plus what it kept (both NVML)."""
    row = min(report.buckets, key=lambda r: r.order)
    return row.free_bytes + (row.device_used_delta_bytes if row.status == "ok" else 0)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    pynvml.nvmlInit()
    results = []
    for spec in sys.argv[2:]:
        model, profile, frees = spec.split(":")
        committed = read_report(profile)
        rows = sorted((r for r in committed.buckets if r.mode == "per-bucket"), key=lambda r: r.order)
        buckets = ",".join(str(r.bucket) for r in rows)
        before = nvml_free()
        cal = out / f"cal-{model}"
        capture(model, cal, str(rows[0].bucket), out / f"cal-{model}.log")
        cost = before - first_free(read_report(cal))
        print(f"{model}: the process takes {cost / MIB:.0f} MiB before its first warm-up", flush=True)
        for free_mib in [int(x) for x in frees.split(",")]:
            name = f"free-{model}-{free_mib}"
            holder = subprocess.Popen([sys.executable, str(HERE / "hold_memory.py"),
                                       str(free_mib * MIB + cost)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
            held = holder.stdout.readline().strip()
            wall = capture(model, out / name, buckets, out / f"{name}.log")
            holder.stdin.close()
            holder.wait(timeout=60)
            try:
                got = read_report(out / name)
            except Exception as e:  # a capture that left no readable report
                results.append({"run": name, "error": str(e)[:200]})
                continue
            ok = sorted((r for r in got.buckets if r.status == "ok"), key=lambda r: r.order)
            failed = next((r for r in sorted(got.buckets, key=lambda r: r.order) if r.status != "ok"), None)
            actual = first_free(got) if ok else None
            h = measured_needs("per-bucket", rows).check(actual if actual is not None else free_mib * MIB)
            results.append({
                "run": name, "target_free_mib": free_mib, "holder": held, "wall_s": round(wall, 1),
                "free_at_first_warmup_mib": None if actual is None else actual / MIB,
                "predicted_first_oom": None if h.first_oom is None else
                [h.first_oom.bucket, h.first_oom.order + 1, h.first_oom_phase, h.first_oom_certain],
                "predicted_free_there_mib": None if h.first_oom_free_bytes is None else h.first_oom_free_bytes / MIB,
                "predicted_need_there_mib": None if h.first_oom is None else h.first_oom.need_bytes / MIB,
                "measured_first_failure": None if failed is None else
                [failed.bucket, failed.order + 1, failed.status, (failed.detail or "")[:160]],
                "measured_last_ok": None if not ok else [ok[-1].bucket, ok[-1].order + 1],
                "measured_ok": len(ok), "measured_rows": len(got.buckets),
                "agrees": (h.first_oom is None and failed is None) or
                          (h.first_oom is not None and failed is not None and h.first_oom.bucket == failed.bucket),
            })
            print(json.dumps(results[-1]), flush=True)
    (out / "free_check.json").write_text(json.dumps(results, indent=1))
    print("\nrun                               free MiB  predicted first OOM        measured first failure  agrees")
    for r in results:
        if "error" in r:
            print(f"{r['run']:<34} error: {r['error']}")
            continue
        p, m = r["predicted_first_oom"], r["measured_first_failure"]
        fa = r["free_at_first_warmup_mib"]
        print(f"{r['run']:<34} {fa if fa is None else round(fa):>8}  "
              f"{'fits' if p is None else f'{p[0]} (#{p[1]}, {p[2]})':<26} "
              f"{'none' if m is None else f'{m[0]} (#{m[1]}, {m[2]})':<23} {r['agrees']}")


if __name__ == "__main__":
    main()
