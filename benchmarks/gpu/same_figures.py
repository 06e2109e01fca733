"""Column by column, are two captures of the same run the same? Every figure of buckets.csv except the
wall times (warmup_ms, capture_ms), row by row, and each mode's allocator trace (decompressed rows, device addresses aside).

    python benchmarks/gpu/same_figures.py REFERENCE CURRENT

Prints one line per column that differs (rows differing, largest difference) and one per trace; exits 0
when everything is the same."""

from __future__ import annotations

import csv
import gzip
import itertools
import sys
from pathlib import Path

TIMES = {"warmup_ms", "capture_ms"}


def rows(report: Path) -> dict[tuple, dict]:
    with open(report / "buckets.csv", newline="") as f:
        return {(r["mode"], r.get("rank", "0"), r["bucket"]): r for r in csv.DictReader(f)}


def trace_rows(path: Path) -> list[str]:
    """The rows without the header (it names times) and without segments' device addresses (the
    process's virtual addresses, which differ from one process to the next). Each run of consecutive
    ``segment_free`` rows (one ``empty_cache``) is sorted: the allocator releases a stream's free
    segments in address order, so under randomised addresses two same-size segments can swap places
    with no figure moved."""
    with gzip.open(path, "rt") as f:
        lines = [line.rstrip("\n").rsplit(",", 1)[0] for line in f if not line.startswith("#")]
    out: list[str] = []
    for freeing, group in itertools.groupby(lines, key=lambda line: line.split(",")[3:4] == ["segment_free"]):
        run = list(group)
        out.extend(sorted(run) if freeing else run)
    return out


def main(ref: Path, cur: Path) -> int:
    a, b = rows(ref), rows(cur)
    bad = 0
    if set(a) != set(b):
        print(f"rows differ: {len(set(a) - set(b))} only in reference, {len(set(b) - set(a))} only in current")
        bad += 1
    keys = sorted(set(a) & set(b))
    columns = [c for c in next(iter(a.values())) if c not in TIMES]
    for c in columns:
        diffs = [(k, a[k][c], b[k].get(c)) for k in keys if a[k][c] != b[k].get(c)]
        if diffs:
            bad += 1
            worst = max(diffs, key=lambda d: abs(float(d[1] or 0) - float(d[2] or 0))
                        if c.endswith("bytes") else 0)
            print(f"{c}: {len(diffs)} of {len(keys)} rows differ, e.g. {worst[0]}: {worst[1]} vs {worst[2]}")
    print(f"buckets.csv: {len(keys)} rows, {len(columns)} columns compared, {bad} differing")
    for t in sorted(ref.glob("traces-*.csv.gz")):
        other = cur / t.name
        same = other.exists() and trace_rows(t) == trace_rows(other)
        bad += not same
        print(f"{t.name}: {'same rows' if same else 'DIFFERENT' if other.exists() else 'missing'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
