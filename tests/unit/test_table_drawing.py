"""The table drawer against what it reproduces: rich's own Table, cell for cell, on random
sheets."""

from __future__ import annotations

import io
import random
import re

import pytest
from rich.console import Console

from bcgprof.render import as_table
from bcgprof.render.model import Column, Sheet, View

WORDS = [
    "per-bucket",
    "a",
    "pool",
    "MiB",
    "16384",
    "x" * 23,
    "graph executables",
    "ok",
    "—",
    "naïve",
    "",
]


def _random_sheet(rng: random.Random) -> Sheet:
    columns = [
        Column(
            f"c{i}",
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) or "h",
            numeric=rng.random() < 0.5,
            key_column=rng.random() < 0.3,
            drop=rng.randint(1, 3),
        )
        for i in range(rng.randint(1, 7))
    ]
    rows = []
    for _ in range(rng.randint(0, 12)):
        row: dict = {
            c.key: " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 5))) for c in columns
        }
        if rng.random() < 0.3:
            row["_style"] = rng.choice(["bold red", "yellow", "green"])
        rows.append(row)
    title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
    return Sheet("s", title, columns, rows, notes=["a note"] if rng.random() < 0.2 else [])


def _drawn(view: View, width: int, color: str | None, *, rich_table: bool, monkeypatch) -> str:
    if rich_table:
        monkeypatch.setattr(
            as_table,
            "_print_drawn",
            lambda console, sheet, cols, widths: console.print(
                as_table.sheet_table(sheet, cols, widths)
            ),
        )
    else:
        monkeypatch.undo()
    console = Console(
        file=io.StringIO(),
        width=width,
        color_system=color,
        force_terminal=color is not None,
        legacy_windows=False,
    )
    as_table.render_table(view, console)
    return console.file.getvalue()


@pytest.mark.parametrize("seed", range(40))
def test_a_drawn_table_is_the_rich_table_character_for_character(seed, monkeypatch):
    rng = random.Random(seed)
    view = View(sheets=[_random_sheet(rng) for _ in range(rng.randint(1, 3))])
    for width in (30, 57, 100):
        mine = _drawn(view, width, None, rich_table=False, monkeypatch=monkeypatch)
        theirs = _drawn(view, width, None, rich_table=True, monkeypatch=monkeypatch)
        assert mine == theirs, (seed, width)
        # With colour the same characters come out; only the escape codes around them may sit
        # differently.
        plain = (
            re.sub(
                r"\x1b\[[0-9;]*m",
                "",
                _drawn(view, width, "truecolor", rich_table=flag, monkeypatch=monkeypatch),
            )
            for flag in (False, True)
        )
        assert len(set(plain)) == 1, (seed, width)


def test_a_row_style_colours_the_cells_and_not_the_rules(monkeypatch):
    sheet = Sheet("s", "", [Column("a", "a", numeric=False)], [{"a": "grew", "_style": "bold red"}])
    out = _drawn(View(sheets=[sheet]), 40, "truecolor", rich_table=False, monkeypatch=monkeypatch)
    line = next(x for x in out.splitlines() if "grew" in x)
    assert re.search(r"\x1b\[[0-9;]*1[;m].*grew", line) and line.startswith("│")
