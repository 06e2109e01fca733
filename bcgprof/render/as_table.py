"""Views as rich tables on a terminal, fitted to its width.

Every column gets a width before rich sees it (:mod:`~bcgprof.render.layout`): numbers and
key columns (mode, bucket, status, #, the main byte figures) are never wrapped, shrunk or
cut; text columns wrap at spaces; headers wrap at spaces. When a table does not fit, the
non-key columns with the highest ``drop`` are left out, whole, and a note under the table
names them. Only when the key columns alone do not fit (or with ``wide``) is the table
drawn wider than the console, so that nothing is ever cut. Output that is not a terminal
is drawn without rich, by the same rules, by :mod:`~bcgprof.render.as_text`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:
    from rich.table import Table

from bcgprof.render.layout import MORE_ROWS_NOTE, first_rows, fit_widths, row_limit
from bcgprof.render.model import BAD, GOOD, STRONG, WARNING, Column, Line, Sheet, View

_STYLES = {STRONG: "bold", WARNING: "yellow", BAD: "bold red", GOOD: "bold green"}


def table_width(widths: list[int]) -> int:
    """Characters a rich table (default box, padding 1) takes for these content widths."""
    return sum(widths) + 3 * len(widths) + 1


def fit_columns(sheet: Sheet, columns: list[Column], limit: int, *, drop: bool = True):
    """(columns kept, their widths, columns left out) for a rich table at most ``limit``
    characters wide."""
    return fit_widths(sheet, columns, limit, table_width=table_width, cell_len=cell_len, drop=drop)


def sheet_table(sheet: Sheet, columns: list[Column], widths: list[int]) -> Table:
    """The sheet as a rich ``Table`` (what :func:`draw_sheet` reproduces; drawn as such on
    ASCII-only terminals)."""
    from rich.table import Table

    table = Table(
        title=escape(sheet.title) if sheet.title else None,
        title_justify="left",
        header_style="bold",
    )
    for c, w in zip(columns, widths):
        # Wrapping stays on so that headers wrap at spaces; a number or key cell never wraps because
        # its width is at least its longest cell (fit_columns).
        table.add_column(
            escape(c.header), justify="right" if c.numeric else "left", width=w, overflow="fold"
        )
    for row in sheet.rows:
        style = row.get("_style")
        cells = [escape(sheet.cell(row, c)) for c in columns]
        table.add_row(*[f"[{style}]{text}[/]" if style and text else text for text in cells])
    return table


# rich's default table box (HEAVY_HEAD): heavy lines around the header, light ones around the rows.
_TOP, _HEAD_SEP, _BOTTOM = ("┏", "━", "┳", "┓"), ("┡", "━", "╇", "┩"), ("└", "─", "┴", "┘")
_HEAD_BAR, _ROW_BAR = "┃", "│"


def _rule(parts: tuple[str, str, str, str], widths: list[int]) -> str:
    left, fill, cross, right = parts
    return left + cross.join(fill * (w + 2) for w in widths) + right


Fragment = tuple[str, str]  # text and its rich style ("" for none)


def _cell_lines(
    console: Console, text: str, width: int, right: bool, style: str
) -> list[list[Fragment]]:
    """A cell's lines, each exactly ``width`` cells wide, wrapped as rich wraps (at spaces, long
    words folded)."""
    if "\n" not in text and cell_len(text) <= width:
        if right:
            text = text.rstrip()  # as rich's right justification does
        pad = " " * (width - cell_len(text))
        return [[(pad, ""), (text, style)] if right else [(text, style), (pad, "")]]
    justify: JustifyMethod = "right" if right else "left"
    lines = Text(text).wrap(console, width, justify=justify, overflow="fold")
    out = []
    for line in lines:
        plain = line.plain
        body = plain.strip(" ")
        lead = plain[: len(plain) - len(plain.lstrip(" "))]
        out.append([(lead, ""), (body, style), (" " * (len(plain) - len(lead) - len(body)), "")])
    return out


def draw_sheet(
    console: Console, sheet: Sheet, columns: list[Column], widths: list[int]
) -> list[list[Fragment]]:
    """The table's lines, cell for cell what rich's ``Table`` (default box, padding 1, bold header,
    left-justified title) draws for these widths, in a fraction of its time: every width is already
    decided (:func:`fit_columns`), so nothing is measured again; only cells wider than their column
    go through rich's wrapping."""
    lines: list[list[Fragment]] = []
    width = table_width(widths)
    if sheet.title:
        for line in Text(sheet.title).wrap(console, width, justify="left", overflow="fold"):
            lines.append([(line.plain, "italic")])

    def row(cells: list[list[list[Fragment]]], bar: str, bottom: bool) -> None:
        height = max(len(c) for c in cells)
        for i in range(height):
            line: list[Fragment] = [(bar, "")]
            for cell, w in zip(cells, widths):
                # headers sit on the bottom line, cells on top
                at = i - (height - len(cell)) if bottom else i
                line.append((" ", ""))
                line.extend(cell[at] if 0 <= at < len(cell) else [(" " * w, "")])
                line.append((" " + bar, ""))
            lines.append(line)

    lines.append([(_rule(_TOP, widths), "")])
    row(
        [_cell_lines(console, c.header, w, c.numeric, "bold") for c, w in zip(columns, widths)],
        _HEAD_BAR,
        True,
    )
    lines.append([(_rule(_HEAD_SEP, widths), "")])
    for r in sheet.rows:
        style = r.get("_style") or ""
        row(
            [
                _cell_lines(console, sheet.cell(r, c), w, c.numeric, style)
                for c, w in zip(columns, widths)
            ],
            _ROW_BAR,
            False,
        )
    lines.append([(_rule(_BOTTOM, widths), "")])
    return lines


