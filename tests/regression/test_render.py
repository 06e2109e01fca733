"""Views of the committed reports (reports/gpt-oss-20b-h200, -unfused, -unfused-rerun: 74 buckets,
every column wide) rendered at fixed console widths: key columns whole, numbers never cut, the CSV
the files' own. Every test that draws runs twice, on a rich console and on a plain one (the
console_kind fixture). The rendering on hand-made reports: tests/unit/test_render.py."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from bcgprof.analysis.compare import BOTH, compare_reports
from bcgprof.cli import app
from bcgprof.render import show_comparison, show_report
from bcgprof.report import read_report
from bcgprof.report_format import fmt_bytes, fmt_pct, fmt_ratio

from unit.test_render import (  # noqa: F401  (console_kind: the autouse fixture that draws on both consoles)
    WIDTHS,
    assert_fits,
    assert_row,
    console_kind,
    draw,
    header_words,
    runner,
    table_rows,
)

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "gpt-oss-20b-h200"
UNFUSED = ROOT / "reports" / "gpt-oss-20b-h200-unfused"  # the same capture before the fused kernels
RERUN = ROOT / "reports" / "gpt-oss-20b-h200-unfused-rerun"  # ... made again by the reshaped code


@pytest.mark.parametrize("width", WIDTHS)
def test_show_keeps_key_columns_whole_at_every_width(width):
    report = read_report(H200)
    text = draw(show_report, report, width=width)
    assert_fits(text, width)
    rows = table_rows(text)
    header_words(
        text,
        "#",
        "bucket",
        "status",
        "pool",
        "pool Δ",
        "device-used Δ",
        "mode",
        "device used",
        "saved vs per-bucket",
    )
    for r in report.buckets:
        assert_row(
            rows,
            str(r.order),
            str(r.bucket),
            r.status,
            fmt_bytes(r.pool_bytes),
            fmt_bytes(r.pool_delta_bytes, signed=True),
            fmt_bytes(r.device_used_delta_bytes, signed=True),
        )
    summary = {s.mode: s for s in report.summary}
    for s in summary.values():
        assert_row(rows, s.mode, fmt_bytes(s.pool_bytes), fmt_bytes(s.device_used_bytes))
    assert_row(rows, "shared", fmt_bytes(summary["shared"].saved_vs_per_bucket_bytes))
    if width >= 100:
        assert "left out" not in text  # the default columns fit an ordinary terminal
        shared = summary["shared"]
        assert_row(
            rows,
            "shared",
            fmt_bytes(shared.saved_vs_per_bucket_bytes),
            fmt_pct(shared.saved_vs_per_bucket_pct),
            fmt_ratio(shared.ratio_to_floor),
        )
    else:
        assert "left out at 80 columns" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_of_the_committed_reports(width):
    cmp = compare_reports(read_report(UNFUSED), read_report(RERUN))
    text = draw(show_comparison, cmp, width=width)
    assert_fits(text, width)
    rows = table_rows(text)
    assert len([c for c in cmp.buckets if c.presence == BOTH]) == 2 * 74 + 1
    for c in cmp.buckets:
        assert_row(rows, c.mode, str(c.bucket), c.new.status)


def test_cli_tables_follow_columns(data_dir):
    for width in (80, 100):
        result = runner.invoke(app, ["show", str(H200)], env={"COLUMNS": str(width)})
        assert result.exit_code == 0
        assert_fits(result.stdout, width)
    wide = runner.invoke(
        app, ["compare", str(UNFUSED), str(RERUN), "--wide"], env={"COLUMNS": "100"}
    )
    assert wide.exit_code == 0
    header_words(wide.stdout, "pool Δ old", "pool Δ new")


def test_show_csv_is_the_files_own_columns_order_and_values():
    for section, name in (("buckets", "buckets.csv"), ("summary", "summary.csv")):
        result = runner.invoke(app, ["show", str(H200), "-f", "csv", "--section", section])
        assert result.exit_code == 0
        assert result.stdout == (H200 / name).read_text()
    both = runner.invoke(app, ["show", str(H200), "-f", "csv"]).stdout
    assert (
        both
        == "# buckets\n"
        + (H200 / "buckets.csv").read_text()
        + "\n# summary\n"
        + (H200 / "summary.csv").read_text()
    )
    header = next(csv.reader(io.StringIO(both.split("\n", 1)[1])))
    assert header[:4] == ["mode", "bucket", "order", "status"]
