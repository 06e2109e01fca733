"""Side-by-side figures of two capture reports, for benchmarks/gpu/packed_proof.sh: a bf16-expert
baseline and a capture with ``--experts packed``.

    python3 benchmarks/gpu/packed_table.py BASELINE CURRENT

Prints, from the report files alone (run.json, summary.csv, buckets.csv; no bcgprof import, so a
broken tree still gets its table): the experts and the parameter bytes of each, each mode's pool
and device-used totals and their ratio to the floor, and per mode how the per-bucket pool figures
differ (rows that differ, the largest bucket's pool in each, the largest difference). Exit 0 when
both reports were read, 1 otherwise.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

MIB = 2 ** 20


def mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f}"


def delta(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "-"
    d = (b - a) / MIB
    pct = f" ({(b - a) / a:+.1%})" if a else ""
    return f"{d:+,.1f}{pct}"


def read(path: Path) -> dict:
    run = json.loads((path / "run.json").read_text())
    with open(path / "summary.csv") as f:
        summary = {r["mode"]: r for r in csv.DictReader(f) if r.get("rank", "0") == "0"}
    with open(path / "buckets.csv") as f:
        buckets = [r for r in csv.DictReader(f) if r.get("rank", "0") == "0"]
    modes = run.get("extra", {}).get("modes", {})
    params = next((m.get("parameter_bytes") for m in modes.values() if m.get("parameter_bytes")), None)
    return {"run": run, "summary": summary, "buckets": buckets, "params": params}


def number(row: dict | None, key: str) -> int | None:
    if not row or not row.get(key):
        return None
    return int(float(row[key]))


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3].strip())
        return 1
    try:
        a, b = (read(Path(p)) for p in argv)
    except (OSError, ValueError, KeyError) as e:
        print(f"cannot read the reports: {e}")
        return 1
    ra, rb = a["run"], b["run"]
    print(f"baseline {argv[0]}: {ra.get('model')} {ra.get('layers')} layers, experts {ra.get('experts', 'bf16')}, "
          f"status {ra.get('status')}; torch {ra.get('torch_version')}")
    print(f"current  {argv[1]}: {rb.get('model')} {rb.get('layers')} layers, experts {rb.get('experts', 'bf16')}, "
          f"status {rb.get('status')}; torch {rb.get('torch_version')}")
    print()
    rows = [["figure (MiB)", "baseline", "current", "current - baseline"],
            ["parameter bytes", mib(a["params"]), mib(b["params"]), delta(a["params"], b["params"])]]
    floor_a = number(a["summary"].get("floor"), "pool_bytes")
    floor_b = number(b["summary"].get("floor"), "pool_bytes")
    modes = [m for m in a["summary"] if m in b["summary"]] or list(b["summary"])
    for mode in modes:
        sa, sb = a["summary"].get(mode), b["summary"].get(mode)
        for key, label in (("pool_bytes", "pool"), ("device_used_bytes", "device used")):
            x, y = number(sa, key), number(sb, key)
            rows.append([f"{mode} {label}", mib(x), mib(y), delta(x, y)])
        if mode != "floor":
            x, y = number(sa, "pool_bytes"), number(sb, "pool_bytes")
            ratio = [f"{p / f:.3f}" if p and f else "-" for p, f in ((x, floor_a), (y, floor_b))]
            rows.append([f"{mode} pool / floor", *ratio, ""])
    print(table(rows))
    print()

    by_a = {(r["mode"], int(r["bucket"])): r for r in a["buckets"]}
    by_b = {(r["mode"], int(r["bucket"])): r for r in b["buckets"]}
    rows = [["per-bucket pool", "rows", "differ", "largest bucket: baseline", "current", "largest |difference|"]]
    for mode in modes:
        keys = sorted(k for k in by_a if k[0] == mode and k in by_b)
        if not keys:
            continue
        diffs = [number(by_b[k], "pool_bytes") - number(by_a[k], "pool_bytes") for k in keys  # type: ignore[operator]
                 if number(by_a[k], "pool_bytes") is not None and number(by_b[k], "pool_bytes") is not None]
        largest = max(keys, key=lambda k: k[1])
        worst = max(diffs, key=abs) if diffs else None
        rows.append([mode, str(len(keys)), str(sum(1 for d in diffs if d)),
                     f"{mib(number(by_a[largest], 'pool_bytes'))} ({largest[1]})",
                     mib(number(by_b[largest], "pool_bytes")), "-" if worst is None else f"{worst / MIB:+,.1f}"])
    print(table(rows))
    status = [r.get("status") for r in b["buckets"] if r.get("status") != "ok"]
    if status:
        print(f"\ncurrent: {len(status)} bucket rows not ok ({', '.join(sorted(set(map(str, status))))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
