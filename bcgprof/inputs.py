"""Input files a user names (``advise --lengths``): regular files only, of bounded size, read as a
stream.

A path can name anything: ``/dev/zero`` (endless), ``/dev/urandom`` (endless and not text), a
FIFO (blocks forever on open), a directory. Each is refused in one line before a byte is read;
a regular file larger than its cap is refused with the cap in the message.

:func:`open_capped` makes those checks and the open for every such file, a report's included
(:mod:`bcgprof.report.files` words its own refusals from :class:`Refused`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Literal

from bcgprof.errors import BcgprofError

DIRECTORY, SPECIAL = (
    "a directory",
    "a device, FIFO or socket",
)  # what a path that is not a regular file is
Reason = Literal["missing", "unreadable", "not regular", "too large"]


class Refused(Exception):
    """Why :func:`open_capped` opened nothing, for its caller to say in its own words: ``reason`` is
    ``"missing"``, ``"unreadable"`` (``detail``: the system's reason), ``"not regular"``
    (``detail``: :data:`DIRECTORY` or :data:`SPECIAL`) or ``"too large"`` (``size``: the file's
    bytes)."""

    def __init__(self, reason: Reason, detail: str = "", size: int = 0) -> None:
        super().__init__(reason, detail, size)
        self.reason, self.detail, self.size = reason, detail, size


def _kind(mode: int) -> str:
    return DIRECTORY if stat.S_ISDIR(mode) else SPECIAL


MISSING, REGULAR, BROKEN_LINK = "missing", "a regular file", "a symbolic link to nothing"


def kind_of(path: Path) -> tuple[str, str]:
    """What ``path`` names, without ever raising: ``(kind, "")`` with ``kind`` one of
    :data:`MISSING`, :data:`REGULAR`, :data:`DIRECTORY`, :data:`SPECIAL` or :data:`BROKEN_LINK`, or
    ``("unreadable", reason)`` when the system cannot look (a name too long, a loop of links, a
    directory without permission, a NUL byte). One ``stat`` (and an ``lstat`` for a missing name);
    every path a user names is looked at through this or :func:`open_capped`, so no such name
    reaches a command as an
    ``OSError``."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return (BROKEN_LINK if os.path.islink(path) else MISSING), ""
    except OSError as e:
        return "unreadable", e.strerror or str(e)
    except ValueError:  # an embedded NUL byte: no file system has such a name
        return "unreadable", "the name holds a NUL byte"
    return (REGULAR if stat.S_ISREG(mode) else _kind(mode)), ""


def _open_capped_fd(path: Path, max_bytes: int) -> int:
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise Refused("missing") from None
    except OSError as e:
        raise Refused("unreadable", e.strerror or str(e)) from None
    except ValueError:
        raise Refused("unreadable", "the name holds a NUL byte") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused("not regular", _kind(info.st_mode))
    if info.st_size > max_bytes:
        raise Refused("too large", size=info.st_size)
    try:
        # O_NONBLOCK: should the file have been swapped for a FIFO since the check, opening it
        # cannot hang.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise Refused("unreadable", e.strerror or str(e)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Refused("not regular", _kind(mode))
    os.set_blocking(fd, True)
    return fd


def open_capped(path: Path, max_bytes: int) -> IO[str]:
    """``path`` opened as UTF-8 text (a BOM is skipped, newlines kept for the csv module) if it is a
    regular file of at most ``max_bytes``; :class:`Refused` before a byte is read otherwise. The
    open itself never blocks, and what it opened is checked again."""
    return open(_open_capped_fd(path, max_bytes), encoding="utf-8-sig", newline="")


def open_capped_bytes(path: Path, max_bytes: int) -> IO[bytes]:
    """:func:`open_capped` for a binary file (a gzip trace)."""
    return open(_open_capped_fd(path, max_bytes), "rb")


def open_regular_text(path: Path, what: str, max_bytes: int) -> IO[str]:
    """Open ``path`` for reading as UTF-8 text (a BOM is skipped) if it is a regular file of at
    most ``max_bytes``."""
    try:
        return open_capped(path, max_bytes)
    except Refused as r:
        if r.reason == "missing":
            message = f"{what} {path} does not exist; name an existing file"
        elif r.reason == "unreadable":
            message = f"cannot read {what} {path}: {r.detail}"
        elif r.reason == "not regular":
            kind = r.detail if r.detail == DIRECTORY else f"not a regular file ({r.detail})"
            message = f"{what} {path} is {kind}; name a regular file"
        else:
            message = (
                f"{what} {path} is {r.size} bytes, over the cap of {max_bytes} bytes "
                f"({max_bytes // 2**20} MiB); pass a smaller file"
            )
        raise BcgprofError(message) from None
