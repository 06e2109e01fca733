"""Capture the lists `bcgprof advise` picks and check them against the advice (run on a CUDA machine).

    PYTHONPATH=. python3 benchmarks/gpu/advised_check.py OUT PROFILE BUDGET:MODE[:FREE] ...

For each case: `bcgprof advise --from PROFILE --budget BUDGET --mode MODE [--free FREE] -f json`, then
`bcgprof capture` of the advised list in that mode alone (same model, as the profile's run.json
names it) into OUT/advised-<i>, then a table: predicted, band, measured device used, within budget,
within band, and with FREE the free memory the list was predicted to need. Each capture is skipped
when less than 90 s are left of BUDGET_S (default 570). Exits 1 when a measurement is over its budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

MIB = 1 << 20


def _bcgprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bcgprof", *args], capture_output=True, text=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, profile = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    run = json.loads((profile / "run.json").read_text())
    budget_s, start = float(os.environ.get("BUDGET_S", "570")), time.monotonic()
    rows, over = [], 0
    for i, case in enumerate(argv[2:]):
        budget, mode, *free = case.split(":")
        args = ["advise", "--from", str(profile), "--budget", budget, "--mode", mode, "-f", "json"]
        if free:
            args += ["--free", free[0]]
        advised = _bcgprof(*args)
        if advised.returncode != 0:
            print(f"{case}: advise failed: {advised.stderr.strip()}", flush=True)
            continue
        advice = json.loads(advised.stdout)
        (out / f"advice-{i}.json").write_text(advised.stdout)
        if budget_s - (time.monotonic() - start) < 90:
            print(f"{case}: capture skipped (time)", flush=True)
            continue
        target = out / f"advised-{i}"
        t = time.monotonic()
        cap = _bcgprof("capture", "--model", run["model"], "--buckets", advice["spec"], "--modes", mode,
                       "--out", str(target))
        (out / f"advised-{i}.log").write_text(cap.stdout + cap.stderr)
        print(f"{case}: {len(advice['buckets'])} buckets, capture exit {cap.returncode} in "
              f"{time.monotonic() - t:.0f} s", flush=True)
        summary = target / "summary.csv"
        if cap.returncode != 0 or not summary.exists():
            continue
        import csv

        with summary.open() as f:
            measured = next(int(r["device_used_bytes"]) for r in csv.DictReader(f) if r["mode"] == mode
                            and r.get("rank", "0") in ("0", ""))
        within = measured <= advice["budget_bytes"]
        over += not within
        rows.append((case, len(advice["buckets"]), advice["predicted_bytes"], advice["predicted_low_bytes"],
                     advice["predicted_high_bytes"], measured, within,
                     advice["predicted_low_bytes"] <= measured <= advice["predicted_high_bytes"],
                     advice.get("needs_free_bytes")))
    print()
    print(f"{'case':28} {'n':>3} {'predicted':>9} {'band':>15} {'measured':>8} {'error':>7} {'in budget':>9} "
          f"{'in band':>7} {'needs free':>10}")
    for case, n, pred, low, high, meas, within, inside, need in rows:
        print(f"{case:28} {n:3d} {pred / MIB:9.1f} {low / MIB:7.1f}-{high / MIB:<7.1f} {meas / MIB:8.1f} "
              f"{100 * (pred - meas) / meas:+6.2f}% {within!s:>9} {inside!s:>7} "
              f"{(need or 0) / MIB:10.0f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
