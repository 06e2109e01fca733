"""Views as plain text, for output that is not a terminal (a pipe, a file), without rich.

The same head lines, tables, notes, foot lines and headline as the terminal's rich tables
(:mod:`~bcgprof.render.as_table`), from the same column choice and widths
(:mod:`~bcgprof.render.layout`), drawn as aligned columns two spaces apart: a header
(wrapped at spaces, on its bottom lines), a rule of dashes, one line per row (a text cell
wider than its column wraps at spaces). Numbers are right-aligned, text left-aligned; no
box characters, no colour or other escape sequences, no trailing spaces. Prose lines wrap
at spaces at the output's width; a table wider than it (its key columns alone, or
``wide``) is drawn whole, never cut.
"""

from __future__ import annotations

from typing import IO

from bcgprof.render.layout import MORE_ROWS_NOTE, cell_texts, first_rows, fit_widths, row_limit
from bcgprof.render.model import Column, Line, Sheet, View

GAP = "  "  # between two columns


class PlainConsole:
    """Where plain text goes: a file and the width lines are fitted to.

    It stands in for a rich console on the paths that draw a view (``render``, ``render_table``),
    and prints an object as its plain text (a rich ``Text`` as its ``plain`` characters)."""

    def __init__(self, file: IO[str], width: int):
        self.file = file
        self.width = width

    def write_lines(self, lines: list[str]) -> None:
        if lines:
            self.file.write("\n".join(lines) + "\n")

    def print(self, *objects: object, sep: str = " ", end: str = "\n", **_: object) -> None:
        """Print objects as plain text, unwrapped (rich's styles and markup options are ignored)."""
        self.file.write(sep.join(str(getattr(o, "plain", o)) for o in objects) + end)


def cell_len(text: str) -> int:
    """Terminal cells ``text`` takes: two for East Asian wide characters, none for combining
    marks."""
    if text.isascii():
        return len(text)
    import unicodedata

    n = 0
    for ch in text:
        if ch.isascii():
            n += 1
        elif unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        else:
            n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def _cut(word: str, width: int) -> tuple[str, str]:
    """The longest head of ``word`` at most ``width`` cells wide (at least one character), and
    the rest."""
    if word.isascii():
        return word[:width], word[width:]
    n = 0
    for i, ch in enumerate(word):
        n += cell_len(ch)
        if n > width and i > 0:
            return word[:i], word[i:]
    return word, ""


def wrap(text: str, width: int) -> list[str]:
    """``text`` as lines at most ``width`` cells wide, broken at spaces; a longer word is folded."""
    width = max(width, 1)
    if cell_len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for word in text.split():
        while cell_len(word) > width:
            if line:
                lines.append(line)
                line = ""
            head, word = _cut(word, width)
            lines.append(head)
        if not word:
            continue
        if not line:
            line = word
        elif cell_len(line) + 1 + cell_len(word) <= width:
            line += " " + word
        else:
            lines.append(line)
            line = word
    if line or not lines:
        lines.append(line)
    return lines


def table_width(widths: list[int]) -> int:
    """Characters a plain table takes for these column widths."""
    return sum(widths) + len(GAP) * max(len(widths) - 1, 0)


def fit_columns(
    sheet: Sheet,
    columns: list[Column],
    limit: int,
    *,
    drop: bool = True,
    cells: dict[int, list[str]] | None = None,
):
    """(columns kept, their widths, columns left out) for a plain table at most ``limit``
    characters wide."""
    return fit_widths(
        sheet, columns, limit, table_width=table_width, cell_len=cell_len, drop=drop, cells=cells
    )


def _pad(text: str, width: int, right: bool) -> str:
    pad = " " * (width - cell_len(text))
    return pad + text if right else text + pad


def _cell(text: str, width: int) -> list[str]:
    return (
        [text]
        if "\n" not in text and cell_len(text) <= width
        else wrap(" ".join(text.split()), width)
    )


