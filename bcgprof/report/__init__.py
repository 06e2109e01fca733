"""The report format: one record type per file, read (validated, once) and written atomically.

A report is a directory holding ``buckets.csv`` (one :class:`BucketRecord` per mode, rank and
bucket), ``summary.csv`` (one :class:`SummaryRecord` per mode and rank, derived from the bucket
rows), ``run.json`` (one :class:`RunInfo`) and, from the floor mode, ``sites.csv``. The
dataclass fields are the columns; every reader and writer goes through this package:

* :mod:`~bcgprof.report.schema`: the records and what each column may hold;
* :mod:`~bcgprof.report.limits`: the caps (buckets, modes, ranks, rows, file sizes, text length);
* :mod:`~bcgprof.report.codec`: one CSV field (or a whole column) to and from its value;
* :mod:`~bcgprof.report.files`: regular files within their caps, read as a stream of checked lines;
* :mod:`~bcgprof.report.table`: one CSV file into records; :mod:`~bcgprof.report.runinfo`: run.json;
* :mod:`~bcgprof.report.consistency`: the rows against run.json, the summary against the rows;
* :mod:`~bcgprof.report.phased`: the rows of a report of several phases in one pool (schema 2);
* :mod:`~bcgprof.report.read`: :func:`read_report`, all of the above;
* :mod:`~bcgprof.report.write`: atomic files and :class:`ReportWriter`;
* :mod:`~bcgprof.report.summaries`: :func:`summarize`, summary.csv from the bucket rows;
* :mod:`~bcgprof.report.frames`: the tables as typed pandas DataFrames, :func:`read_frames` (pandas
loaded only
  there).

Nothing here imports torch, numpy, pandas (outside :mod:`~bcgprof.report.frames`' functions)
or the model code. The writer and the frames load when first named (reading a report needs
neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bcgprof.report.codec import clean_text, records_to_csv
from bcgprof.report.consistency import REPLAY_ATOL, capture_sequence
from bcgprof.report.files import open_report_file
from bcgprof.report.limits import (
    MAX_BUCKET_ROWS,
    MAX_BYTES,
    MAX_FILE_BYTES,
    MAX_MODES,
    MAX_MS,
    MAX_TEXT_CHARS,
    MAX_TP,
)
from bcgprof.report.phased import phase_end_pools, phase_report_name, phased_sequence
from bcgprof.report.read import (
    cyclic_gc_paused,
    read_csv_records,
    read_report,
    read_report_text,
    refuse_phased,
)
from bcgprof.report.runinfo import read_run_info
from bcgprof.report.schema import (
    BUCKET_REQUIRED,
    LEDGER_FIELDS,
    PHASED_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SITE_KINDS,
    SITES_FILE,
    SUMMARY_FROM_FILE,
    SUMMARY_RECOMPUTED,
    SUMMARY_REQUIRED,
    BucketRecord,
    Report,
    RunInfo,
    SiteRecord,
    SummaryRecord,
)
from bcgprof.report.summaries import summarize

if TYPE_CHECKING:
    from bcgprof.report.frames import ReportTables, read_frames, read_report_tables, report_frames
    from bcgprof.report.write import (
        ReportWriter,
        atomic_write_bytes,
        atomic_write_text,
        run_info_to_json,
    )

_LAZY = {
    "ReportTables": "frames",
    "read_frames": "frames",
    "read_report_tables": "frames",
    "report_frames": "frames",
    "ReportWriter": "write",
    "atomic_write_bytes": "write",
    "atomic_write_text": "write",
    "run_info_to_json": "write",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"bcgprof.report.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'bcgprof.report' has no attribute {name!r}")


__all__ = [
    "BUCKET_REQUIRED",
    "LEDGER_FIELDS",
    "MAX_BUCKET_ROWS",
    "MAX_BYTES",
    "MAX_FILE_BYTES",
    "MAX_MODES",
    "MAX_MS",
    "MAX_TEXT_CHARS",
    "MAX_TP",
    "PHASED_SCHEMA_VERSION",
    "REPLAY_ATOL",
    "SCHEMA_VERSION",
    "SITES_FILE",
    "SITE_KINDS",
    "SUMMARY_FROM_FILE",
    "SUMMARY_RECOMPUTED",
    "SUMMARY_REQUIRED",
    "BucketRecord",
    "Report",
    "ReportTables",
    "ReportWriter",
    "RunInfo",
    "SiteRecord",
    "SummaryRecord",
    "atomic_write_bytes",
    "atomic_write_text",
    "capture_sequence",
    "clean_text",
    "cyclic_gc_paused",
    "open_report_file",
    "phase_end_pools",
    "phase_report_name",
    "phased_sequence",
    "read_csv_records",
    "read_frames",
    "read_report",
    "read_report_tables",
    "read_report_text",
    "read_run_info",
    "records_to_csv",
    "refuse_phased",
    "report_frames",
    "run_info_to_json",
    "summarize",
]
