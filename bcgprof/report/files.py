"""Opening a report's files: regular files only, within their caps, read as a stream of checked
lines.

A path inside a report directory can name anything: a FIFO (an ``open`` blocks forever), a
device (``/dev/zero`` never ends), a directory, a file of gigabytes. Each is refused before a
byte is read, with a :class:`~bcgprof.errors.ReportError` naming the file and the cap. What is
read is checked line by line (no NUL byte, UTF-8, no line over :data:`MAX_LINE_BYTES`), so a
malformed file fails at its first bad line without being loaded whole.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TextIO, cast

from bcgprof.errors import ReportError
from bcgprof.inputs import DIRECTORY, MISSING, Refused, kind_of, open_capped
from bcgprof.report.codec import FIX
from bcgprof.report.limits import MAX_LINE_BYTES, MIB


def describe_cap(cap: int) -> str:
    return f"{cap // MIB} MiB" if cap >= MIB and cap % MIB == 0 else f"{cap} bytes"


def report_directory(path: Path) -> Path:
    """``path`` if it names a directory; else a :class:`~bcgprof.errors.ReportError` saying what it
    is instead (missing, a file, a name the system refuses: too long, a loop of links), never an
    ``OSError``. The one check of a report's path before its files are opened."""
    kind, reason = kind_of(path)
    if kind == DIRECTORY:
        return path
    if kind == "unreadable":
        raise ReportError(
            f"cannot read report {path}: {reason}; give a report directory written by bcgprof "
            "capture"
        )
    what = (
        "does not exist or is not a directory" if kind == MISSING else f"is {kind}, not a directory"
    )
    raise ReportError(f"report {path} {what}; give a report directory written by bcgprof capture")


def is_present(path: Path) -> bool:
    """Whether a report's optional file is there to be read: anything by that name, a broken link or
    a name the system refuses included (reading it then says what is wrong), only a missing name
    not."""
    return kind_of(path)[0] != MISSING


def open_report_file(path: Path, cap: int) -> IO[str]:
    """``path`` opened as UTF-8 text (a byte-order mark is skipped, newlines kept for the csv
    module).

    Refused, before anything is read: a missing file, anything that is not a regular file
    (directory, FIFO, device, socket; a symbolic link counts as what it points to) and a file
    over ``cap`` bytes. The open itself never blocks.
    """
    path = Path(path)
    try:
        return open_capped(path, cap)
    except Refused as r:
        if r.reason == "missing":
            message = (
                f"{path} is missing; a report directory holds run.json, buckets.csv and "
                "summary.csv: "
                "is this a bcgprof report directory?"
            )
        elif r.reason == "unreadable":
            message = f"cannot read {path}: {r.detail}"
        elif r.reason == "not regular":
            message = (
                f"{path} is not a regular file ({r.detail}); a report file is a regular file: {FIX}"
            )
        else:
            message = (
                f"{path} is {r.size} bytes, over the cap of {describe_cap(cap)} for this report "
                f"file (larger than any report bcgprof writes): is it the right file? {FIX}"
            )
        raise ReportError(message) from None


BLOCK_BYTES = 1024 * 1024  # read this much at a time: checks run per block, at C speed


def checked_lines(f: IO[str], path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The lines of ``f`` (opened by :func:`open_report_file`), each checked: no NUL byte, UTF-8, at
    most ``limit`` bytes. Reads a block of :data:`BLOCK_BYTES` at a time and never more than that
    ahead of the line being checked, so an endless line is refused after one block.
    """
    # lines end at "\n" alone
    return itertools.chain.from_iterable(map(io.StringIO, line_blocks(f, path, limit)))


def line_blocks(f: IO[str], path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The file's text a block of whole lines at a time (lines end at ``\\n`` only, as csv wants
    them), each checked as :func:`checked_lines` says."""
    raw = cast(TextIO, f).buffer  # bytes, so a NUL byte is found before the decoding stumbles on it
    first_line = 1  # the file's line number of the block's first line
    rest = b""
    while True:
        try:
            block = raw.read(BLOCK_BYTES)
        except OSError as e:
            raise ReportError(f"cannot read {path}: {e.strerror or e}") from None
        data = rest + block
        if not data:
            return
        # whole lines only; at the end, all that is left
        cut = data.rfind(b"\n") + 1 if block else len(data)
        chunk, rest = data[:cut], data[cut:]
        lengths = [len(line) + 1 for line in chunk.split(b"\n")] if chunk else []
        if len(rest) > limit or (lengths and max(lengths) > limit):
            at = next((i for i, n in enumerate(lengths) if n > limit), max(len(lengths) - 1, 0))
            raise ReportError(
                f"{path}:{first_line + at} is a line of more than {limit} bytes, longer than any "
                "line "
                f"bcgprof writes; {FIX}"
            )
        nul = chunk.find(b"\x00")
        if nul >= 0:
            at = first_line + chunk.count(b"\n", 0, nul)
            raise ReportError(
                f"{path} holds binary data (a NUL byte on line {at}), not text; {FIX}"
            )
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError as e:
            at = first_line + chunk.count(b"\n", 0, e.start)
            raise ReportError(
                f"{path} is not UTF-8 text (byte 0x{chunk[e.start]:02x} on line {at}); {FIX}"
            ) from None
        if first_line == 1 and text.startswith("\ufeff"):
            text = text[1:]
        first_line += chunk.count(b"\n")
        yield text
        if not block:
            return


def read_small_text(path: Path, cap: int) -> str:
    """The whole text of a small report file (run.json): no NUL byte, UTF-8 (a byte-order mark is
    dropped)."""
    with open_report_file(path, cap) as f:
        try:
            data = cast(TextIO, f).buffer.read(cap + 1)
        except OSError as e:
            raise ReportError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > cap:  # it grew while being read
        raise ReportError(
            f"{path} is over the cap of {describe_cap(cap)} for this report file; {FIX}"
        )
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ReportError(f"{path} holds binary data (a NUL byte at offset {nul}), not text; {FIX}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportError(
            f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {FIX}"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text
