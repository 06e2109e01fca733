"""Views of hand-made reports rendered at fixed console widths (80, 100, 120, 200 columns): key
columns whole, numbers never cut (the committed reports' views: tests/regression/test_render.py).

Every test that draws runs twice: on a rich console (a terminal's tables) and on a plain one (what
a pipe or a file gets); the CLI's runs through Typer's runner are not a terminal, so they see the
plain."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bcgprof.analysis.compare import compare_reports
from bcgprof.analysis.estimate import estimate_output_buffers
from bcgprof.analysis.gate import GateOptions, gate_reports
from bcgprof.cli import app
from bcgprof.render import (
    PlainConsole,
    print_capture_result,
    print_estimate,
    print_gate,
    render_markdown,
    show_comparison,
    show_report,
)
from bcgprof.render.views import show_view
from bcgprof.report import read_report
from bcgprof.report_format import fmt_bytes, fmt_pct, fmt_ratio
from bcgprof.spec import resolve_model

from .test_plain_text import plain_header, plain_rows

DATA = Path(__file__).resolve().parents[1] / "data"
WIDTHS = (80, 100, 120, 200)
runner = CliRunner()
DRAWN_ON = {"console": "rich"}  # which console draw() uses: set for each test by the fixture below


@pytest.fixture(autouse=True, params=["rich", "plain"])
def console_kind(request):
    DRAWN_ON["console"] = request.param
    yield request.param
    DRAWN_ON["console"] = "rich"


def draw(fn, *args, width: int, **kwargs) -> str:
    out = io.StringIO()
    if DRAWN_ON["console"] == "plain":
        fn(*args, PlainConsole(out, width), **kwargs)
    else:
        fn(
            *args,
            Console(width=width, file=out, color_system=None, highlight=False, soft_wrap=False),
            **kwargs,
        )
    return out.getvalue()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")[1:-1]]


def table_rows(text: str) -> list[list[str]]:
    if "│" not in text:
        return plain_rows(text)
    return [cells(line) for line in text.splitlines() if line.startswith("│")]


def assert_fits(text: str, width: int) -> None:
    assert "…" not in text
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, too_long[:3]


def assert_row(rows: list[list[str]], *values: str) -> None:
    """Some table row holds ``values`` whole, in this order (other cells may sit between them)."""
    for row in rows:
        it = iter(row)
        if all(any(cell == v for cell in it) for v in values):
            return
    raise AssertionError(f"no row with {values}; rows: {rows[:5]}")


def header_words(text: str, *headers: str) -> None:
    head = (
        " ".join(line for line in text.splitlines() if line.startswith("┃"))
        if "┃" in text
        else plain_header(text)
    )
    for header in headers:
        for word in header.split():
            assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", head), (header, word)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_mode_bucket_and_changes_whole(width, data_dir):
    cmp = compare_reports(read_report(data_dir / "baseline"), read_report(data_dir / "grown"))
    text = draw(show_comparison, cmp, width=width)
    assert_fits(text, width)
    rows = table_rows(text)
    header_words(
        text,
        "mode",
        "bucket",
        "status",
        "pool change",
        "device-used change",
        "metric",
        "old",
        "new",
    )
    for c in cmp.buckets:
        pool, dev = c.changes["pool_delta_bytes"].delta, c.changes["device_used_delta_bytes"].delta
        assert_row(
            rows,
            c.mode,
            str(c.bucket),
            c.new.status,
            fmt_bytes(pool, signed=True),
            fmt_bytes(dev, signed=True),
        )
    assert_row(rows, "per-bucket", "1024", "ok", "+40.00 MiB", "+40.00 MiB")  # which bucket grew


@pytest.mark.parametrize("width", WIDTHS)
def test_partial_and_tensor_parallel_reports(width, data_dir, write_report, rows):
    text = draw(show_report, read_report(data_dir / "partial"), width=width)
    assert_fits(text, width)
    assert "summary recomputed from buckets.csv" in text
    tp = []
    for rank in (0, 1):
        grouped = rows()
        for r in grouped.all():
            r.rank = rank
        tp += grouped.all()
    tp[3].status, tp[3].detail = "oom", "CUDA out of memory"
    report = read_report(write_report("tp", tp, tp=2))
    text = draw(show_report, report, width=width)
    assert_fits(text, width)
    table = table_rows(text)
    for s in report.summary:
        assert_row(table, s.mode, s.rank, fmt_bytes(s.pool_bytes), fmt_bytes(s.device_used_bytes))


@pytest.mark.parametrize("width", WIDTHS)
def test_gate_tables_keep_where_metric_change_and_verdict(width, data_dir):
    result = gate_reports(
        read_report(data_dir / "baseline"),
        read_report(data_dir / "grown"),
        GateOptions(each_bucket=True),
    )
    text = draw(print_gate, result, width=width)
    assert_fits(text, width)
    rows = table_rows(text)
    for c in result.checks:
        if c.bucket is None or c.verdict != "pass":
            assert_row(rows, c.where, c.metric, fmt_bytes(c.delta, signed=True), c.verdict)


@pytest.mark.parametrize("width", WIDTHS)
def test_estimate_and_capture_result(width, data_dir):
    est = estimate_output_buffers(resolve_model("gpt-oss-20b"), [4, 16384])
    text = draw(print_estimate, est, width=width)
    assert_fits(text, width)
    assert_row(table_rows(text), "16384", fmt_bytes(94371840))
    text = draw(print_capture_result, read_report(data_dir / "partial"), width=width)
    assert_fits(text, width)
    flat = " ".join(text.split())
    assert "this report is interrupted" in flat
    assert "the shared buffer saves 30.00 MiB" in flat
    assert flat.endswith(f"report: {data_dir / 'partial'}")


def test_wide_shows_every_column_and_never_cuts(data_dir):
    report = read_report(data_dir / "baseline")
    text = draw(show_report, report, width=80, wide=True)
    assert "…" not in text and "left out" not in text
    header_words(
        text,
        "segments",
        "graph nodes",
        "torch reserved Δ",
        "warm-up",
        "capture",
        "replay diff",
        "free after",
        "warm-up + capture",
        "non-torch",
        "peak transient",
    )
    assert max(len(line) for line in text.splitlines()) > 80  # drawn whole, wider than the console
    narrow = draw(show_report, report, width=120)
    assert "replay diff" not in narrow and "--wide shows every column" in narrow


# ---------------------------------------------------------------- what the views say


def test_floor_row_is_the_reference_not_an_option(data_dir):
    report = read_report(data_dir / "baseline")
    floor = next(s for s in report.summary if s.mode == "floor")
    assert floor.saved_vs_per_bucket_bytes is not None  # summary.csv keeps the figure ...
    rows = table_rows(draw(show_report, report, width=200, section="summary"))
    (row,) = [r for r in rows if r[0] == "floor"]
    assert (
        fmt_bytes(floor.saved_vs_per_bucket_bytes) not in row
        and fmt_pct(floor.saved_vs_per_bucket_pct) not in row
    )
    assert fmt_ratio(floor.ratio_to_floor) in row  # ... the views leave it out
    markdown = render_markdown(show_view(report, "summary"))
    floor_line = next(line for line in markdown.splitlines() if line.startswith("| floor |"))
    assert "|  |  |" in floor_line


def test_warm_up_plus_capture_is_named_so(data_dir):
    report = read_report(data_dir / "baseline")
    wide = draw(show_report, report, width=250, wide=True, section="summary")
    header_words(wide, "warm-up + capture")
    assert "capture time" not in wide
    cmp = compare_reports(report, read_report(data_dir / "grown"))
    assert "warm-up + capture" in draw(show_comparison, cmp, width=200)


def test_rank_is_a_string_in_every_json_row(data_dir):
    data = json.loads(runner.invoke(app, ["show", str(data_dir / "baseline"), "-f", "json"]).stdout)
    assert {type(r["rank"]) for r in data["buckets"] + data["summary"]} == {str}
    assert data["summary_source"] == "summary.csv"
    partial = json.loads(
        runner.invoke(app, ["show", str(data_dir / "partial"), "-f", "json"]).stdout
    )
    assert partial["summary_source"] == "recomputed from buckets.csv"
    cmp = json.loads(
        runner.invoke(
            app, ["compare", str(data_dir / "baseline"), str(data_dir / "grown"), "-f", "json"]
        ).stdout
    )
    assert {type(r["rank"]) for r in cmp["buckets"] + cmp["totals"]} == {str}


def test_estimate_does_not_call_the_output_difference_a_saving():
    est = estimate_output_buffers(resolve_model("gpt-oss-20b"), list(range(4, 20, 4)))
    text = " ".join(draw(print_estimate, est, width=100).split())
    assert "difference:" not in text
    assert "This is not the expected saving" in text and "measured by `bcgprof capture`" in text
    data = est.to_json()
    assert "saved_bytes" not in data and data["output_difference_bytes"] == est.saved_bytes
