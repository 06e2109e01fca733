"""Reading one CSV file of a report into records, streamed and checked: :func:`read_table`.

The file is read a block of lines at a time (see :mod:`~bcgprof.report.files`). A file as
bcgprof writes it (no quoted field, no carriage return, no blank line, every row as wide as the
header, every field valid) is split at its commas and decoded a block at a time, column by
column (:func:`~bcgprof.report.codec.decode_column`), without the csv module. Any other file is
read again from the start by the csv module and decoded a chunk of :data:`CHUNK_ROWS` rows at
a time; a chunk with a bad field is decoded again field by field, so the error names the first
bad row and column. A malformed line, a row of the wrong width or one row too many stops the read
at that row. Columns the record does not know are ignored; a missing contract column is an
error; a column appended to the schema after a report was written reads as its default.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields
from operator import methodcaller
from pathlib import Path
from typing import Any, Optional

from bcgprof.errors import ReportError
from bcgprof.report.codec import FIX, decode_column, decode_field
from bcgprof.report.files import checked_lines, line_blocks, open_report_file
from bcgprof.report.schema import REQUIRED, RULES

CHUNK_ROWS = 4096


@dataclass
class Table:
    """The records of one CSV file, the file's header, and the line each record was read from."""

    path: Path
    header: list[str]
    records: list
    lines: list[int]  # 1-based line of the file (the header is line 1)

    def known_columns(self, cls: Any) -> list[str]:
        return [c for c in self.header if c in RULES[cls]]


def read_table(
    path: Path, cls: Any, cap: int, max_rows: Optional[int] = None, rows_hint: str = ""
) -> Table:
    """Read ``path``, a CSV of ``cls`` records, of at most ``cap`` bytes and ``max_rows`` rows.

    ``rows_hint`` says where ``max_rows`` comes from, for the message when it is passed.
    """
    path = Path(path)
    plain = _read_plain(path, cls, cap, max_rows)
    if plain is not None:
        return plain
    with open_report_file(path, cap) as f:
        reader = csv.reader(checked_lines(f, path), strict=True)
        header = _header(path, reader)
        check_required(path, cls, header)
        rules = RULES[cls]
        index = {name: i for i, name in enumerate(header) if name in rules}
        records: list = []
        lines: list[int] = []
        for chunk, chunk_lines in _chunks(path, reader):
            width = len(header)
            bad = (
                next((k for k, row in enumerate(chunk) if len(row) != width), None)
                if set(map(len, chunk)) != {width}
                else None
            )
            if bad is not None:
                # an earlier bad value first
                _decode_chunk(path, cls, index, chunk[:bad], chunk_lines[:bad])
                raise ReportError(
                    f"{path}:{chunk_lines[bad]} is corrupt: {len(chunk[bad])} values for {width} "
                    f"columns; {FIX}"
                )
            if max_rows is not None and len(records) + len(chunk) > max_rows:
                allowed = max_rows - len(records)
                # an earlier bad value first
                _decode_chunk(path, cls, index, chunk[:allowed], chunk_lines[:allowed])
                line = chunk_lines[allowed]
                raise ReportError(
                    f"{path}: row {line} is one row more than {rows_hint or max_rows}; {FIX}"
                )
            records.extend(_decode_chunk(path, cls, index, chunk, chunk_lines))
            lines.extend(chunk_lines)
    return Table(path, header, records, lines)


_NOT_PLAIN = (
    '"',
    "\r",
)  # a quoted field (which may hold commas and line breaks), a carriage return
_COMMAS = methodcaller("count", ",")


def _read_plain(path: Path, cls: Any, cap: int, max_rows: Optional[int]) -> Optional[Table]:
    """The table of a file as bcgprof writes it, read without the csv module: None at the first
    thing that is not as bcgprof writes it (a quote, a carriage return, a blank line, a row of
    another width, a bad field, a row too many, a duplicate or missing column, anything
    :func:`line_blocks` refuses), so that the csv path reads the file again and says what is wrong.
    For such a file the csv module gives the same rows: each line split at its commas."""
    try:
        with open_report_file(path, cap) as f:
            header: Optional[list[str]] = None
            width = 0
            decoders: list[
                tuple[Optional[int], Any, Any]
            ] = []  # per field: (its column, its rule, its default)
            records: list = []
            lines: list[int] = []
            line = 2  # the file's line of the next row
            for text in line_blocks(f, path):
                if any(c in text for c in _NOT_PLAIN):
                    return None
                rows = text.split("\n")
                if rows[-1] == "":
                    rows.pop()  # the block's last line break
                if header is None:
                    if not rows or not rows[0]:
                        return None
                    header = [h.strip() for h in rows[0].split(",")]
                    named = [h for h in header if h]
                    if len(set(named)) != len(named) or any(n not in header for n in REQUIRED[cls]):
                        return None
                    rows = rows[1:]
                    width = len(header)
                    index = {name: i for i, name in enumerate(header) if name in RULES[cls]}
                    defaults = _defaults(cls)
                    decoders = [
                        (index.get(f.name), RULES[cls][f.name], defaults.get(f.name))
                        for f in fields(cls)
                    ]
                if not rows:
                    continue
                if "" in rows or set(map(_COMMAS, rows)) != {width - 1}:
                    return None
                n = len(rows)
                if max_rows is not None and len(records) + n > max_rows:
                    return None
                cells = ",".join(rows).split(",")
                columns: list[Any] = []
                for i, rule, default in decoders:
                    if i is None:  # a column appended after this report was written
                        columns.append(itertools.repeat(default, n))
                        continue
                    values = decode_column(cells[i::width], rule)
                    if values is None:
                        return None
                    columns.append(values)
                records.extend(map(cls, *columns))
                lines.extend(range(line, line + n))
                line += n
    except ReportError:
        return None
    return None if header is None else Table(path, header, records, lines)