def draw_table(
    sheet: Sheet,
    columns: list[Column],
    widths: list[int],
    cells: dict[int, list[str]] | None = None,
) -> list[str]:
    """The table's lines: header, rule, rows (no title, no notes). ``cells``:
    :func:`~bcgprof.render.layout.cell_texts`."""
    if cells is None:
        cells = cell_texts(sheet, columns)
    lines: list[str] = []

    def row(parts: list[list[str]], bottom: bool) -> None:
        height = max(len(c) for c in parts)
        for i in range(height):
            out = []
            for cell, column, w in zip(parts, columns, widths):
                at = i - (height - len(cell)) if bottom else i  # headers sit on their bottom lines
                out.append(_pad(cell[at], w, column.numeric) if 0 <= at < len(cell) else " " * w)
            lines.append(GAP.join(out).rstrip())

    row([_cell(c.header, w) for c, w in zip(columns, widths)], True)
    lines.append(GAP.join("-" * w for w in widths))
    right = [c.numeric for c in columns]
    for texts in zip(*(cells[id(c)] for c in columns)):
        if all(t.isascii() and "\n" not in t and len(t) <= w for t, w in zip(texts, widths)):
            # The common case, a row of one line: no wrapping, no cell measuring beyond len().
            lines.append(
                GAP.join(
                    t.rjust(w) if r else t.ljust(w) for t, r, w in zip(texts, right, widths)
                ).rstrip()
            )
        else:
            row([_cell(t, w) for t, w in zip(texts, widths)], False)
    return lines


def line_text(line: Line) -> str:
    return line.lead + line.text


def _prose(text: str, width: int, indent: str = "") -> list[str]:
    """A paragraph wrapped at ``width``, each line after ``indent``."""
    return [(indent + part).rstrip() for part in wrap(text, width - len(indent))]


def _line(line: Line, width: int) -> list[str]:
    return [line_text(line)] if line.whole else _prose(line_text(line), width)


def sheet_lines(
    sheet: Sheet, limit: int, *, wide: bool = False, hint: str = "", max_rows: int | None = None
) -> tuple[list[str], bool]:
    """One sheet's lines: its title, table and notes; and whether a note said which columns were
    left out."""
    sheet, left_out = first_rows(sheet, max_rows)
    columns = [c for c in sheet.columns if wide or not c.wide]
    cells = cell_texts(sheet, columns)
    kept, widths, hidden = fit_columns(sheet, columns, limit, drop=not wide, cells=cells)
    lines = _prose(sheet.title, limit) if sheet.title else []
    if kept:
        lines += draw_table(sheet, kept, widths, cells)
    if hidden:
        names = ", ".join(c.header for c in hidden)
        lines += _prose(
            f"left out at {limit} columns: {names}" + (f"; {hint}" if hint else ""), limit, "  "
        )
    if left_out:
        lines += _prose(MORE_ROWS_NOTE.format(left_out), limit, "  ")
    for note in sheet.notes:
        lines += _prose(note, limit, "  ")
    return lines, bool(hidden)


def view_lines(view: View, width: int, *, wide: bool = False) -> list[str]:
    """A view as plain lines: head lines, each table (a blank line before it), then the hint, foot
    lines and headline (a blank line before them)."""
    lines: list[str] = []
    for line in view.head:
        lines += _line(line, width)
    told = False
    limit = row_limit(view.sheets)
    for sheet in view.sheets:
        drawn, said = sheet_lines(sheet, width, wide=wide, hint=view.hint, max_rows=limit)
        told = told or said
        if lines:
            lines.append("")
        lines += drawn
    tail: list[str] = []
    if not told and not wide and any(c.wide for s in view.sheets for c in s.columns) and view.hint:
        tail += _prose(view.hint, width)
    for line in view.foot:
        tail += _line(line, width)
    if view.headline is not None:
        tail += _line(view.headline, width)
    if tail and view.sheets and lines:
        lines.append("")
    return lines + tail


def render_text(view: View, console: PlainConsole, *, wide: bool = False) -> None:
    """Draw a view as plain text on ``console``."""
    console.write_lines(view_lines(view, console.width, wide=wide))
