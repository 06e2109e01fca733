"""The plain-text tables (output that is not a terminal) on hand-made sheets: aligned, wrapped
within the width, never cut (the committed reports' tables against the rich ones, and a run into a
pipe that loads no rich console: tests/regression/test_plain_text.py)."""

from __future__ import annotations

import io
import itertools
import re

from rich.console import Console
from typer.testing import CliRunner

from bcgprof.render import PlainConsole, render_table
from bcgprof.render.as_text import cell_len, view_lines, wrap
from bcgprof.render.model import Column, Line, Sheet, View

runner = CliRunner()

_RULE = re.compile(r"-+(?:  -+)*")


def _fits(text: str, spans: list[tuple[int, int]]) -> bool:
    """A line of the table these column spans make: nothing between two columns, nothing after
    the last."""
    return (
        bool(text.strip())
        and len(text) <= spans[-1][1]
        and all(not text[a:b].strip() for (_, a), (b, _) in itertools.pairwise(spans))
    )


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
        for below in lines[i + 1 :]:
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
    return [
        [c.strip() for c in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def drawn(view: View, width: int, *, plain: bool, wide: bool = False) -> str:
    out = io.StringIO()
    console = (
        PlainConsole(out, width)
        if plain
        else Console(file=out, width=width, color_system=None, highlight=False, soft_wrap=False)
    )
    render_table(view, console, wide=wide)
    return out.getvalue()


# ---------------------------------------------------------------- the same tables as rich draws


# ---------------------------------------------------------------- alignment and wrapping


def _sheet() -> Sheet:
    columns = [
        Column("name", "name", numeric=False, key_column=True),
        Column("n", "count of things"),
        Column("why", "why it is so", numeric=False),
    ]
    rows = [
        {"name": "a", "n": 5, "why": "short"},
        {
            "name": "longer name",
            "n": 12345,
            "why": "a reason long enough to wrap at a narrow width, " * 3,
        },
    ]
    return Sheet(
        "s", "a title that is long enough to wrap somewhere " * 3, columns, rows, ["a note " * 20]
    )


def test_numbers_right_text_left_two_spaces_apart():
    text = drawn(View(sheets=[_sheet()]), 200, plain=True)
    lines = text.splitlines()
    rule = next(line for line in lines if _RULE.fullmatch(line))
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    assert [b - a for a, b in spans][:2] == [len("longer name"), len("count of things")]
    assert all(b2 - a1 == 2 for (_, a1), (b2, _) in itertools.pairwise(spans))
    row = lines[lines.index(rule) + 1]
    assert row[spans[0][0] : spans[0][1]] == "a".ljust(spans[0][1] - spans[0][0])
    assert row[spans[1][0] : spans[1][1]] == "5".rjust(spans[1][1] - spans[1][0])
    assert all(line == line.rstrip() for line in lines)


def test_wraps_text_cells_headers_titles_and_notes_at_100_columns():
    text = drawn(View(sheets=[_sheet()]), 40, plain=True)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 40
    ((head, rows),) = plain_tables(text)
    # the header and the long reason wrapped, in their columns
    assert len(head) >= 2 and len(rows) > 2
    assert (
        " ".join(r[2] for r in rows[1:] if r[2]).split()
        == ("a reason long enough to wrap at a narrow width, " * 3).split()
    )
    assert " ".join(" ".join(lines).split()).count("a note") == 20


def test_a_table_too_wide_for_its_key_columns_is_drawn_whole():
    columns = [Column(f"k{i}", f"key{i}", key_column=True) for i in range(6)]
    sheet = Sheet("s", "", columns, [{c.key: 10**12 for c in columns}])
    text = drawn(View(sheets=[sheet]), 30, plain=True)
    ((_, rows),) = plain_tables(text)
    assert rows == [[str(10**12)] * 6]


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
