"""The view model: what a command shows, before it is drawn in any format.

A :class:`View` is lines above the tables (``head``), the tables (:class:`Sheet`), lines
below them (``foot``), an optional one-line verdict (``headline``) and the JSON
document (``data``). Sheets hold raw row values and :class:`Column` descriptions of
how to show them; the renderers (:mod:`~bcgprof.render.as_table`,
:mod:`~bcgprof.render.as_markdown`, :mod:`~bcgprof.render.as_json`,
:mod:`~bcgprof.render.as_csv`) decide nothing but the drawing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from bcgprof.text import displayable


@dataclass
class Column:
    key: str  # key of the raw value in each row, and the csv header
    header: str  # what tables and markdown show
    fmt: Callable[[Any], str] = str
    numeric: bool = True  # right-aligned, never wrapped
    key_column: bool = False  # tables never hide, shrink or cut it
    wide: bool = False  # tables show it only with --wide; markdown, json and csv always
    drop: int = 1  # when a table is too narrow, non-key columns with the highest drop go first


@dataclass
class Sheet:
    name: str  # machine name of the section: buckets, summary, totals, ...
    title: str
    columns: list[Column]
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # printed under the table

    def cell(self, row: dict, column: Column) -> str:
        """A row may override a column's format (the compare totals mix bytes, counts and
        seconds)."""
        fmt = row.get("_fmt", {}).get(column.key, column.fmt)
        return fmt(row.get(column.key))


# Line styles: what a line means; each renderer shows it its own way.
PLAIN, STRONG, WARNING, BAD, GOOD = "", "strong", "warning", "bad", "good"


@dataclass
class Line:
    """A line of text around the tables. Its text and lead are made displayable when it is made
    (:func:`bcgprof.text.displayable`): the one place where paths, which views quote as given,
    become text for a terminal or a markdown file."""

    text: str
    style: str = PLAIN
    lead: str = ""  # shown before the text, in bold (a path, a label)
    bullet: bool = False  # a list item in markdown
    # never wrapped (a bucket list to copy: a break inside a number makes other buckets)
    whole: bool = False

    def __post_init__(self) -> None:
        self.text, self.lead = displayable(self.text), displayable(self.lead)


@dataclass
class View:
    head: list[Line] = field(default_factory=list)
    sheets: list[Sheet] = field(default_factory=list)
    foot: list[Line] = field(default_factory=list)
    data: Any = None  # the JSON document
    # exact csv output (show: the files' own columns); else the sheets' raw values
    csv_text: Optional[str] = None
    title: str = ""  # a markdown heading over everything (the gate's job summary)
    headline: Optional[Line] = None  # the verdict: last in a table, first in markdown
    hint: str = ""  # how to see what a narrow table leaves out
    # data and csv_text built only by the renderer that draws them (a report of 100,000 rows drawn
    # as a table needs neither): when set, they stand for data and csv_text
    make_data: Optional[Callable[[], Any]] = None
    make_csv: Optional[Callable[[], str]] = None

    def json_data(self) -> Any:
        """The JSON document (built now when the view was given :attr:`make_data`)."""
        return self.make_data() if self.make_data is not None else self.data

    def csv_output(self) -> Optional[str]:
        """The exact csv output, when the view has one (built now when given :attr:`make_csv`)."""
        return self.make_csv() if self.make_csv is not None else self.csv_text
