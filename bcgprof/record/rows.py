"""The lines a recorded process writes: one JSON object per line, appended to a file of its own.

Each process of a recorded program appends to ``<report>/.record/<pid>.jsonl``, one line per event:
``process`` (who it is, once, at its first reading), ``bucket`` (one bucket's readings before and
after, written when the bucket ends), ``phase`` (an engine's capture phase began or ended) and
``trace`` (with ``--trace``: a group's allocator trace was written, or why it has none). A line
is written with one ``write`` of a whole line and flushed, so a reader sees whole lines or nothing
of the last; a torn last line (a killed process) is skipped. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

SPOOL = ".record"  # the folder of a report where recorded processes append their lines
# the empty file the bootstrap (site/sitecustomize.py, which keeps its own copy of the name) makes
# in the spool when a process of the program first loads it
SITE_LOADED = "site-loaded"
# the empty file the hook makes when it first patches torch's CUDA graphs in a program's process
TORCH_HOOKED = "torch-hooked"
PROCESS, BUCKET, PHASE, TRACE = "process", "bucket", "phase", "trace"
MAX_LINE = 1 << 16  # a bucket line is about 1 KB; longer lines are not bcgprof's
# a process's file: 4,096 buckets of about 1 KB fit 16 times over; bytes past it are not read
MAX_FILE = 64 << 20
MAX_FILES = 1024  # process files read (a report holds 8 ranks); the others are not read


def spool_of(report: Path) -> Path:
    return Path(report) / SPOOL


def mark(spool: Path, name: str) -> None:
    """Leave the empty file ``name`` in the spool, once: one system call a process (after the
    first, ``O_EXCL`` fails at once); never raises."""
    with contextlib.suppress(OSError):
        os.close(os.open(Path(spool) / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


class LineWriter:
    """Appends lines to one process's file (opened with O_APPEND; a forked child opens its own)."""

    def __init__(self, spool: Path):
        self.spool = Path(spool)
        self._pid = -1
        self._fd = -1

    def write(self, kind: str, **fields: Any) -> None:
        pid = os.getpid()
        if pid != self._pid:  # first line, or a forked child that inherited the parent's descriptor
            self.spool.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(
                self.spool / f"{pid}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
            )
            self._pid = pid
        line = json.dumps({"kind": kind, "pid": pid, **fields}, allow_nan=False, default=str) + "\n"
        os.write(self._fd, line.encode())


class LineReader:
    """Every whole line of every process's file, read incrementally: each call reads only the
    bytes appended since the last (an offset per file), so a parent that polls a long recording
    parses each line once. A torn last line is kept back until its newline arrives. A file is read
    up to :data:`MAX_FILE` bytes, so a program writing into the spool cannot fill the parent's
    memory."""

    def __init__(self, spool: Path):
        self.spool = Path(spool)
        self._offsets: dict[Path, int] = {}
        self._lines: dict[Path, list[dict[str, Any]]] = {}
        # what was left unread: files with bytes past MAX_FILE, entries that are not regular files
        # (a pipe would block the read), and "more files" past MAX_FILES
        self.unread: set[str] = set()
        self.unparsed = 0  # whole lines that are not a JSON object with a kind and a pid

    def read(self) -> list[dict[str, Any]]:
        """All lines so far, file by file in the order of their names."""
        if self.spool.is_dir():
            for path in self.spool.glob("*.jsonl"):
                if path in self._offsets or len(self._offsets) < MAX_FILES:
                    self._read_new(path)
                else:
                    self.unread.add("more files")
        return [item for path in sorted(self._lines) for item in self._lines[path]]

    def _read_new(self, path: Path) -> None:
        offset = self._offsets.setdefault(path, 0)
        if offset >= MAX_FILE:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return
        with os.fdopen(fd, "rb") as f:
            status = os.fstat(fd)
            # not a regular file (a pipe would block the read), or shorter than what was read of
            # it (a process's file only grows): read no more of it, keep what was read
            if not stat.S_ISREG(status.st_mode) or status.st_size < offset:
                self.unread.add(path.name)
                self._offsets[path] = MAX_FILE
                return
            f.seek(offset)
            data = f.read(MAX_FILE - offset + 1)
        end = data.rfind(b"\n") + 1  # up to the last whole line
        self._offsets[path] = offset + end
        if offset + len(data) > MAX_FILE:  # the program (or anything) filling the spool
            self.unread.add(path.name)
            end = data.rfind(b"\n", 0, MAX_FILE - offset) + 1
            self._offsets[path] = MAX_FILE  # never read again
        lines = self._lines.setdefault(path, [])
        for raw in data[:end].split(b"\n")[:-1]:
            item = _parse(raw)
            if item is not None:
                lines.append(item)
            else:
                self.unparsed += 1


def _parse(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LINE:
        return None
    try:
        item = json.loads(raw)
    except ValueError:
        return None
    if (
        isinstance(item, dict)
        and isinstance(item.get("kind"), str)
        and isinstance(item.get("pid"), int)
    ):
        return item
    return None
