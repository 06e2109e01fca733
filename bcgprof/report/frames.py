"""A report's tables as pandas DataFrames. pandas is imported inside the functions only, so
reading a report for a command never loads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import TYPE_CHECKING, Any, get_type_hints

from bcgprof.report.schema import BucketRecord, Report, SummaryRecord

if TYPE_CHECKING:
    import pandas as pd


def _frame(records: list, cls: Any) -> pd.DataFrame:
    import pandas as pd

    hints = get_type_hints(cls)
    df = pd.DataFrame([dataclasses.asdict(r) for r in records], columns=[f.name for f in fields(cls)])
    for name, hint in hints.items():
        base = next((a for a in getattr(hint, "__args__", ()) if a is not type(None)), hint)
        if base is int:
            df[name] = df[name].astype("Int64")
        elif base is float:
            df[name] = df[name].astype("Float64")
    return df


def report_frames(report: Report) -> dict:
    """``{"buckets": DataFrame, "summary": DataFrame}`` of a report, columns as in the CSV files.

    Integer columns that may be empty (``graph_nodes``, ...) use pandas' nullable ``Int64``,
    so bytes stay integers.
    """
    return {"buckets": _frame(report.buckets, BucketRecord), "summary": _frame(report.summary, SummaryRecord)}