def _print_drawn(console: Console, sheet: Sheet, columns: list[Column], widths: list[int]) -> None:
    if console.options.ascii_only or console.legacy_windows or not columns:
        # an ASCII box for such terminals; no columns: rich's own empty table
        console.print(sheet_table(sheet, columns, widths))
        return
    lines = draw_sheet(console, sheet, columns, widths)
    if console.no_color or console.color_system is None:
        # No styles to show (a pipe, a file, NO_COLOR): one plain text, no spans to render.
        text = Text("\n".join("".join(f for f, _ in line) for line in lines))
    else:
        text = Text()
        for n, line in enumerate(lines):
            if n:
                text.append("\n")
            for fragment, style in line:
                text.append(fragment, style or None)
    console.print(text, soft_wrap=True, highlight=False)


def line_markup(line: Line) -> str:
    text = escape(line.text)
    if line.lead:
        text = f"[bold]{escape(line.lead)}[/]{text}"
    style = _STYLES.get(line.style)
    return f"[{style}]{text}[/]" if style else text


def print_line(console: Console, line: Line) -> None:
    console.print(line_markup(line), highlight=False, soft_wrap=line.whole)


def print_sheet(
    console: Console,
    sheet: Sheet,
    *,
    wide: bool = False,
    hint: str = "",
    max_rows: int | None = None,
) -> bool:
    """One sheet: all its columns with ``wide``, else the default ones that fit the console;
    its first ``max_rows`` rows (all by default).

    Returns whether a note said which columns were left out."""
    sheet, left_out = first_rows(sheet, max_rows)
    columns = [c for c in sheet.columns if wide or not c.wide]
    limit = console.width
    kept, widths, hidden = fit_columns(sheet, columns, limit, drop=not wide)
    needed = table_width(widths)
    if needed > limit:
        # Nothing fits narrower without cutting a key figure: draw it whole, wider than the console.
        saved = console.width
        console.width = needed
        try:
            _print_drawn(console, sheet, kept, widths)
        finally:
            console.width = saved
    else:
        _print_drawn(console, sheet, kept, widths)
    if hidden:
        names = ", ".join(c.header for c in hidden)
        console.print(
            f"  [dim]left out at {limit} columns: {escape(names)}"
            + (f"; {escape(hint)}" if hint else "")
            + "[/]",
            highlight=False,
        )
    if left_out:
        console.print(f"  [dim]{escape(MORE_ROWS_NOTE.format(left_out))}[/]", highlight=False)
    for note in sheet.notes:
        console.print(f"  {escape(note)}", highlight=False)
    return bool(hidden)


def render_table(view: View, console: Console, *, wide: bool = False) -> None:
    """Draw a view on a rich console: head lines, tables, foot lines, then the headline."""
    for line in view.head:
        print_line(console, line)
    told = False
    limit = row_limit(view.sheets)
    for sheet in view.sheets:
        told = print_sheet(console, sheet, wide=wide, hint=view.hint, max_rows=limit) or told
    if not told and not wide and any(c.wide for s in view.sheets for c in s.columns) and view.hint:
        console.print(f"[dim]{escape(view.hint)}[/]", highlight=False)
    for line in view.foot:
        print_line(console, line)
    if view.headline is not None:
        print_line(console, view.headline)
