"""View models of `explain`, `predict` and `advise`: what a report's figures mean, and what
other configurations would cost. The analysis is done in explain.py, predict.py and
advise.py; this module only lays it out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from bcgprof.analysis.explain import CAUSES, Explanation, explanation_json
from bcgprof.analysis.predict.bands import TOO_WIDE
from bcgprof.analysis.predict.needs_free import NeedsFree
from bcgprof.analysis.predict.prediction import Prediction, prediction_json
from bcgprof.render.model import PLAIN, STRONG, WARNING, Column, Line, Sheet, View
from bcgprof.render.views import run_line
from bcgprof.report_format import fmt_bytes, fmt_pct

if TYPE_CHECKING:  # advise's search (and numpy) is imported by the command that advises
    from bcgprof.analysis.predict.advise import Advice


def _bytes(n) -> str:
    return fmt_bytes(n)


def _delta(n) -> str:
    return fmt_bytes(n, signed=True)


def _count(n) -> str:
    return "-" if n is None else f"{n:,}"


def _yes(v) -> str:
    return "yes" if v else "no"


# ---------------------------------------------------------------- explain


def causes_sheet(exp: Explanation) -> Sheet:
    multi = any(m.rank != 0 for m in exp.modes)
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *([Column("rank", "rank", key_column=True)] if multi else []),
        Column("device_used_bytes", "device used", _bytes, key_column=True),
    ]
    columns += [
        Column(name, label, _delta, key_column=name in ("pool_output", "graph_executables"), drop=2)
        for name, (label, _) in CAUSES.items()
    ]
    columns.append(Column("kv_tokens", "KV tokens", _count, drop=3))
    sheet = Sheet(
        "causes", "where the device memory went (causes sum to device used exactly)", columns
    )
    for m in exp.modes:
        row = {
            "mode": m.mode,
            "rank": m.rank,
            "device_used_bytes": m.device_used_bytes,
            "kv_tokens": m.kv_tokens,
        }
        row.update(m.causes or {})
        sheet.rows.append(row)
    if any(m.causes is None for m in exp.modes):
        sheet.notes.append("no ledger columns in this report: causes unknown (-)")
    return sheet


def fit_sheet(exp: Explanation) -> Sheet:
    f = exp.fit
    if f is None:
        raise ValueError(
            f"no graph-executable fit in the explanation of {exp.report.path}: nothing to lay out"
        )
    columns = [
        Column("figure", "graph executables", numeric=False, key_column=True),
        Column("value", "value", numeric=False, key_column=True),
    ]
    rows = [
        (
            "per executable (shared per signature)" if f.shared else "per graph (segment)",
            f"{f.bytes_per_graph / 1024:.1f} KiB",
        ),
        (
            "per kernel node",
            f"{f.bytes_per_node:.0f} B"
            if f.separable
            else "not separable (executables shared)"
            if f.shared
            else "not separable (same nodes per graph)",
        ),
        (
            "buckets fitted",
            f"{f.rows}" + (" (first of each mode left out)" if f.first_buckets_excluded else ""),
        ),
        ("rms residual", fmt_bytes(int(f.rms_residual_bytes))),
        ("fitted / measured", f"{fmt_bytes(f.fitted_bytes)} / {fmt_bytes(f.measured_bytes)}"),
        ("R²", "-" if f.r2 is None else f"{f.r2:.3f}"),
    ]
    return Sheet(
        "executables",
        "graph-executable memory, fitted to "
        + ("executables" if f.shared else "graphs and nodes")
        + " (non-torch deltas)",
        columns,
        [{"figure": a, "value": b} for a, b in rows],
    )


def floor_sheet(exp: Explanation, top: int = 12) -> Sheet:
    fl = exp.floor
    if fl is None:
        raise ValueError(
            f"no floor sites in the explanation of {exp.report.path}: nothing to lay out"
        )
    columns = [
        Column("site", "site (model code, layers folded into N)", numeric=False, key_column=True),
        Column("bytes", "live at the peak", _bytes, key_column=True),
        Column("share", "of the pool", fmt_pct, drop=2),
    ]
    sheet = Sheet(
        "floor",
        f"what the floor's pool holds at its peak ({fl.mode}, bucket {fl.bucket}: "
        f"{fmt_bytes(fl.pool_bytes)})",
        columns,
    )
    shown = fl.sites[:top]
    for site, n in shown:
        sheet.rows.append(
            {
                "site": site,
                "bytes": n,
                "share": 100.0 * n / fl.pool_bytes if fl.pool_bytes else None,
            }
        )
    rest = sum(n for _, n in fl.sites[top:])
    if rest:
        sheet.rows.append(
            {
                "site": f"{len(fl.sites) - top} other sites",
                "bytes": rest,
                "share": 100.0 * rest / fl.pool_bytes,
            }
        )
    sheet.rows.append(
        {
            "site": "allocator slack (never live at the peak)",
            "bytes": fl.slack_bytes,
            "share": 100.0 * fl.slack_bytes / fl.pool_bytes if fl.pool_bytes else None,
        }
    )
    return sheet


def explain_view(exp: Explanation) -> View:
    report = exp.report
    sheets = [causes_sheet(exp)]
    if exp.fit is not None:
        sheets.append(fit_sheet(exp))
    if exp.floor is not None:
        sheets.append(floor_sheet(exp))
    head = [Line(f": {run_line(report)}", lead=str(report.path))]
    head += [Line(n, WARNING) for n in exp.notes]
    return View(
        head=head,
        sheets=sheets,
        foot=[Line(s, bullet=True) for s in exp.sentences],
        data=explanation_json(exp),
    )


# ---------------------------------------------------------------- predict


def prediction_rows_sheet(pred: Prediction) -> Sheet:
    """Every bucket's predicted row, mode by mode, in capture order."""
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        Column("order", "#", key_column=True),
        Column("bucket", "bucket", key_column=True),
        Column("device_used_delta_bytes", "device used +", _bytes, key_column=True),
        Column("pool_delta_bytes", "pool +", _bytes, drop=1),
        Column("pool_bytes", "pool", _bytes, drop=2),
        Column("non_torch_delta_bytes", "non-torch +", _bytes, drop=1),
        Column("segments", "graphs", drop=3),
        Column("graph_nodes", "nodes", drop=3),
    ]
    sheet = Sheet("rows", f"every bucket, {pred.label}", columns)
    for m in pred.modes:
        for r in m.buckets:
            sheet.rows.append(
                {
                    "mode": r.mode,
                    "order": r.order,
                    "bucket": r.bucket,
                    "device_used_delta_bytes": r.device_used_delta_bytes,
                    "pool_delta_bytes": r.pool_delta_bytes,
                    "pool_bytes": r.pool_bytes,
                    "non_torch_delta_bytes": r.non_torch_delta_bytes,
                    "segments": r.segments,
                    "graph_nodes": r.graph_nodes,
                }
            )
    return sheet


