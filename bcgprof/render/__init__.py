"""Output of `show`, `compare`, `gate`, `estimate` and a finished `capture`.

Two layers: :mod:`~bcgprof.render.views` (and :mod:`~bcgprof.render.compare_views` for a
comparison) builds a view model (a :class:`~bcgprof.render.model.View`) from a report, a
comparison, a gate result or an estimate; one renderer per output draws any view:
:func:`render_table` (rich tables fitted to a terminal's console; on a
:class:`~bcgprof.render.as_text.PlainConsole`, for output that is not a terminal, the same
tables as aligned plain text without rich), :func:`render_markdown`, :func:`render_json` and
:func:`render_csv`. The functions below are what the CLI and the runner call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bcgprof.render.as_text import PlainConsole, render_text
from bcgprof.render.compare_views import compare_view
from bcgprof.render.model import Column, Line, Sheet, View
from bcgprof.render.views import (
    capture_view,
    estimate_view,
    gate_headline,
    gate_view,
    run_line,
    show_view,
    verdict_line,
)

if TYPE_CHECKING:
    from rich.console import Console

    from bcgprof.render.as_csv import render_csv
    from bcgprof.render.as_json import render_json
    from bcgprof.render.as_markdown import render_markdown

# The markdown, json and csv renderers load when asked for (a table needs none of them); so does
# rich, which only a terminal's tables need.
_LAZY = {"render_csv": "as_csv", "render_json": "as_json", "render_markdown": "as_markdown"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"bcgprof.render.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'bcgprof.render' has no attribute {name!r}")


FORMATS = ("table", "markdown", "json", "csv")
SECTIONS = ("all", "buckets", "summary")

__all__ = [
    "FORMATS",
    "SECTIONS",
    "Column",
    "Line",
    "PlainConsole",
    "Sheet",
    "View",
    "gate_error_markdown",
    "gate_headline",
    "gate_markdown",
    "print_capture_result",
    "print_estimate",
    "print_gate",
    "render",
    "render_csv",
    "render_json",
    "render_markdown",
    "render_table",
    "render_text",
    "run_line",
    "show_comparison",
    "show_report",
    "verdict_line",
]


def render_table(view: View, console: Console | PlainConsole, *, wide: bool = False) -> None:
    """Draw a view's tables: rich tables on a rich console, aligned plain text on a
    :class:`PlainConsole`."""
    if isinstance(console, PlainConsole):
        render_text(view, console, wide=wide)
        return
    from bcgprof.render.as_table import render_table as render_rich

    render_rich(view, console, wide=wide)


def _write(console: Console | PlainConsole, text: str) -> None:
    # Plain text, exactly as produced: no markup, wrapping or highlighting.
    console.file.write(text)
    console.file.flush()


def render(view: View, fmt: str, console: Console | PlainConsole, *, wide: bool = False) -> None:
    """Draw ``view`` on ``console`` in one of :data:`FORMATS`."""
    if fmt == "table":
        render_table(view, console, wide=wide)
    elif fmt == "markdown":
        from bcgprof.render.as_markdown import render_markdown

        _write(console, render_markdown(view))
    elif fmt == "json":
        from bcgprof.render.as_json import render_json

        _write(console, render_json(view))
    elif fmt == "csv":
        from bcgprof.render.as_csv import render_csv

        _write(console, render_csv(view))
    else:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def show_report(
    report,
    console: Console | PlainConsole,
    fmt: str = "table",
    section: str = "all",
    *,
    wide: bool = False,
    phases=None,
) -> None:
    """`bcgprof show`: per-mode bucket tables and the summary, in any of :data:`FORMATS`
    (``phases``: of several phases in one pool, the pair against each phase alone)."""
    # json and csv are drawn from the report's data and files alone: no tables to build
    view = show_view(report, section, tables=fmt in ("table", "markdown"), phases=phases)
    render(view, fmt, console, wide=wide)


def show_comparison(
    cmp,
    console: Console | PlainConsole,
    fmt: str = "table",
    section: str = "all",
    *,
    wide: bool = False,
) -> None:
    """`bcgprof compare`: totals per mode, then bucket deltas (largest growth first)."""
    # json: the data alone
    render(compare_view(cmp, section, tables=fmt != "json"), fmt, console, wide=wide)


def print_gate(result, console: Console | PlainConsole) -> None:
    render_table(gate_view(result), console)


def gate_markdown(result) -> str:
    """The verdict and tables appended to ``--summary-md`` (a CI job summary)."""
    from bcgprof.render.as_markdown import render_markdown

    return render_markdown(gate_view(result)) + "\n"


def gate_error_markdown(message: str) -> str:
    """The job summary of a gate refused: its error line, made printable (it can quote a path or
    a file)."""
    from bcgprof.text import printable

    return (
        f"## bcgprof gate: UNUSABLE INPUT\n\n{printable(' '.join(message.split()), limit=2000)}\n\n"
    )


def print_estimate(est, console: Console | PlainConsole) -> None:
    render_table(estimate_view(est), console)


def print_capture_result(report, console: Console | PlainConsole, phases=None) -> None:
    """What a finished capture shows: its tables (fitted to the console), the verdict line and
    "report: PATH" (``phases``: of several phases in one pool, the pair against each alone)."""
    render_table(capture_view(report, phases), console)
