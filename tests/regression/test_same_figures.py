"""benchmarks/gpu/same_figures.py, the check that two captures of one run measured the same: CPU
only, on a committed traced report and a copy of it."""

from __future__ import annotations

import csv
import gzip
import shutil
from pathlib import Path

import pytest

from helpers import ROOT, load_script

same_figures = load_script("benchmarks/gpu/same_figures.py")
REPORT = ROOT / "reports" / "gpt-oss-20b-h200-traced"


_ROWS: dict[bytes, list[str]] = {}  # a trace file's bytes -> same_figures.trace_rows of it


@pytest.fixture(autouse=True)
def trace_rows_once_per_content(monkeypatch):
    """same_figures.trace_rows is a function of the file's bytes: each distinct trace is parsed once
    for the module (the committed report's four, which every comparison reads, and each edited one),
    not once a call."""
    parse = same_figures.trace_rows

    def trace_rows(path):
        data = Path(path).read_bytes()
        if data not in _ROWS:
            _ROWS[data] = parse(path)
        return _ROWS[data]

    monkeypatch.setattr(same_figures, "trace_rows", trace_rows)


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(REPORT, dst)
    return dst


def _edit_rows(path: Path, column: str, change) -> None:
    with open(path / "buckets.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    rows[3][column] = change(rows[3][column])
    with open(path / "buckets.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_a_copy_is_the_same_and_wall_times_or_device_addresses_do_not_count(copy, capsys):
    _edit_rows(copy, "warmup_ms", lambda v: "1.0")
    trace = copy / "traces-floor.csv.gz"
    lines = gzip.decompress(trace.read_bytes()).decode().splitlines(keepends=True)
    # another process's addresses
    lines = [
        ln
        if ln.startswith("#") or not ln.rstrip("\n").split(",")[-1]
        else ln.rsplit(",", 1)[0] + ",12345\n"
        for ln in lines
    ]
    trace.write_bytes(gzip.compress("".join(lines).encode()))
    assert same_figures.main(REPORT, copy) == 0
    assert "0 differing" in capsys.readouterr().out


def test_a_changed_peak_or_trace_row_is_named(copy, capsys):
    _edit_rows(copy, "device_peak_delta_bytes", lambda v: str(int(v) + 2097152))
    assert same_figures.main(REPORT, copy) == 1
    assert "device_peak_delta_bytes: 1 of 223 rows differ" in capsys.readouterr().out
    shutil.copy(REPORT / "buckets.csv", copy / "buckets.csv")
    trace = copy / "traces-shared.csv.gz"
    lines = gzip.decompress(trace.read_bytes()).decode().splitlines(keepends=True)
    lines.pop(5)
    trace.write_bytes(gzip.compress("".join(lines).encode()))
    assert same_figures.main(REPORT, copy) == 1
    assert "traces-shared.csv.gz: DIFFERENT" in capsys.readouterr().out


def test_same_size_segments_released_in_another_order_are_the_same(copy, capsys):
    """One empty_cache releases segments in address order; another process's addresses may swap
    two."""
    trace = copy / "traces-shared.csv.gz"
    lines = gzip.decompress(trace.read_bytes()).decode().splitlines(keepends=True)
    i = next(
        n
        for n, ln in enumerate(lines)
        if ",segment_free," in ln and ",segment_free," in lines[n + 1]
    )
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    trace.write_bytes(gzip.compress("".join(lines).encode()))
    assert same_figures.main(REPORT, copy) == 0
    j = next(n for n, ln in enumerate(lines) if ",alloc," in ln and ",alloc," in lines[n + 1])
    lines[j], lines[j + 1] = lines[j + 1], lines[j]  # two allocations swapped: a different history
    trace.write_bytes(gzip.compress("".join(lines).encode()))
    assert same_figures.main(REPORT, copy) == 1
    assert "traces-shared.csv.gz: DIFFERENT" in capsys.readouterr().out
