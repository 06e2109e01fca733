"""Files the user names for bcgprof to write (``plot -o``, ``advise -o``, ``gate --summary-md``).

An image is written atomically (a temporary file beside it, then a rename); ``--summary-md`` is
appended to (``O_APPEND``, one locked write: safe for gates run side by side). Neither is ever
written into a report directory, whether named directly or through a link: a report is only
ever written by the capture that made it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from bcgprof.errors import BcgprofError

REPORT_FILES = ("run.json", "buckets.csv", "summary.csv")


def holds_report(directory: Path) -> bool:
    return directory.is_dir() and any((directory / name).exists() for name in REPORT_FILES)


def resolved_output(
    path: Path, option: str, *, create_parents: bool = False, append: bool = False
) -> Path:
    """Where writing ``path`` would really land; refused (one line) if that is a report's directory
    or file.

    A symbolic link is followed to its target, so a link cannot smuggle an output into a report.
    With ``create_parents`` missing directories are allowed (:func:`replace_file` makes them). With
    ``append`` (:func:`append_text` writes into the file itself) a file with other names is refused
    too.
    """
    try:
        real = _resolved_output(Path(path), option, create_parents)
        if append and real.exists() and real.stat().st_nlink > 1:
            raise BcgprofError(HARD_LINKED.format(option=option, path=path))
        return real
    except OSError as e:  # a name too long for the file system, a looping link...
        raise BcgprofError(
            f"cannot write {option} {path}: {e.strerror or e}; name another file"
        ) from None


HARD_LINKED = (
    "{option} {path} has other names (hard links), one of which could be inside a report; name a "
    "file "
    "of its own"
)


def _resolved_output(path: Path, option: str, create_parents: bool) -> Path:
    real = Path(os.path.realpath(path))
    if real.is_dir():
        raise BcgprofError(f"{option} {path} is a directory; name a file")
    if real.name in REPORT_FILES or holds_report(real.parent):
        via = f" (through the link to {real})" if real != Path(os.path.abspath(path)) else ""
        raise BcgprofError(
            f"{option} {path} is inside a report directory{via}; writing there would damage the "
            "report: name a file outside it"
        )
    parent = real.parent
    if create_parents:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise BcgprofError(f"cannot write {option} {path}: {parent} is a file, not a directory")
    if not parent.is_dir():
        raise BcgprofError(
            f"{option} {path}: directory {real.parent} does not exist; create it or name another "
            "file"
        )
    if real.exists() and not real.is_file():
        raise BcgprofError(f"{option} {path} is not a regular file; name a regular file")
    if not os.access(real if real.exists() else parent, os.W_OK):
        raise BcgprofError(
            f"cannot write {option} {path}: it is not writable; name a file you can write"
        )
    return real


def _umask() -> int:
    mask = os.umask(0o022)  # reading it means setting it: put it straight back
    os.umask(mask)
    return mask


def replace_file(real: Path, data: bytes) -> None:
    """Write ``data`` to ``real`` atomically: a temporary file beside it, then a rename over it."""
    import tempfile  # here, not at the top: the gate imports this module and rarely writes a file

    real.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes 0600: keep a replaced file's mode, give a new one what open() would (0666
        # less umask)
        os.chmod(tmp, real.stat().st_mode & 0o7777 if real.exists() else 0o666 & ~_umask())
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_text(real: Path, text: str, option: str) -> None:
    """Append ``text`` to ``real``, which :func:`resolved_output` returned: a real append, so that
    gates run side by side on one file (a CI job's ``$GITHUB_STEP_SUMMARY``) each add their whole
    text and the file keeps its inode. The file is opened with ``O_APPEND`` (every write lands at
    its end, whatever others wrote), locked (``flock``, exclusive) and written in one ``write`` of
    the whole text, so appenders never interleave. ``O_NOFOLLOW`` refuses a link put in its place
    since the check, and a file with other names (hard links) is refused, since another name could
    be inside a
    report."""
    import fcntl  # here, not at the top: the gate imports this module and rarely writes a file

    data = text.encode("utf-8")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(real, flags, 0o666)  # O_NONBLOCK: a FIFO put in its place cannot hang the open
    except OSError as e:
        raise BcgprofError(f"cannot write {option} {real}: {e.strerror or e}") from e
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BcgprofError(f"{option} {real} is not a regular file; name a regular file")
        if info.st_nlink > 1:
            raise BcgprofError(HARD_LINKED.format(option=option, path=real))
        fcntl.flock(fd, fcntl.LOCK_EX)
        _write_all(fd, data)
    except OSError as e:
        raise BcgprofError(f"cannot write {option} {real}: {e.strerror or e}") from e
    finally:
        os.close(fd)  # and with it the lock


def _write_all(fd: int, data: bytes) -> None:
    """``data`` written to ``fd``: one ``write`` for a regular file, more only if the system took
    less."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
