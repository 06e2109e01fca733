"""The `bcgprof` application object and the one place every command's ending is decided.

Exit codes (bcgprof.errors): 0 ok; 1 a regression (gate) or a failed mode (capture); 2
unusable input, a refusal before any work, or an internal error; 130 interrupted.
Every error is one line on stderr, ``error: what is wrong; what to do`` — a usage error
(an unknown option, a missing argument) as much as a bad report — and never a traceback,
unless ``--debug`` or ``BCGPROF_DEBUG=1`` asks for one. Under torchrun only rank 0 prints.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Optional, TypeVar

import typer
import typer.core

from bcgprof import __version__
from bcgprof.cli.output import OutputClosed, quiet_stdout
from bcgprof.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BcgprofError, one_line
from bcgprof.report_format import plain_number_text
from bcgprof.text import printable


def _click_class(name: str) -> type[Exception]:
    """A click exception class by name, from typer's own classes (typer may vendor click: never
    import it)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name:
            return cls
    raise RuntimeError(f"typer.BadParameter has no {name} base")  # pragma: no cover


USAGE_ERROR = _click_class("UsageError")
CLICK_EXCEPTION = _click_class("ClickException")


class _State:
    debug = False  # --debug: tracebacks for internal errors


def debugging() -> bool:
    return _State.debug or os.environ.get("BCGPROF_DEBUG", "") not in ("", "0")


def _quiet_rank() -> bool:
    """A torchrun rank other than 0: its errors are rank 0's too, so it keeps them to its exit
    code."""
    return os.environ.get("WORLD_SIZE") is not None and os.environ.get("RANK", "0") not in ("", "0")


def say_error(message: str) -> None:
    """Print one ``error:`` line on stderr (sanitised: messages can quote files)."""
    if not _quiet_rank():
        typer.echo(f"error: {printable(' '.join(str(message).split()), limit=2000)}", err=True)


def fail(message: str, code: int) -> None:
    say_error(message)
    raise typer.Exit(code)


class _PlainNumber:
    """Mixed into click's integer and float types: a value is first held to
    :func:`plain_number_text` (ASCII, no underscore): ``int("1_0")`` is 10, and ``int()`` reads
    other scripts' digits too."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not plain_number_text(value):
            message = f"{printable(value, 40)!r} is not a number in ASCII digits (no underscores)"
            self.fail(message, param, ctx)  # type: ignore[attr-defined]
        return super().convert(value, param, ctx)  # type: ignore[misc]


_PLAIN_TYPES: dict[type, type] = {}


def plain_numbers(group: Any) -> None:
    """Every integer and float option of every command of ``group`` held to ASCII digits: one rule
    for numbers, whatever the option (click's types read them with ``int()`` and ``float()``)."""
    numeric = {"IntParamType", "FloatParamType"}
    for cmd in getattr(group, "commands", {}).values():
        for param in cmd.params:
            cls = type(param.type)
            if cls in _PLAIN_TYPES.values() or not numeric & {c.__name__ for c in cls.__mro__}:
                continue
            if cls not in _PLAIN_TYPES:
                _PLAIN_TYPES[cls] = type(f"Plain{cls.__name__}", (_PlainNumber, cls), {})
            plain = copy.copy(param.type)
            plain.__class__ = _PLAIN_TYPES[cls]
            param.type = plain


class OneLineErrors(typer.core.TyperGroup):
    """Typer's group, with usage errors as one ``error:`` line and exit 2 instead of a boxed panel,
    and numbers in ASCII digits only (:func:`plain_numbers`)."""

    def main(
        self,
        args: Optional[Sequence[str]] = None,
        prog_name: Optional[str] = None,
        complete_var: Optional[str] = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        plain_numbers(self)
        try:
            code = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except USAGE_ERROR as e:
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else (prog_name or "bcgprof")
            message = str(getattr(e, "format_message", e.__str__)()).strip().rstrip(".")
            message = re.sub(r"\.\s+Did you mean (.*)\?$", r" (did you mean \1?)", message)
            message = message[:1].lower() + message[1:]
            say_error(f"{message}; see '{where} --help'")
            code = EXIT_USAGE
        except CLICK_EXCEPTION as e:
            say_error(str(getattr(e, "format_message", e.__str__)()))
            code = getattr(e, "exit_code", EXIT_USAGE) or EXIT_USAGE
        except (typer.Abort, KeyboardInterrupt, EOFError):
            say_error("interrupted")
            code = EXIT_INTERRUPTED
        code = code if isinstance(code, int) else EXIT_OK
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="bcgprof",
    cls=OneLineErrors,
    help="Profile the GPU memory of breakable CUDA-graph capture across size buckets (capture) or "
    "of any "
    "program's capture (record), read the "
    "reports it writes (show, compare, plot, gate, explain, predict, advise, audit), and estimate "
    "output "
    "buffers from a model config alone (estimate).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no boxes, no <bool> metavars, the same in every terminal
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

F = TypeVar("F", bound=Callable[..., Any])


def command(fn: F) -> F:
    """Every way a command can end, as one line and a documented exit code.

    BcgprofError: its message and code (2). Ctrl-C: 130. A reader that closes stdout
    early (``| head``): quietly 0 (the gate keeps its verdict itself). Anything else is an
    internal error: one line and exit 2 (never 0 or 1, which mean pass and regression/failure),
    with the traceback only under --debug or BCGPROF_DEBUG=1.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, CLICK_EXCEPTION):
            raise
        except BcgprofError as e:
            if debugging():
                traceback.print_exc()
            fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)
        except (OutputClosed, BrokenPipeError):
            quiet_stdout()  # the reader stopped reading (| head): nothing went wrong here
            raise typer.Exit(EXIT_OK) from None
        except Exception as e:
            if debugging():
                traceback.print_exc()
                raise typer.Exit(EXIT_USAGE) from None
            fail(
                f"internal error: {one_line(e)}; re-run with --debug for the traceback and report "
                "it",
                EXIT_USAGE,
            )

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bcgprof {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print the bcgprof version and exit.",
    ),
    debug: bool = typer.Option(
        False,
        "--debug",
        help="Print the traceback of an internal error (as does "
        "BCGPROF_DEBUG=1); without it, every error is one line.",
    ),
) -> None:
    """Profile the GPU memory of breakable CUDA-graph capture across size buckets.

    `capture` and `record` need a CUDA GPU; every other command reads reports and needs neither a
    GPU nor PyTorch's model code. Results go to stdout; progress, notes and errors to stderr.
    Exit codes: 0 ok, 1 a regression (gate) or a failed mode (capture), 2 unusable input or
    an internal error, 130 interrupted.
    """
    _State.debug = debug