def prediction_view(pred: Prediction, rows: bool = False) -> View:
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        Column("device_used_bytes", "device used", _bytes, key_column=True),
        Column("low_bytes", "low", _bytes, key_column=True),
        Column("high_bytes", "high", _bytes, key_column=True),
        Column("pool_bytes", "graph pool", _bytes, drop=2),
        Column("non_torch_bytes", "non-torch", _bytes, drop=2),
    ]
    if pred.kind == "buckets":  # layer predictions extrapolate: never exact
        columns.append(Column("exact", "pool exact", _yes, numeric=False, drop=3))
    rooms = [m.needs_free for m in pred.modes if m.needs_free is not None]
    free = next((h.free_bytes for h in rooms if h.free_bytes is not None), None)
    if rooms:
        columns.insert(4, Column("needs_free_bytes", "needs free", _bytes, key_column=True))
    if free is not None:
        columns.insert(5, Column("at_free", "with --free", numeric=False, key_column=True))
    what = (
        f"at {pred.layers} layers"
        if pred.kind == "layers"
        else f"for {len(pred.bucket_list)} buckets {pred.bucket_list[0]}..{pred.bucket_list[-1]}"
    )
    sheet = Sheet(
        "predicted",
        f"{pred.model} on {pred.gpu or 'the profiled GPU'} {what}: {pred.label}",
        columns,
    )
    for m in pred.modes:
        sheet.rows.append(
            {
                "mode": m.mode,
                "device_used_bytes": m.device_used_bytes,
                "low_bytes": m.low_bytes,
                "high_bytes": m.high_bytes,
                "pool_bytes": m.pool_bytes,
                "non_torch_bytes": m.non_torch_bytes,
                "exact": m.exact,
                "needs_free_bytes": m.needs_free.needs_free_bytes if m.needs_free else None,
                "at_free": _at_free(m.needs_free),
            }
        )
    head = [Line(pred.label.upper(), STRONG), Line(f"from {', '.join(pred.basis)}")]
    foot = [Line(n, WARNING if TOO_WIDE in n else PLAIN, bullet=True) for n in pred.notes]
    sources: dict[str, list[str]] = {}  # one line per distinct source, naming its modes
    for m in pred.modes:
        if m.band_source:
            sources.setdefault(m.band_source, []).append(m.mode)
    foot += [
        Line(f"band of {', '.join(modes)}: {source}", bullet=True)
        for source, modes in sources.items()
    ]
    if rooms:
        foot.append(
            Line(
                "needs free: the free memory (NVML) the list needs when its first bucket's "
                "warm-up begins; "
                "each eager warm-up's cached blocks stay through the capture, which cannot "
                "release them, "
                f"and meet its pool growth and executables ({rooms[0].source})",
                bullet=True,
            )
        )
    if free is not None:
        foot.append(
            Line(
                f"--free {fmt_bytes(free)}: free (NVML) when the first bucket's warm-up begins; "
                "OOM at B "
                "(#k, capture): the capture of the k-th bucket cannot get its pool growth; "
                "warm-up: the "
                'warm-up runs short first, and "may pass" where the allocator may free enough; '
                "verify: "
                "`bcgprof capture`'s own check after the last bucket, an eager forward at the "
                "largest "
                "(needs free with it: "
                + ", ".join(
                    f"{m.mode} {fmt_bytes(m.needs_free.needs_free_with_verify_bytes)}"
                    for m in pred.modes
                    if m.needs_free
                )
                + "; --verify none skips it)",
                bullet=True,
            )
        )
    if pred.kind == "buckets":
        foot.append(
            Line(f"buckets: {','.join(map(str, pred.bucket_list))}", bullet=True, whole=True)
        )
    sheets = [sheet, prediction_rows_sheet(pred)] if rows else [sheet]
    return View(head=head, sheets=sheets, foot=foot, data=prediction_json(pred))


