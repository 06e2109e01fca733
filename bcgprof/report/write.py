"""Writing a report: every file replaced atomically, so a reader (or a killed writer) never
sees half a file, and the directory is a valid report after every row.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bcgprof.report.codec import clean_json, records_to_csv
from bcgprof.report.read import read_csv_records, read_report
from bcgprof.report.schema import (
    BUCKETS_FILE,
    RUN_FILE,
    SITES_FILE,
    SUMMARY_FILE,
    BucketRecord,
    RunInfo,
    SiteRecord,
    SummaryRecord,
    bucket_columns_written,
    run_info_dict,
)
from bcgprof.report.summaries import summarize


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a report is for everyone to read
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def run_info_to_json(run: RunInfo) -> str:
    """run.json's text: strings cleaned as the reader cleans them (so a reopened report keeps
    them)."""
    return json.dumps(clean_json(run_info_dict(run)), indent=2, allow_nan=False) + "\n"


class ReportWriter:
    """Keeps a report directory valid after every row: each write replaces whole files
    atomically."""

    def __init__(self, path: str | Path, run: RunInfo, records: list[BucketRecord] | None = None):
        self.path = Path(path)
        self.run = run
        self.records: list[BucketRecord] = list(records or [])
        self.path.mkdir(parents=True, exist_ok=True)
        self._flush()

    @classmethod
    def reopen(cls, path: str | Path) -> ReportWriter:
        """Continue a report another process started (each mode runs in its own process)."""
        report = read_report(path, phased=True)
        return cls(path, report.run, report.buckets)

    def append(self, record: BucketRecord) -> None:
        self.records.append(record)
        self._flush()

    def extend(self, records: Iterable[BucketRecord]) -> None:
        """Append several rows (one bucket step of every rank) and rewrite the files once."""
        self.records.extend(records)
        self._flush()

    def update_run(self, **changes: Any) -> None:
        for k, v in changes.items():
            setattr(self.run, k, v)
        self._flush()

    def flush(self) -> None:
        """Rewrite the files from ``records`` and ``run`` (after changing a record in place, e.g.
        a replay check)."""
        self._flush()

    def add_sites(self, records: Iterable[SiteRecord]) -> None:
        """Add rows to sites.csv (kept beside what other modes' processes wrote there)."""
        new = list(records)
        if not new:
            return
        path = self.path / SITES_FILE
        existing = read_csv_records(path, SiteRecord) if path.exists() else []
        atomic_write_text(path, records_to_csv(existing + new, SiteRecord))

    def _flush(self) -> None:
        atomic_write_text(
            self.path / BUCKETS_FILE,
            records_to_csv(self.records, BucketRecord, bucket_columns_written(self.run)),
        )
        atomic_write_text(
            self.path / SUMMARY_FILE, records_to_csv(summarize(self.records), SummaryRecord)
        )
        atomic_write_text(self.path / RUN_FILE, run_info_to_json(self.run))
