"""The report format: one record type per file, read (validated) and written atomically.

A report is a directory holding ``buckets.csv`` (one :class:`BucketRecord` per mode and
bucket), ``summary.csv`` (one :class:`SummaryRecord` per mode, derived from the bucket
rows) and ``run.json`` (one :class:`RunInfo`). The dataclass fields are the columns;
every reader and writer goes through this package:

* :mod:`~bcgprof.report.schema`: the records and what each column may hold;
* :mod:`~bcgprof.report.codec`: one CSV field to and from its value;
* :mod:`~bcgprof.report.read`: :func:`read_report`, every file checked;
* :mod:`~bcgprof.report.write`: atomic files and :class:`ReportWriter`;
* :mod:`~bcgprof.report.summaries`: :func:`summarize`, summary.csv from the bucket rows;
* :mod:`~bcgprof.report.frames`: the tables as pandas DataFrames (pandas loaded only there).
"""

from bcgprof.report.codec import records_to_csv
from bcgprof.report.frames import report_frames
from bcgprof.report.limits import MAX_BYTES, MAX_FILE_BYTES, MAX_MS, MAX_TP
from bcgprof.report.read import read_csv_records, read_report, read_report_text, read_run_info
from bcgprof.report.schema import (
    BUCKET_REQUIRED,
    LEDGER_FIELDS,
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
from bcgprof.report.write import ReportWriter, atomic_write_bytes, atomic_write_text, run_info_to_json

__all__ = [
    "BUCKET_REQUIRED",
    "LEDGER_FIELDS",
    "MAX_BYTES",
    "MAX_FILE_BYTES",
    "MAX_MS",
    "MAX_TP",
    "SCHEMA_VERSION",
    "SITES_FILE",
    "SITE_KINDS",
    "SUMMARY_FROM_FILE",
    "SUMMARY_RECOMPUTED",
    "SUMMARY_REQUIRED",
    "BucketRecord",
    "Report",
    "ReportWriter",
    "RunInfo",
    "SiteRecord",
    "SummaryRecord",
    "atomic_write_bytes",
    "atomic_write_text",
    "read_csv_records",
    "read_report",
    "read_report_text",
    "read_run_info",
    "records_to_csv",
    "report_frames",
    "run_info_to_json",
    "summarize",
]