def _header(path: Path, reader: Any) -> list[str]:
    try:
        first = next(reader, None)
    except csv.Error as e:
        raise ReportError(f"{path}:1 is corrupt: {e}; {FIX}") from None
    if first is None:
        raise ReportError(f"{path} is empty; {FIX}")
    header = [h.strip() for h in first]
    seen: set[str] = set()
    for name in header:
        if name in seen and name:
            raise ReportError(
                f"{path} is corrupt: column {name[:60]!r} appears twice in the header; {FIX}"
            )
        seen.add(name)
    return header


def _chunks(path: Path, reader: Any) -> Iterator[tuple[list[list[str]], list[int]]]:
    """The non-empty rows after the header, :data:`CHUNK_ROWS` at a time, each with its line."""
    while True:
        start = reader.line_num
        try:
            chunk = list(itertools.islice(reader, CHUNK_ROWS))
        except csv.Error as e:
            line = reader.line_num
            if "unexpected end of data" in str(e):
                raise ReportError(
                    f"{path}:{line} is corrupt: a quoted field is never closed; {FIX}"
                ) from None
            if "new-line character seen in unquoted field" in str(e):
                raise ReportError(
                    f"{path}:{line} is corrupt: a carriage return inside a field that is not "
                    "quoted; "
                    f"{FIX}"
                ) from None
            raise ReportError(f"{path}:{line} is corrupt: {e}; {FIX}") from None
        if not chunk:
            return
        if reader.line_num - start == len(chunk):  # one line a row, as bcgprof writes them
            lines = list(range(start + 1, reader.line_num + 1))
            if not all(chunk):  # blank lines
                kept = [(row, line) for row, line in zip(chunk, lines, strict=True) if row]
                chunk, lines = [r for r, _ in kept], [n for _, n in kept]
        else:  # a quoted field spans lines: count them row by row
            chunk, lines = _recount(path, reader, chunk, start)
        yield chunk, lines


def _recount(
    path: Path, reader: Any, chunk: list[list[str]], start: int
) -> tuple[list[list[str]], list[int]]:
    """Lines of rows some of which span several lines: the last line of each is found from the
    number of line breaks its quoted fields hold."""
    rows, lines = [], []
    line = start
    for row in chunk:
        line += 1 + sum(field.count("\n") for field in row)
        if row:
            rows.append(row)
            lines.append(line)
    return rows, lines


def check_required(path: Path, cls: Any, header: list[str]) -> None:
    missing = [n for n in REQUIRED[cls] if n not in header]
    if missing:
        raise ReportError(f"{path} is corrupt: missing column(s) {', '.join(missing)}; {FIX}")


def _defaults(cls: Any) -> dict[str, Any]:
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
    return out


def _decode_chunk(
    path: Path, cls: Any, index: dict[str, int], rows: list[list[str]], lines: list[int]
) -> list:
    if not rows:
        return []
    rules = RULES[cls]
    defaults = _defaults(cls)
    raw = list(zip(*rows, strict=True))
    columns: list[Any] = []
    for f in fields(cls):
        i = index.get(f.name)
        if i is None:  # a column appended after this report was written
            columns.append(itertools.repeat(defaults[f.name], len(rows)))
            continue
        values = decode_column(raw[i], rules[f.name])
        if values is None:
            return _decode_rows(path, cls, index, rows, lines)
        columns.append(values)
    return [cls(*values) for values in zip(*columns, strict=True)]


def _decode_rows(
    path: Path, cls: Any, index: dict[str, int], rows: list[list[str]], lines: list[int]
) -> list:
    """Field by field, so the first bad one is named; the same values as the column decoding
    otherwise."""
    rules = RULES[cls]
    out = []
    for line, row in zip(lines, rows, strict=True):
        values = {
            name: decode_field(row[i], rules[name], f"{path}: row {line}, column {name}")
            for name, i in index.items()
        }
        out.append(cls(**values))
    return out
