"""View model of `compare`: per-mode totals and bucket deltas of two reports, and its JSON.

:func:`compare_view` turns a :class:`~bcgprof.analysis.compare.Comparison` into a
:class:`~bcgprof.render.model.View`; the renderers draw it. Nothing here decides anything:
compare.py does. The comparison module is imported by the views that draw it, so that `show`
loads none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, TypedDict

from bcgprof.render.model import WARNING, Column, Line, Sheet, View
from bcgprof.render.views import WIDE_HINT, run_line
from bcgprof.report import SUMMARY_RECOMPUTED
from bcgprof.report_format import fmt_bytes, fmt_int, fmt_pct, fmt_seconds, pct_change

if TYPE_CHECKING:
    from bcgprof.analysis.compare import Comparison


def _delta(n) -> str:
    return fmt_bytes(n, signed=True)


def _pct_signed(v) -> str:
    return fmt_pct(v, signed=True)


_TOTAL_FORMAT = {"segments": fmt_int, "capture_s": fmt_seconds}
_TOTAL_DELTA_FORMAT = {
    "segments": lambda v: "-" if v is None else f"{int(v):+d}",
    "capture_s": lambda v: "-" if v is None else f"{v:+.2f} s",
}
# How a total is named in tables and markdown; csv and json keep the summary.csv column name.
_TOTAL_LABEL = {"capture_s": "warm-up + capture"}


def _presence_text(presence: str, old_label: str = "OLD", new_label: str = "NEW") -> str:
    from bcgprof.analysis.compare import NEW_ONLY, OLD_ONLY

    return {OLD_ONLY: f"only in {old_label}", NEW_ONLY: f"only in {new_label}"}.get(presence, "")


def _growth_style(delta) -> Optional[str]:
    if not delta:
        return None
    return "red" if delta > 0 else "green"


def totals_sheet(cmp: Comparison) -> Sheet:
    from bcgprof.analysis.causes import CAUSES
    from bcgprof.analysis.compare import BOTH

    multi = cmp.multi_rank
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *([Column("rank", "rank", numeric=False, key_column=True)] if multi else []),
        Column(
            "metric",
            "metric",
            lambda m: _TOTAL_LABEL.get(m, m or ""),
            numeric=False,
            key_column=True,
        ),
        Column("old", "old", fmt_bytes, key_column=True),
        Column("new", "new", fmt_bytes, key_column=True),
        Column("delta", "change", _delta, key_column=True),
        Column("pct", "change %", _pct_signed, drop=1),
    ]
    sheet = Sheet("totals", "per-mode totals", columns)
    for t in cmp.totals:
        if t.presence != BOTH:
            sheet.rows.append(
                {
                    "mode": t.mode,
                    "rank": t.rank,
                    "metric": _presence_text(t.presence),
                    "old": None,
                    "new": None,
                    "delta": None,
                    "pct": None,
                    "_style": "yellow",
                }
            )
            continue
        for metric, change in t.changes.items():
            plain = _TOTAL_FORMAT.get(metric, fmt_bytes)
            signed = _TOTAL_DELTA_FORMAT.get(metric, _delta)
            sheet.rows.append(
                {
                    "mode": t.mode,
                    "rank": t.rank,
                    "metric": metric,
                    "old": change.old,
                    "new": change.new,
                    "delta": change.delta,
                    "pct": change.pct,
                    "_fmt": {"old": plain, "new": plain, "delta": signed},
                    "_style": _growth_style(change.delta) if metric != "capture_s" else None,
                }
            )
        for (
            cause,
            change,
        ) in t.causes.items():  # where the device-used change went (explain's ledger)
            sheet.rows.append(
                {
                    "mode": t.mode,
                    "rank": t.rank,
                    "metric": f"  cause: {CAUSES[cause][0]}",
                    "old": change.old,
                    "new": change.new,
                    "delta": change.delta,
                    "pct": change.pct,
                    "_fmt": {"delta": _delta},
                    "_style": _growth_style(change.delta),
                }
            )
    return sheet


def compare_bucket_sheet(cmp: Comparison) -> Sheet:
    from bcgprof.analysis.compare import BOTH

    multi = cmp.multi_rank
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *([Column("rank", "rank", key_column=True)] if multi else []),
        Column("bucket", "bucket", key_column=True),
        Column("status", "status", numeric=False, key_column=True),
        Column("old_pool_delta_bytes", "pool Δ old", fmt_bytes, wide=True),
        Column("new_pool_delta_bytes", "pool Δ new", fmt_bytes, wide=True),
        Column("pool_change_bytes", "pool change", _delta, key_column=True),
        Column("old_device_used_delta_bytes", "device-used Δ old", fmt_bytes, drop=2),
        Column("new_device_used_delta_bytes", "device-used Δ new", fmt_bytes, drop=2),
        Column("device_used_change_bytes", "device-used change", _delta, key_column=True),
        Column("device_used_change_pct", "change %", _pct_signed, drop=1),
    ]
    sheet = Sheet("buckets", "bucket deltas, largest device-used growth first", columns)
    rows = sheet.rows
    for c in cmp.buckets:
        old, new = c.old, c.new
        if c.presence == BOTH:
            if old is None or new is None:
                raise ValueError(
                    f"{c.mode} rank {c.rank} bucket {c.bucket} is marked as in both reports, "
                    "but a side has no row"
                )
            status = old.status if old.status == new.status else f"{old.status} -> {new.status}"
            # c.changes' pool and device-used deltas and percent, from the rows (100,000 pairs)
            old_pool, new_pool = old.pool_delta_bytes, new.pool_delta_bytes
            old_dev, new_dev = old.device_used_delta_bytes, new.device_used_delta_bytes
            dev_delta = _change(old_dev, new_dev)
            rows.append(
                {
                    "pool_change_bytes": _change(old_pool, new_pool),
                    "device_used_change_bytes": dev_delta,
                    "device_used_change_pct": pct_change(old_dev, new_dev),
                    "_style": _growth_style(dev_delta),
                    "mode": c.mode,
                    "rank": c.rank,
                    "bucket": c.bucket,
                    "status": status,
                    "old_pool_delta_bytes": old_pool,
                    "new_pool_delta_bytes": new_pool,
                    "old_device_used_delta_bytes": old_dev,
                    "new_device_used_delta_bytes": new_dev,
                }
            )
            continue
        rows.append(
            {
                "pool_change_bytes": None,
                "device_used_change_bytes": None,
                "device_used_change_pct": None,
                "_style": "yellow",
                "mode": c.mode,
                "rank": c.rank,
                "bucket": c.bucket,
                "status": _presence_text(c.presence),
                "old_pool_delta_bytes": old.pool_delta_bytes if old else None,
                "new_pool_delta_bytes": new.pool_delta_bytes if new else None,
                "old_device_used_delta_bytes": old.device_used_delta_bytes if old else None,
                "new_device_used_delta_bytes": new.device_used_delta_bytes if new else None,
            }
        )
    return sheet


def _change(old, new):
    """``Change(metric, old, new).delta``."""
    return None if old is None or new is None else new - old


class DeltaJSON(TypedDict):
    """One figure of both reports in compare's JSON (a cause of a total, a bucket's figure)."""

    old: Optional[float]
    new: Optional[float]
    delta: Optional[float]


class ChangeJSON(DeltaJSON):
    """One total of both reports in compare's JSON: the change in percent too."""

    pct: Optional[float]


