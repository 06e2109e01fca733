"""Where the CLI's words go: results on stdout; progress, notes and errors on stderr.

Writing to stdout can fail in three ways the CLI must tell apart: the reader went away
(``| head``: :class:`OutputClosed`, not an error), stdout is closed or full
(:class:`StdoutError`, an error with its own message), and everything else. The gate keeps
its verdict as its exit code in all three.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import IO, Any, Optional, cast

import typer

from bcgprof.errors import BcgprofError
from bcgprof.text import printable

PIPE_WIDTH = 220  # columns of tables written to a pipe or file (COLUMNS overrides it)


class OutputClosed(Exception):
    """The reader of stdout went away (``bcgprof show ... | head``)."""


class StdoutError(BcgprofError):
    """Standard output cannot be written (closed, full, or another I/O error)."""


class GuardedStdout(io.TextIOBase):
    """sys.stdout as a file for rich: write errors become :class:`OutputClosed` or
    :class:`StdoutError`."""

    def _target(self):
        if sys.stdout is None:
            raise StdoutError(
                "standard output is closed; run the command with stdout open (a terminal, a file "
                "or a pipe)"
            )
        return sys.stdout

    def _guard(self, action) -> Any:
        try:
            return action(self._target())
        except BrokenPipeError as e:
            raise OutputClosed() from e
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise OutputClosed() from e
            raise StdoutError(
                f"cannot write to standard output: {e.strerror or e}; free the device or "
                "redirect stdout elsewhere"
            ) from e
        except ValueError as e:  # "I/O operation on closed file"
            raise StdoutError(f"cannot write to standard output: {e}; keep stdout open") from e

    def write(self, text: str) -> int:
        return int(self._guard(lambda f: f.write(text)) or 0)

    def flush(self) -> None:
        self._guard(lambda f: f.flush())

    def isatty(self) -> bool:
        try:
            return bool(sys.stdout is not None and sys.stdout.isatty())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return int(self._guard(lambda f: f.fileno()))

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(sys.stdout, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True


def quiet_stdout() -> None:
    """Send what is left of stdout to /dev/null, so that nothing fails at interpreter exit
    either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    except (OSError, ValueError):
        pass


def _console_width() -> Optional[int]:
    if GuardedStdout().isatty():
        return None  # the terminal's
    return pipe_width()


def pipe_width() -> int:
    """Columns of output that is not a terminal: COLUMNS when it says, else :data:`PIPE_WIDTH`."""
    # A pipe or file gets wide lines rather than wrapped table cells, unless COLUMNS says otherwise.
    columns = os.environ.get("COLUMNS", "")
    plain = columns.isascii() and columns.isdigit()
    return int(columns) if plain and 20 <= int(columns) <= 10_000 else PIPE_WIDTH


def stdout_is_terminal() -> bool:
    """Whether stdout gets a terminal's rich tables: a terminal, or TTY_COMPATIBLE=1 or FORCE_COLOR
    saying so (rich's own rules: TTY_COMPATIBLE=0 says no)."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    return GuardedStdout().isatty()


def stdout_console():
    """The console results are printed on: rich's on a terminal; else a plain-text one, which draws
    the same tables as aligned text without loading rich (:mod:`bcgprof.render.as_text`)."""
    if not stdout_is_terminal():
        from bcgprof.render.as_text import PlainConsole

        return PlainConsole(cast(IO[str], GuardedStdout()), pipe_width())
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own handler exits 1, which means "regression"
            quiet_stdout()
            raise OutputClosed()

    return _Console(
        file=cast(IO[str], GuardedStdout()),
        highlight=False,
        emoji=False,
        width=_console_width(),
        soft_wrap=False,
    )


def stderr_console():
    """The console progress, notes and warnings are printed on."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False, soft_wrap=False)


def note(text: str) -> None:
    """A line for the person at the terminal (stderr): ``wrote FILE``, warnings."""
    typer.echo(printable(text, limit=2000), err=True)


def flush_stdout() -> None:
    """Flush stdout now, inside the command, so that a full or closed stdout is reported as such."""
    GuardedStdout().flush()
