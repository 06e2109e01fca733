"""Reading a report directory, every file checked once: :func:`read_report`.

A value of the wrong type or out of range, a malformed or oversized file, a row that disagrees
with run.json, a summary that disagrees with the bucket rows of a complete report: each is a
:class:`~bcgprof.errors.ReportError` that names the file, the row (its line in the CSV) and the
column, and says what to do. The caps are those of :mod:`bcgprof.report.limits`; the checks of
rows against run.json those of :mod:`bcgprof.report.consistency`. Nothing a reader gets back
holds a control character or a text field over :data:`~bcgprof.report.limits.MAX_TEXT_CHARS`.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bcgprof.errors import ReportError
from bcgprof.options import MODES
from bcgprof.report.consistency import (
    check_bucket_rows,
    check_bucket_sums,
    check_site_rows,
    check_summary_rows,
)
from bcgprof.report.files import is_present, read_small_text, report_directory
from bcgprof.report.limits import (
    MAX_BUCKETS_BYTES,
    MAX_MODES,
    MAX_RUN_BYTES,
    MAX_SITES_BYTES,
    MAX_SUMMARY_BYTES,
    MAX_SUMMARY_ROWS,
    MAX_TP,
)
from bcgprof.report.phased import check_no_phases, check_phased_rows, phase_report_name
from bcgprof.report.runinfo import read_run_info
from bcgprof.report.schema import (
    BUCKETS_FILE,
    RUN_FILE,
    SITES_FILE,
    SUMMARY_FILE,
    SUMMARY_FROM_FILE,
    SUMMARY_RECOMPUTED,
    BucketRecord,
    Report,
    RunInfo,
    SiteRecord,
    SummaryRecord,
)
from bcgprof.report.summaries import summarize
from bcgprof.report.table import read_table
from bcgprof.vocab import RunStatus

_CAPS: dict[Any, int] = {
    BucketRecord: MAX_BUCKETS_BYTES,
    SummaryRecord: MAX_SUMMARY_BYTES,
    SiteRecord: MAX_SITES_BYTES,
}


def read_report_text(path: Path) -> str:
    """A small report file's text (run.json): UTF-8 (a byte-order mark dropped), no NUL byte,
    within its cap."""
    return read_small_text(Path(path), MAX_RUN_BYTES)


def read_csv_records(path: Path, cls: Any) -> list:
    """The records of a CSV written from ``cls``, every column it knows checked (not against
    run.json).

    Extra columns are ignored; a missing contract column, a value of the wrong type or out of
    range, or a malformed file is a :class:`ReportError` naming file, row and column.
    """
    return read_table(Path(path), cls, _CAPS.get(cls, MAX_BUCKETS_BYTES)).records


def _bucket_rows_cap(run: RunInfo) -> tuple[int, str]:
    """At most every mode on every rank and bucket of run.json (of every phase): a bound known
    before the file is read (which modes run.json lists is checked row by row)."""
    modes = max(len(run.modes), len(MODES))  # a capture's four modes, or a recording's groups
    if run.phased:
        buckets = sum(map(len, run.phase_buckets.values()))
    else:
        buckets = len(run.buckets)
    n = modes * run.tp * buckets
    return (
        n,
        f"{modes} modes x run.json's {run.tp} rank(s) x {buckets} bucket(s) allow ({n} rows)",
    )


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused (and restored as it was) for a block that builds many
    objects without reference cycles: records, their comparisons and views. Left on, it rescans
    every object built so far at each of its passes, about half the time of reading, comparing or
    gating reports of 100,000 rows. The report-reading commands run in it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_report(path: str | Path, *, phased: bool = False) -> Report:
    """Read and check a report directory (run.json, buckets.csv and summary.csv are required).

    A report of several phases in one pool (schema 2) is read only with ``phased=True`` (by the
    commands that know its rows' phases); otherwise it is refused with one line
    (:func:`refuse_phased`) before its rows are read.

    Every column and field is checked, and every row against run.json (see
    :mod:`bcgprof.report.consistency`). summary.csv must be well formed; in a complete report
    its rows must agree with buckets.csv. In a report that did not complete, whose writer may
    have stopped between files, the summary is recomputed from buckets.csv and
    :attr:`Report.summary_source` says so. sites.csv, when present, is read too.
    """
    path = report_directory(Path(path))
    with cyclic_gc_paused():
        return _read_checked(path, phased)


def refuse_phased(path: Path, run: RunInfo) -> None:
    """One line for a command that reads one-phase reports only, given a report of several."""
    if run.phased:
        alone = ", ".join(str(path / phase_report_name(p)) for p in run.phases)
        raise ReportError(
            f"{path} holds {' and '.join(run.phases)} captured into one pool (report schema "
            f"{run.schema_version}); this command reads one-phase reports: show it with "
            f"`bcgprof show`, or pass one of the phases captured alone ({alone})"
        )


def _read_checked(path: Path, phased: bool) -> Report:
    run = read_run_info(path / RUN_FILE)
    if not phased:
        refuse_phased(path, run)
    rows_cap, rows_hint = _bucket_rows_cap(run)
    buckets = read_table(path / BUCKETS_FILE, BucketRecord, MAX_BUCKETS_BYTES, rows_cap, rows_hint)
    if run.phased:
        check_phased_rows(buckets.path, run, buckets.records, buckets.lines)
    else:
        check_no_phases(buckets.path, buckets.records, buckets.lines)
        check_bucket_rows(buckets.path, run, buckets.records, buckets.lines)
    check_bucket_sums(buckets.path, buckets.records, buckets.lines)
    summary = read_table(
        path / SUMMARY_FILE,
        SummaryRecord,
        MAX_SUMMARY_BYTES,
        MAX_SUMMARY_ROWS,
        f"the {MAX_SUMMARY_ROWS} a summary can hold ({MAX_MODES} modes x ({MAX_TP} ranks + max + "
        "sum))",
    )
    computed = summarize(buckets.records)
    check_summary_rows(summary.path, run, summary.records, summary.lines, summary.header, computed)
    source = SUMMARY_FROM_FILE if run.status == RunStatus.COMPLETE else SUMMARY_RECOMPUTED
    sites: list[SiteRecord] = []
    if is_present(path / SITES_FILE):
        table = read_table(path / SITES_FILE, SiteRecord, MAX_SITES_BYTES)
        check_site_rows(table.path, run, table.records, table.lines, buckets.records)
        sites = table.records
    columns = {
        "buckets": buckets.known_columns(BucketRecord),
        "summary": summary.known_columns(SummaryRecord),
    }
    return Report(
        path, run, buckets.records, computed, summary_source=source, sites=sites, columns=columns
    )