def _at_free(h: Optional[NeedsFree]) -> str:
    """A mode's outcome with --free: fits, or the first bucket that runs out and where."""
    if h is None or h.free_bytes is None:
        return "-"
    if h.first_oom is None:
        fits = "fits, within band" if h.fits_within_band else "fits"
        return {True: fits, False: f"{fits}; verify OOM", None: f"{fits}; verify may OOM"}[
            h.verify_fits
        ]
    how = h.first_oom_phase if h.first_oom_certain else f"{h.first_oom_phase}, may pass"
    return f"OOM at {h.first_oom.bucket} (#{h.first_oom.order + 1}, {how})"


# ---------------------------------------------------------------- advise


def advice_view(advice: Advice) -> View:
    columns = [
        Column("budget_bytes", "budget", _bytes, key_column=True),
        Column("expected_padding_pct", "expected padding", fmt_pct, key_column=True),
        Column("buckets", "buckets", key_column=True),
    ]
    curve = Sheet(
        "curve",
        "the trade-off: least expected padding for each budget (predicted)",
        columns,
        [{"budget_bytes": b, "expected_padding_pct": p, "buckets": n} for b, p, n in advice.curve],
    )
    chosen = Sheet(
        "advice",
        "the advised list: its band's top must fit the budget (predicted, not measured)",
        [
            Column("buckets", "buckets", key_column=True),
            Column("predicted_bytes", "device used", _bytes, key_column=True),
            Column("low_bytes", "low", _bytes, drop=2),
            Column("high_bytes", "band top", _bytes, key_column=True),
            Column("budget_bytes", "budget", _bytes, drop=2),
            Column("margin_bytes", "margin", _bytes, key_column=True),
            Column("needs_free_bytes", "needs free", _bytes, drop=1),
            *(
                [Column("free_margin_bytes", "free margin", _bytes, key_column=True)]
                if advice.free_bytes is not None
                else []
            ),
            Column("expected_padding_pct", "expected padding", fmt_pct, key_column=True),
            Column("exact", "pool exact", _yes, numeric=False, drop=3),
        ],
        [
            {
                "buckets": len(advice.buckets),
                "predicted_bytes": advice.predicted_bytes,
                "low_bytes": advice.low_bytes,
                "high_bytes": advice.high_bytes,
                "budget_bytes": advice.budget_bytes,
                "margin_bytes": advice.margin_bytes,
                "needs_free_bytes": advice.needs_free_bytes,
                "free_margin_bytes": advice.free_margin_bytes,
                "expected_padding_pct": advice.expected_padding_pct,
                "exact": advice.exact,
            }
        ],
    )
    free = f", free {fmt_bytes(advice.free_bytes)}" if advice.free_bytes is not None else ""
    need = ""
    if advice.needs_free_bytes is not None:
        need = f"; needs {fmt_bytes(advice.needs_free_bytes)} free" + (
            f", {fmt_bytes(advice.free_margin_bytes)} to spare"
            if advice.free_margin_bytes is not None
            else ""
        )
    head = [
        Line(
            f"{advice.mode}, budget {fmt_bytes(advice.budget_bytes)}{free}, lengths: "
            f"{advice.lengths_source}"
        ),
        Line(f": {advice.spec}", lead="--buckets", whole=True),
        Line(
            f"{len(advice.buckets)} buckets, predicted {fmt_bytes(advice.predicted_bytes)} (band "
            "top "
            f"{fmt_bytes(advice.high_bytes)}, margin {fmt_bytes(advice.margin_bytes)} below the "
            "budget; "
            f"predicted, not measured){need}, expected padding {advice.expected_padding_pct:.2f}%",
            STRONG,
        ),
    ]
    foot = [Line(n, WARNING, bullet=True) for n in advice.notes]
    if advice.band_source:
        foot.append(Line(f"band: {advice.band_source}", bullet=True))
    from bcgprof.analysis.predict.advise import advice_json

    return View(head=head, sheets=[chosen, curve], foot=foot, data=advice_json(advice))
