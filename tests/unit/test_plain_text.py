"""The plain-text tables (output that is not a terminal) against the rich ones: the same columns,
headers, values and notes; aligned, wrapped within the width, never cut; and a run into a pipe
that loads no rich console."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bcgprof.cli import app
from bcgprof.render import PlainConsole, render_table, show_report
from bcgprof.render.as_text import cell_len, view_lines, wrap
from bcgprof.render.model import Column, Line, Sheet, View
from bcgprof.render.views import show_view
from bcgprof.report import read_report

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "reports" / "gpt-oss-20b-h200"
UNFUSED = ROOT / "reports" / "gpt-oss-20b-h200-unfused"
RERUN = ROOT / "reports" / "gpt-oss-20b-h200-unfused-rerun"
runner = CliRunner()

_RULE = re.compile(r"-+(?:  -+)*")


def _fits(text: str, spans: list[tuple[int, int]]) -> bool:
    """A line of the table these column spans make: nothing between two columns, nothing after the last."""
    return (bool(text.strip()) and len(text) <= spans[-1][1]
            and all(not text[a:b].strip() for (_, a), (b, _) in itertools.pairwise(spans)))


def plain_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each plain table in ``text``: its header lines and its rows, split into cells at the columns
    that the dashes under the header mark (a wrapped row is one list of cells per line)."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if not _RULE.fullmatch(line):
            continue
        spans = [m.span() for m in re.finditer(r"-+", line)]
        head = []
        for above in reversed(lines[:i]):
            if not _fits(above, spans):
                break
            head.insert(0, above)
        rows = []
        for below in lines[i + 1:]:
            if not _fits(below, spans) or _RULE.fullmatch(below):
                break
            rows.append([below[a:b].strip() for a, b in spans])
        tables.append((head, rows))
    return tables


def plain_rows(text: str) -> list[list[str]]:
    return [row for _, rows in plain_tables(text) for row in rows]


def plain_header(text: str) -> str:
    return " ".join(line for head, _ in plain_tables(text) for line in head)


def rich_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


def drawn(view: View, width: int, *, plain: bool, wide: bool = False) -> str:
    out = io.StringIO()
    console = PlainConsole(out, width) if plain else Console(file=out, width=width, color_system=None,
                                                              highlight=False, soft_wrap=False)
    render_table(view, console, wide=wide)
    return out.getvalue()


# ---------------------------------------------------------------- the same tables as rich draws

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
    assert [len(rows[0]) for _, rows in tables if rows] == [len(s.columns) for s in view.sheets if s.rows]
    for text in [s.title for s in view.sheets] + [n for s in view.sheets for n in s.notes] + [
            line.text for line in view.head + view.foot]:
        assert " ".join(text.split()) in " ".join(plain.split())


@pytest.mark.parametrize("width", [80, 100, 120, 220])
def test_the_default_columns_fit_the_width_and_no_fewer_than_rich_keeps(width):
    report = read_report(H200)
    plain, rich = drawn(show_view(report, "all"), width, plain=True), drawn(show_view(report, "all"), width, plain=False)
    assert max(len(line) for line in plain.splitlines()) <= width
    assert "…" not in plain
    rich_heads = " ".join(line for line in rich.splitlines() if line.startswith("┃"))
    for word in set(rich_heads.replace("┃", " ").split()):
        assert word in plain_header(plain), word  # every column rich keeps at this width, the plain table keeps
    kept = {r[1] for r in plain_rows(plain) if len(r) > 1}
    assert {str(b.bucket) for b in report.buckets} <= kept


def test_show_at_100_columns_keeps_every_default_column():
    """The plain table is narrower than the boxed one: at 100 columns show leaves nothing out."""
    text = drawn(show_view(read_report(H200), "all"), 100, plain=True)
    assert "left out" not in text
    head = plain_header(text)
    for header in ("#", "bucket", "status", "pool", "pool Δ", "device-used Δ", "non-torch Δ", "retained", "output",
                   "peak transient", "mode", "buckets ok", "device used", "saved vs", "per-bucket", "saved %",
                   "× floor"):
        assert header in head, header


# ---------------------------------------------------------------- alignment and wrapping

def _sheet() -> Sheet:
    columns = [Column("name", "name", numeric=False, key_column=True), Column("n", "count of things"),
               Column("why", "why it is so", numeric=False)]
    rows = [{"name": "a", "n": 5, "why": "short"},
            {"name": "longer name", "n": 12345, "why": "a reason long enough to wrap at a narrow width, " * 3}]
    return Sheet("s", "a title that is long enough to wrap somewhere " * 3, columns, rows, ["a note " * 20])


def test_numbers_right_text_left_two_spaces_apart():
    text = drawn(View(sheets=[_sheet()]), 200, plain=True)
    lines = text.splitlines()
    rule = next(line for line in lines if _RULE.fullmatch(line))
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    assert [b - a for a, b in spans][:2] == [len("longer name"), len("count of things")]
    assert all(b2 - a1 == 2 for (_, a1), (b2, _) in itertools.pairwise(spans))
    row = lines[lines.index(rule) + 1]
    assert row[spans[0][0]:spans[0][1]] == "a".ljust(spans[0][1] - spans[0][0])
    assert row[spans[1][0]:spans[1][1]] == "5".rjust(spans[1][1] - spans[1][0])
    assert all(line == line.rstrip() for line in lines)


def test_wraps_text_cells_headers_titles_and_notes_at_100_columns():
    text = drawn(View(sheets=[_sheet()]), 40, plain=True)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 40
    (head, rows), = plain_tables(text)
    assert len(head) >= 2 and len(rows) > 2  # the header and the long reason wrapped, in their columns
    assert " ".join(r[2] for r in rows[1:] if r[2]).split() == ("a reason long enough to wrap at a narrow width, "
                                                               * 3).split()
    assert " ".join(" ".join(lines).split()).count("a note") == 20
    view = show_view(read_report(H200), "all")
    at100 = drawn(view, 100, plain=True)
    assert max(len(line) for line in at100.splitlines()) <= 100
    flat = " ".join(at100.split())
    for line in view.head + view.foot:
        assert " ".join(line.text.split()) in flat  # prose wrapped at spaces, nothing lost


def test_a_table_too_wide_for_its_key_columns_is_drawn_whole():
    columns = [Column(f"k{i}", f"key{i}", key_column=True) for i in range(6)]
    sheet = Sheet("s", "", columns, [{c.key: 10 ** 12 for c in columns}])
    text = drawn(View(sheets=[sheet]), 30, plain=True)
    (_, rows), = plain_tables(text)
    assert rows == [[str(10 ** 12)] * 6]


def test_wrap_and_cell_len():
    assert wrap("abc def ghi", 7) == ["abc def", "ghi"]
    assert wrap("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert wrap("", 5) == [""]
    assert cell_len("pool Δ") == 6 and cell_len("漢字") == 4 and cell_len("e\u0301") == 1
    assert all(cell_len(line) <= 5 for line in wrap("漢字漢字漢字 ab", 5))


def test_no_columns_no_rows_and_empty_views():
    assert view_lines(View(), 80) == []
    empty = Sheet("s", "nothing here", [Column("a", "a")], [])
    assert drawn(View(sheets=[empty]), 80, plain=True) == "nothing here\na\n-\n"
    no_columns = View(sheets=[Sheet("s", "nothing here", [], [])], foot=[Line("x")])
    assert drawn(no_columns, 80, plain=True) == "nothing here\n\nx\n"


# ---------------------------------------------------------------- the CLI: a pipe, a terminal

def test_the_cli_draws_plain_tables_into_a_pipe_and_rich_ones_on_a_terminal():
    plain = runner.invoke(app, ["show", str(H200), "--section", "summary"])
    assert plain.exit_code == 0 and "┃" not in plain.stdout and plain_rows(plain.stdout)
    for env in ({"TTY_COMPATIBLE": "1", "NO_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": "1"}):
        boxed = runner.invoke(app, ["show", str(H200), "--section", "summary"], env=env)
        assert boxed.exit_code == 0 and "┃" in boxed.stdout, env
        assert [r[0] for r in rich_rows(boxed.stdout)] == [r[0] for r in plain_rows(plain.stdout)]
    assert "┃" not in runner.invoke(app, ["show", str(H200)], env={"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}).stdout


def test_other_formats_are_the_same_into_a_pipe_and_on_a_terminal():
    for fmt in ("json", "csv", "markdown"):
        piped = runner.invoke(app, ["show", str(H200), "-f", fmt]).stdout
        terminal = runner.invoke(app, ["show", str(H200), "-f", fmt], env={"TTY_COMPATIBLE": "1"}).stdout
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


@pytest.mark.parametrize("args", [["show", str(H200)], ["gate", "--baseline", str(UNFUSED), "--current", str(RERUN)]],
                         ids=["show", "gate"])
def test_a_read_command_into_a_pipe_loads_no_rich_console(args, tmp_path):
    done = subprocess.run([sys.executable, "-c", _LOADED, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    head, _, tail = done.stderr.rpartition("\nLOADED ")
    loaded = json.loads(tail)
    assert "bcgprof.render.as_text" in loaded, head[-2000:]
    assert not {"rich.console", "rich.text", "rich.table", "bcgprof.render.as_table"} & set(loaded)
    assert plain_rows(done.stdout)


def test_show_report_on_a_plain_console_is_what_the_cli_prints():
    out = io.StringIO()
    show_report(read_report(H200), PlainConsole(out, 220))
    assert out.getvalue() == runner.invoke(app, ["show", str(H200)]).stdout