def comparison_json(cmp: Comparison, section: str = "all") -> dict:
    totals = []
    for t in cmp.totals:
        item: dict[str, str | ChangeJSON | dict[str, DeltaJSON]] = {
            "mode": t.mode,
            "rank": str(t.rank),
            "presence": t.presence,
        }
        for metric, change in t.changes.items():
            item[metric] = ChangeJSON(
                old=change.old, new=change.new, delta=change.delta, pct=change.pct
            )
        if t.causes:
            item["causes"] = {
                name: DeltaJSON(old=c.old, new=c.new, delta=c.delta) for name, c in t.causes.items()
            }
        totals.append(item)
    buckets = []
    for c in cmp.buckets:
        row: dict[str, str | int | DeltaJSON | None] = {
            "mode": c.mode,
            "rank": str(c.rank),
            "bucket": c.bucket,
            "presence": c.presence,
            "old_status": c.old.status if c.old else None,
            "new_status": c.new.status if c.new else None,
        }
        both = c.old is not None and c.new is not None  # c.changes holds the figures
        for metric in (
            "pool_delta_bytes",
            "device_used_delta_bytes",
            "non_torch_delta_bytes",
            "retained_output_bytes",
            "peak_transient_bytes",
        ):
            old = getattr(c.old, metric) if c.old else None
            new = getattr(c.new, metric) if c.new else None
            row[metric] = DeltaJSON(old=old, new=new, delta=_change(old, new) if both else None)
        buckets.append(row)
    data = {
        "old": str(cmp.old.path),
        "new": str(cmp.new.path),
        "differences": cmp.differences,
        "totals": totals,
        "buckets": buckets,
    }
    if section == "buckets":
        data.pop("totals")
    elif section == "summary":
        data.pop("buckets")
    return data


def compare_view(cmp: Comparison, section: str = "all", *, tables: bool = True) -> View:
    """`bcgprof compare`: totals per mode, then bucket deltas (largest growth first)
    (``tables=False``: no tables, for output drawn from the view's data alone)."""
    sheets = []
    if tables and section in ("all", "summary"):
        sheets.append(totals_sheet(cmp))
    if tables and section in ("all", "buckets"):
        sheets.append(compare_bucket_sheet(cmp))
    head = [
        Line(f": {run_line(cmp.old)}", lead=f"OLD {cmp.old.path}"),
        Line(f": {run_line(cmp.new)}", lead=f"NEW {cmp.new.path}"),
    ]
    for side, report in (("OLD", cmp.old), ("NEW", cmp.new)):
        if report.summary_source == SUMMARY_RECOMPUTED:
            head.append(
                Line(
                    f"{side} is {report.run.status}: its totals cover only the finished rows",
                    WARNING,
                )
            )
    if cmp.differences:
        head.append(Line("the reports differ: " + "; ".join(cmp.differences), WARNING))
    return View(
        head=head, sheets=sheets, make_data=lambda: comparison_json(cmp, section), hint=WIDE_HINT
    )
