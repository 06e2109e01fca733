"""How the reading commands' work grows with a report's rows, counted, not timed: on the synthetic
reports of benchmarks/read_scaling.py (every mode, two ranks), twice the buckets must cost at most
GROWTH times the Python and builtin calls of reading, show (table, json, csv), compare and a
per-bucket gate. A pass over pairs of rows (a quadratic check, a lookup by scanning) would quadruple
them. benchmarks/read_scaling.py times the same commands at the reader's caps (98,312 rows)."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from bcgprof.analysis.compare import compare_reports
from bcgprof.analysis.gate import GateOptions, gate_comparison
from bcgprof.render import PlainConsole, show_comparison, show_report
from bcgprof.report import read_report

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "read_scaling.py"
GROWTH = 2.3  # linear work plus sorting: twice the rows, a little over twice the calls
SIZES = (96, 192)
TP = 2


def _benchmark():
    spec = importlib.util.spec_from_file_location("read_scaling_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two copies (baseline, current) of a complete report at each size."""
    bench = _benchmark()
    root = tmp_path_factory.mktemp("read-scaling")
    out = {}
    for n in SIZES:
        pair = root / f"b{n}-a", root / f"b{n}-b"
        for path in pair:
            bench.write(path, list(range(1, n + 1)), TP, False)
        out[n] = pair
    return out


def _calls(work) -> int:
    """Python and builtin calls made while ``work()`` runs."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def _read(paths):
    read_report(paths[0])


def _show(fmt):
    def work(paths):
        show_report(read_report(paths[0]), PlainConsole(io.StringIO(), 100), fmt)

    return work


def _compare(paths):
    cmp = compare_reports(read_report(paths[0]), read_report(paths[1]))
    show_comparison(cmp, PlainConsole(io.StringIO(), 100))


def _gate(paths):
    result = gate_comparison(
        compare_reports(read_report(paths[0]), read_report(paths[1])), GateOptions(each_bucket=True)
    )
    assert result.passed


@pytest.mark.parametrize(
    "name,work",
    [
        ("read_report", _read),
        ("show", _show("table")),
        ("show -f json", _show("json")),
        ("show -f csv", _show("csv")),
        ("compare", _compare),
        ("gate --each-bucket", _gate),
    ],
)
def test_twice_the_rows_at_most_a_little_over_twice_the_calls(reports, name, work):
    work(reports[SIZES[0]])  # modules loaded on first use are not counted
    small, large = (_calls(lambda n=n: work(reports[n])) for n in SIZES)
    rows = [len(read_report(reports[n][0]).buckets) for n in SIZES]
    assert rows[1] >= 2 * rows[0] - TP  # the floor holds one bucket per rank at either size
    assert large <= GROWTH * small, (
        f"{name}: {small} calls for {rows[0]} rows, {large} for {rows[1]}"
    )


def test_a_quadratic_pass_would_be_caught(reports):
    """The counter sees a pass over pairs of rows: the bound above is one such a pass breaks."""

    def quadratic(paths):
        rows = read_report(paths[0]).buckets
        for r in rows:
            any(s.bucket == r.bucket for s in rows)

    small, large = (_calls(lambda n=n: quadratic(reports[n])) for n in SIZES)
    assert large > GROWTH * small
