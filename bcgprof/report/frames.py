"""A report's tables as typed pandas DataFrames: :func:`read_frames` (``bcgprof.read_frames``).

pandas is imported inside the functions only, so reading a report for a command never loads it.

The columns are those of the CSV files, in the schema's order (a column a report predates is
there, empty). Their dtypes follow the schema:

=============================  ==========================================================
integer column (bytes, counts)  ``int64``; ``Int64`` (pandas' nullable integer) where the
                                schema allows a blank (``graph_nodes``, the ledger, ...)
float column (times, ratios)    ``float64``; ``Float64`` (nullable) where a blank is allowed
                                (``replay_max_abs_diff`` may hold ``inf``: a replay gave NaN)
text column                     ``string`` (mode, status, detail, summary ``rank``, ...)
=============================  ==========================================================

Bytes are never floats, so sums and equalities are exact.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union, get_args, get_type_hints

from bcgprof.report.read import read_report
from bcgprof.report.schema import (
    BucketRecord,
    Report,
    RunInfo,
    SiteRecord,
    SummaryRecord,
    bucket_columns_written,
)

if TYPE_CHECKING:
    import pandas as pd


def column_dtypes(cls: Any) -> dict[str, str]:
    """Each field of a record type and the pandas dtype of its column (see the module docstring)."""
    out = {}
    for name, hint in get_type_hints(cls).items():
        args = get_args(hint)
        optional = type(None) in args
        base = next((a for a in args if a is not type(None)), hint) if args else hint
        if base is int:
            out[name] = "Int64" if optional else "int64"
        elif base is float:
            out[name] = "Float64" if optional else "float64"
        else:
            out[name] = "string"
    return out


def records_frame(records: list, cls: Any, only: Optional[tuple] = None) -> pd.DataFrame:
    """A DataFrame of ``records`` (of dataclass ``cls``), one column per field (or per field
    named in ``only``), typed by :func:`column_dtypes`."""
    import pandas as pd

    names = [f.name for f in fields(cls) if only is None or f.name in only]
    dtypes = column_dtypes(cls)
    # a column at a time, typed as it is built: a list holding None never passes through float64
    columns = {
        name: pd.Series([getattr(r, name) for r in records], dtype=dtypes[name], name=name)
        for name in names
    }
    return pd.DataFrame(columns, columns=names)


@dataclass
class ReportTables:
    """A validated report: run.json's :class:`RunInfo` and the three tables as DataFrames.

    ``summary`` holds summary.csv's rows (recomputed from buckets.csv in a report that did not
    complete; ``summary_source`` says which); ``sites`` is empty (with its columns) when the
    report has no sites.csv. ``report`` holds the same rows as records.
    """

    path: Path
    run: RunInfo
    buckets: pd.DataFrame
    summary: pd.DataFrame
    sites: pd.DataFrame
    summary_source: str
    report: Report


def tables(report: Report) -> ReportTables:
    """:class:`ReportTables` of a report already read."""
    return ReportTables(
        report.path,
        report.run,
        # a one-phase report's buckets have no phase column, as in buckets.csv
        records_frame(report.buckets, BucketRecord, bucket_columns_written(report.run)),
        records_frame(report.summary, SummaryRecord),
        records_frame(report.sites, SiteRecord),
        report.summary_source,
        report,
    )


def read_frames(path: Union[str, Path]) -> ReportTables:
    """Read and check the report at ``path`` as every command does (a bad report is a
    :class:`~bcgprof.errors.ReportError` naming file, row and column) and return its tables.
    (:func:`bcgprof.report.read_report` returns the same report as records.)

    Exported as ``bcgprof.read_frames``::

        report = bcgprof.read_frames("reports/gpt-oss-20b-h200")
        report.summary.set_index("mode")["device_used_bytes"]   # int64
    """
    return tables(read_report(path))


def read_report_tables(path: Union[str, Path]) -> ReportTables:
    """:func:`read_frames` under its old name, with a warning, for one release."""
    warnings.warn(
        "bcgprof.report.read_report_tables is deprecated and will be removed in the next release; "
        "use "
        "bcgprof.read_frames",
        FutureWarning,
        stacklevel=2,
    )
    return read_frames(path)


def report_frames(report: Report) -> dict:
    """``{"buckets": DataFrame, "summary": DataFrame}`` of a report read already (see
    :func:`tables`)."""
    t = tables(report)
    return {"buckets": t.buckets, "summary": t.summary}
