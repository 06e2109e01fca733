"""Column widths for a table of a sheet, shared by both table renderers, without rich.

Every column gets a width before anything is drawn: numbers and key columns (mode, bucket,
status, #, the main byte figures) are never wrapped, shrunk or cut; text columns wrap at
spaces; headers wrap at spaces. When a table does not fit, the non-key columns with the
highest ``drop`` are left out, whole. A renderer passes how wide its table is for given
column widths (its frame) and how many cells a text takes on a terminal.
"""

from __future__ import annotations

from collections.abc import Callable

from bcgprof.render.model import Column, Sheet

CellLen = Callable[[str], int]
TableWidth = Callable[[list[int]], int]

# A terminal table is for reading: a view draws at most this many rows in all, each sheet its share
# (at least MIN_SHEET_ROWS); a note says what was left out. markdown, json and csv hold every row.
MAX_TABLE_ROWS = 1000
MIN_SHEET_ROWS = 25

MORE_ROWS_NOTE = "{} more rows not drawn; -f csv, -f markdown or -f json gives every row"


def row_limit(sheets: list[Sheet]) -> int | None:
    """Rows each sheet may draw, or None when every row fits :data:`MAX_TABLE_ROWS`."""
    if sum(len(s.rows) for s in sheets) <= MAX_TABLE_ROWS:
        return None
    return max(MIN_SHEET_ROWS, MAX_TABLE_ROWS // max(len(sheets), 1))


def first_rows(sheet: Sheet, max_rows: int | None) -> tuple[Sheet, int]:
    """The sheet cut to its first ``max_rows`` rows, and how many rows were left out."""
    if max_rows is None or len(sheet.rows) <= max_rows:
        return sheet, 0
    return (
        Sheet(
            sheet.name, sheet.title, sheet.columns, sheet.rows[:max_rows], sheet.notes[:max_rows]
        ),
        len(sheet.rows) - max_rows,
    )


def _widest_word(text: str, cell_len: CellLen) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def cell_texts(sheet: Sheet, columns: list[Column]) -> dict[int, list[str]]:
    """Each column's cells as shown, by ``id`` of the column (formatted once, for measuring and
    drawing)."""
    cell = sheet.cell
    return {id(c): [cell(row, c) for row in sheet.rows] for c in columns}


def measure(
    sheet: Sheet, column: Column, cell_len: CellLen, cells: list[str] | None = None
) -> tuple[int, int]:
    """(natural, minimum) content width of a column (``cells``: its cells as shown, when already
    formatted)."""
    if cells is None:
        cells = [sheet.cell(row, column) for row in sheet.rows]
    longest = max((cell_len(c) for c in cells), default=0)
    header = cell_len(column.header)
    if column.numeric or column.key_column:
        return max(longest, header, 1), max(longest, _widest_word(column.header, cell_len), 1)
    words = max((_widest_word(c, cell_len) for c in cells), default=0)
    return max(longest, header, 1), max(words, _widest_word(column.header, cell_len), 1)


def shrink(
    natural: list[int], minimum: list[int], limit: int, table_width: TableWidth
) -> list[int]:
    """Narrow the columns with the most room above their minimum until the table fits ``limit``
    (or cannot)."""
    widths = list(natural)
    excess = table_width(widths) - limit
    while excess > 0:
        slack = [w - m for w, m in zip(widths, minimum)]
        i = max(range(len(widths)), key=lambda k: slack[k], default=None)
        if i is None or slack[i] <= 0:
            break
        widths[i] -= 1
        excess -= 1
    return widths


def fit_widths(
    sheet: Sheet,
    columns: list[Column],
    limit: int,
    *,
    table_width: TableWidth,
    cell_len: CellLen,
    drop: bool = True,
    cells: dict[int, list[str]] | None = None,
) -> tuple[list[Column], list[int], list[Column]]:
    """(columns kept, their widths, columns left out) for a table at most ``limit`` characters wide.

    ``cells``: :func:`cell_texts` of these columns, when the caller has them."""
    sizes = {
        id(c): measure(sheet, c, cell_len, cells[id(c)] if cells is not None else None)
        for c in columns
    }
    kept = list(columns)
    hidden: list[Column] = []
    while True:
        widths = shrink(
            [sizes[id(c)][0] for c in kept], [sizes[id(c)][1] for c in kept], limit, table_width
        )
        if table_width(widths) <= limit or not drop:
            return kept, widths, hidden
        candidates = [c for c in kept if not c.key_column]
        if not candidates:
            return kept, widths, hidden
        top = max(c.drop for c in candidates)
        going = [c for c in candidates if c.drop == top]
        hidden = going + hidden
        kept = [c for c in kept if c not in going]
