"""Error types, exit codes, and the one place that decides whether a failure was out of memory.

Every command exits with one of the codes below. A :class:`BcgprofError` is a problem the
user can fix: the CLI prints its message as one line and exits with its ``exit_code``;
anything else is an internal error, also exit 2 (never 0 or 1, which carry meaning).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # capture: a mode failed (the report is partial or failed); gate: a regression
EXIT_USAGE = 2  # unusable input, refused before any work, or an internal error
EXIT_OOM = 3  # a mode's (or rank's) process ran out of GPU memory; the parent reports 1
EXIT_INTERRUPTED = 130  # Ctrl-C


class BcgprofError(Exception):
    """A problem the user can fix; the message says what is wrong and what to do."""

    exit_code = EXIT_USAGE


class ModelConfigError(BcgprofError):
    pass


class BucketSpecError(BcgprofError):
    pass


class ReportError(BcgprofError):
    pass


class NoGPUError(BcgprofError):
    pass


class PredictionError(BcgprofError):
    """Inputs that cannot support a prediction."""


class AdviceError(BcgprofError):
    """Input the advisor cannot use (a lengths file, a budget, a mode)."""


class CaptureError(BcgprofError):
    """A capture refused before any GPU work (bad options, an existing report, ...), or a
    bucket the capture cannot take (recorded as that bucket's ``error`` row)."""


# -------------------------------------------------------------------- classification

_OOM_TEXT = ("out of memory", "cublas_status_alloc_failed", "cudaerrormemoryallocation")


def is_out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` means the GPU ran out of memory.

    ``torch.cuda.OutOfMemoryError`` is recognised by name (this module never imports
    torch); libraries that report an allocation failure in their own words (cuBLAS,
    NCCL, Triton) are recognised by their message.
    """
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(e).__mro__):
        return True
    text = str(e).lower()
    return any(marker in text for marker in _OOM_TEXT)


def failure_status(e: BaseException) -> str:
    """The status a bucket that failed with ``e`` gets: ``oom`` or ``error``."""
    return "oom" if is_out_of_memory(e) else "error"


def failure_exit_code(e: BaseException) -> int:
    """The exit code of a mode process that failed with ``e``."""
    if isinstance(e, BcgprofError):
        return e.exit_code
    return EXIT_OOM if is_out_of_memory(e) else EXIT_FAILED


def one_line(e: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (a BcgprofError's message as it is), at most ``limit``
    characters."""
    if isinstance(e, BcgprofError):
        return str(e)
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:limit]


def failure_line(e: BaseException) -> str:
    """:func:`one_line`, with a hint when the failure was out of memory."""
    hint = "; try --num-layers to profile part of the stack" if is_out_of_memory(e) else ""
    return one_line(e) + hint
