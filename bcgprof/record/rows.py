"""The lines a recorded process writes: one JSON object per line, appended to a file of its own.

Each process of a recorded program appends to ``<report>/.record/<pid>.jsonl``, one line per event:
``process`` (who it is, once, at its first reading), ``bucket`` (one bucket's readings before and
after, written when the bucket ends) and ``phase`` (an engine's capture phase began or ended). A
line is written with one ``write`` of a whole line and flushed, so a reader sees whole lines or
nothing of the last; a torn last line (a killed process) is skipped. Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SPOOL = ".record"  # the folder of a report where recorded processes append their lines
PROCESS, BUCKET, PHASE = "process", "bucket", "phase"
MAX_LINE = 1 << 16  # a bucket line is about 1 KB; longer lines are not bcgprof's


def spool_of(report: Path) -> Path:
    return Path(report) / SPOOL


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


def read_lines(spool: Path) -> Iterator[dict[str, Any]]:
    """Every whole line of every process's file, file by file in the order of their names."""
    if not Path(spool).is_dir():
        return
    for path in sorted(Path(spool).glob("*.jsonl")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for raw in data.split(b"\n")[:-1]:  # the last piece is a torn line or empty
            if len(raw) > MAX_LINE:
                continue
            try:
                item = json.loads(raw)
            except ValueError:
                continue
            if (
                isinstance(item, dict)
                and isinstance(item.get("kind"), str)
                and isinstance(item.get("pid"), int)
            ):
                yield item
