"""The plain-text tables of the committed reports (reports/gpt-oss-20b-h200: 74 buckets, every
column wide) against the rich ones: the same columns, headers, values and notes; within the width;
the same from the CLI; and a run into a pipe that loads no rich console. On hand-made sheets:
tests/unit/test_plain_text.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bcgprof.cli import app
from bcgprof.render import PlainConsole, show_report
from bcgprof.render.views import show_view
from bcgprof.report import read_report

from unit.test_plain_text import drawn, plain_header, plain_rows, plain_tables, rich_rows, runner

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "gpt-oss-20b-h200"
UNFUSED = ROOT / "reports" / "gpt-oss-20b-h200-unfused"
RERUN = ROOT / "reports" / "gpt-oss-20b-h200-unfused-rerun"


@pytest.mark.parametrize("section", ["all", "summary", "buckets"])
def test_every_column_header_value_and_note_of_the_rich_table(section):
    """Drawn wide enough that neither wraps: cell for cell the rich table's rows, every column."""
    view = show_view(read_report(H200), section)
    plain = drawn(view, 1000, plain=True, wide=True)
    rich = drawn(view, 1000, plain=False, wide=True)
    assert plain_rows(plain) == rich_rows(rich)
    assert "│" not in plain and "━" not in plain and "\x1b" not in plain
    columns = [c for s in view.sheets for c in s.columns]
    head = plain_header(plain)
    assert all(c.header in head for c in columns)
    tables = plain_tables(plain)
    assert [len(rows) for _, rows in tables] == [len(s.rows) for s in view.sheets]
    assert [len(rows[0]) for _, rows in tables if rows] == [
        len(s.columns) for s in view.sheets if s.rows
    ]
    for text in (
        [s.title for s in view.sheets]
        + [n for s in view.sheets for n in s.notes]
        + [line.text for line in view.head + view.foot]
    ):
        assert " ".join(text.split()) in " ".join(plain.split())


@pytest.mark.parametrize("width", [80, 100, 120, 220])
def test_the_default_columns_fit_the_width_and_no_fewer_than_rich_keeps(width):
    report = read_report(H200)
    plain, rich = (
        drawn(show_view(report, "all"), width, plain=True),
        drawn(show_view(report, "all"), width, plain=False),
    )
    assert max(len(line) for line in plain.splitlines()) <= width
    assert "…" not in plain
    rich_heads = " ".join(line for line in rich.splitlines() if line.startswith("┃"))
    for word in set(rich_heads.replace("┃", " ").split()):
        # every column rich keeps at this width, the plain table keeps
        assert word in plain_header(plain), word
    kept = {r[1] for r in plain_rows(plain) if len(r) > 1}
    assert {str(b.bucket) for b in report.buckets} <= kept


def test_show_at_100_columns_keeps_every_default_column():
    """The plain table is narrower than the boxed one: at 100 columns show leaves nothing out."""
    text = drawn(show_view(read_report(H200), "all"), 100, plain=True)
    assert "left out" not in text
    head = plain_header(text)
    for header in (
        "#",
        "bucket",
        "status",
        "pool",
        "pool Δ",
        "device-used Δ",
        "non-torch Δ",
        "retained",
        "output",
        "peak transient",
        "mode",
        "buckets ok",
        "device used",
        "saved vs",
        "per-bucket",
        "saved %",
        "× floor",
    ):
        assert header in head, header


def test_the_cli_draws_plain_tables_into_a_pipe_and_rich_ones_on_a_terminal():
    plain = runner.invoke(app, ["show", str(H200), "--section", "summary"])
    assert plain.exit_code == 0 and "┃" not in plain.stdout and plain_rows(plain.stdout)
    for env in ({"TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": "1"}):
        boxed = runner.invoke(app, ["show", str(H200), "--section", "summary"], env=env)
        assert boxed.exit_code == 0 and "┃" in boxed.stdout, env
        assert [r[0] for r in rich_rows(boxed.stdout)] == [r[0] for r in plain_rows(plain.stdout)]
    assert (
        "┃"
        not in runner.invoke(
            app, ["show", str(H200)], env={"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}
        ).stdout
    )


def test_other_formats_are_the_same_into_a_pipe_and_on_a_terminal():
    for fmt in ("json", "csv", "markdown"):
        piped = runner.invoke(app, ["show", str(H200), "-f", fmt]).stdout
        terminal = runner.invoke(
            app, ["show", str(H200), "-f", fmt], env={"TTY_COMPATIBLE": "1"}
        ).stdout
        assert piped == terminal, fmt


_LOADED = r"""
import json, sys
from bcgprof.cli import main
sys.argv = ["bcgprof", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print("\nLOADED " + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args",
    [["show", str(H200)], ["gate", "--baseline", str(UNFUSED), "--current", str(RERUN)]],
    ids=["show", "gate"],
)
def test_a_read_command_into_a_pipe_loads_no_rich_console(args, tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    head, _, tail = done.stderr.rpartition("\nLOADED ")
    loaded = json.loads(tail)
    assert "bcgprof.render.as_text" in loaded, head[-2000:]
    assert not {"rich.console", "rich.text", "rich.table", "bcgprof.render.as_table"} & set(loaded)
    assert plain_rows(done.stdout)


def test_show_report_on_a_plain_console_is_what_the_cli_prints():
    out = io.StringIO()
    show_report(read_report(H200), PlainConsole(out, 220))
    # the CLI's width into a pipe is COLUMNS when set (a pytest-xdist worker sets it), else 220
    assert out.getvalue() == runner.invoke(app, ["show", str(H200)], env={"COLUMNS": "220"}).stdout


def test_the_committed_reports_prose_wraps_at_spaces_at_100_columns():
    view = show_view(read_report(H200), "all")
    at100 = drawn(view, 100, plain=True)
    assert max(len(line) for line in at100.splitlines()) <= 100
    flat = " ".join(at100.split())
    for line in view.head + view.foot:
        assert " ".join(line.text.split()) in flat  # prose wrapped at spaces, nothing lost
