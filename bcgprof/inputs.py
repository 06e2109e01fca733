"""Input files a user names (``advise --lengths``): regular files only, of bounded size, read as a stream.

A path can name anything: ``/dev/zero`` (endless), ``/dev/urandom`` (endless and not text), a
FIFO (blocks forever on open), a directory. Each is refused in one line before a byte is read;
a regular file larger than its cap is refused with the cap in the message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from bcgprof.errors import BcgprofError


def open_regular_text(path: Path, what: str, max_bytes: int) -> IO[str]:
    """Open ``path`` for reading as UTF-8 text (a BOM is skipped) if it is a regular file of at most ``max_bytes``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise BcgprofError(f"{what} {path} does not exist; name an existing file") from None
    except OSError as e:
        raise BcgprofError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise BcgprofError(f"{what} {path} is {kind}; name a regular file")
    if info.st_size > max_bytes:
        raise BcgprofError(f"{what} {path} is {info.st_size} bytes, over the cap of {max_bytes} bytes "
                           f"({max_bytes // 2 ** 20} MiB); pass a smaller file")
    try:
        # O_NONBLOCK: should the file have been swapped for a FIFO since the check, opening it cannot hang.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise BcgprofError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BcgprofError(f"{what} {path} is not a regular file; name a regular file")
    os.set_blocking(fd, True)
    return open(fd, encoding="utf-8-sig", newline="")
