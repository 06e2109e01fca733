"""View models of `show`, `gate`, `estimate` and a finished `capture` (`compare`'s are in
compare_views.py).

Each function turns a report (or a gate result, an estimate) into a
:class:`~bcgprof.render.model.View`; the renderers draw it. Nothing here decides
anything: gate.py does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from bcgprof.analysis.predict.needs_free import measured_needs_free_bytes
from bcgprof.render.model import BAD, GOOD, STRONG, WARNING, Column, Line, Sheet, View
from bcgprof.render.phase_views import phase_lines, phase_sheet
from bcgprof.render.recorded_views import recorded_lines
from bcgprof.report import SUMMARY_RECOMPUTED, BucketRecord, Report, SummaryRecord, records_to_csv
from bcgprof.report.schema import run_info_dict
from bcgprof.report_format import fmt_bytes, fmt_int, fmt_ms, fmt_pct, fmt_ratio, fmt_seconds
from bcgprof.vocab import Executables, Experts, ListMode, Mode, Moe, Source, words

if TYPE_CHECKING:
    from bcgprof.analysis.estimate import Estimate
    from bcgprof.analysis.gate import GateCheck, GateResult
    from bcgprof.analysis.phases import PhasePool
# The gate and explain modules are imported by the views that draw them, so that `show` loads
# none of them (compare's views: compare_views.py).

WIDE_HINT = "--wide shows every column; -f csv or -f json gives every figure"
GATE_HINT = "a wider terminal, or --summary-md, shows every column"


def _bytes(n) -> str:
    return fmt_bytes(n)


def _delta(n) -> str:
    return fmt_bytes(n, signed=True)


def _pct_signed(v) -> str:
    return fmt_pct(v, signed=True)


def _blank(_) -> str:
    return ""


def _diff(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _rank_text(rank) -> str:
    """Ranks are strings in every JSON document: "0", "1", ... or "max"/"sum" for the summary's
    cross-rank rows."""
    return str(rank)


# ---------------------------------------------------------------- report


def multi_rank(report: Report) -> bool:
    return any(r.rank != 0 for r in report.buckets) or report.run.tp > 1


def run_line(report: Report) -> str:
    run = report.run
    buckets = run.buckets
    span = f"{len(buckets)} buckets {buckets[0]}..{buckets[-1]}" if buckets else "no buckets"
    what = "tokens" if run.phase == "prefill" else "batch sizes"
    phase = run.phase
    if run.phased:  # several phases in one pool: each one's list
        phase = " then ".join(run.phases) + " in one pool"
        lists = [(p, run.phase_buckets[p]) for p in run.phases]
        span = ", ".join(f"{p} {len(b)} buckets {min(b)}..{max(b)}" for p, b in lists)
        what = "tokens, batch sizes" if set(run.phases) == {"prefill", "decode"} else what
    gpu = run.gpu_name or "unknown GPU"
    tp = f", TP {run.tp}" if run.tp and run.tp > 1 else ""
    experts = f", {run.experts} experts" if run.experts != Experts.BF16 else ""
    experts += f", {run.moe} MoE" if run.moe != Moe.FUSED_BF16 else ""
    experts += (
        f", {run.executables} executables" if run.executables != Executables.PER_SEGMENT else ""
    )
    # a program's own capture: no layers, dtype or weights of bcgprof's
    if run.source == Source.RECORD:
        return (
            f"recorded: {run.model}: {span} in {', '.join(run.modes)}{tp} on {gpu}; torch "
            f"{run.torch_version or '?'}, CUDA {run.cuda_version or '?'}; status {run.status}"
        )
    # only what differs from how the committed reports were measured is named
    warm = "; warm-up outputs freed" if run.warmup_outputs_freed else ""
    return (
        f"{run.model} ({run.layers} layers, {run.dtype or '?'}, {run.weights} "
        f"weights{experts}{warm}) "
        f"{phase}: "
        f"{span} ({what}){tp} on {gpu}; torch {run.torch_version or '?'}, CUDA "
        f"{run.cuda_version or '?'}; "
        f"status {run.status}"
    )


def bucket_columns(report: Report) -> list[Column]:
    """Columns of the per-mode bucket tables: the key figures by default, everything with --wide."""
    any_nodes = any(r.graph_nodes is not None for r in report.buckets)
    any_diff = any(r.replay_max_abs_diff is not None for r in report.buckets)
    any_process = any(r.process_used_delta_bytes is not None for r in report.buckets)
    any_peak = any(r.device_peak_delta_bytes is not None for r in report.buckets)
    any_free = any(r.free_bytes is not None for r in report.buckets)
    return [
        Column("order", "#", key_column=True),
        Column("bucket", "bucket", key_column=True),
        Column("status", "status", numeric=False, key_column=True),
        Column("segments", "segments", wide=True),
        *([Column("graph_nodes", "graph nodes", fmt_int, wide=True)] if any_nodes else []),
        Column("pool_bytes", "pool", _bytes, key_column=True),
        Column("pool_delta_bytes", "pool Δ", _delta, key_column=True),
        Column("device_used_delta_bytes", "device-used Δ", _delta, key_column=True),
        Column("non_torch_delta_bytes", "non-torch Δ", _delta, drop=2),
        Column("retained_output_bytes", "retained output", _bytes, drop=1),
        Column("peak_transient_bytes", "peak transient", _bytes, drop=3),
        Column("torch_reserved_delta_bytes", "torch reserved Δ", _delta, wide=True),
        *(
            [Column("process_used_delta_bytes", "process-used Δ", _delta, wide=True)]
            if any_process
            else []
        ),
        *(
            [Column("device_peak_delta_bytes", "device peak Δ", _delta, wide=True)]
            if any_peak
            else []
        ),
        *([Column("free_bytes", "free after", _bytes, wide=True)] if any_free else []),
        Column("warmup_ms", "warm-up", fmt_ms, wide=True),
        Column("capture_ms", "capture", fmt_ms, wide=True),
        *([Column("replay_max_abs_diff", "replay diff", _diff, wide=True)] if any_diff else []),
    ]


def bucket_sheets(report: Report) -> list[Sheet]:
    """One sheet per mode (and phase, of several in one pool, and rank), rows in capture order."""
    multi = multi_rank(report)
    columns = bucket_columns(report)
    groups: dict[tuple[str, str, int], list[BucketRecord]] = {}
    for r in report.buckets:
        groups.setdefault((r.mode, r.phase, r.rank), []).append(r)
    sheets = []
    for (mode, phase, rank), rows in groups.items():
        rows = sorted(rows, key=lambda r: r.order)
        title = (
            f"{mode}"
            + (f" {phase}, in one pool with the other phases" if phase else "")
            + (f" rank {rank}" if multi else "")
            + " (capture order)"
        )
        sheet = Sheet("buckets", title, columns)
        for r in rows:
            # a flat record: asdict's result, without its deep copy (100,000 rows)
            row = dict(vars(r))
            if r.status != "ok":
                row["_style"] = "red"
                sheet.notes.append(
                    f"bucket {r.bucket}: {r.status}" + (f": {r.detail}" if r.detail else "")
                )
            sheet.rows.append(row)
        sheets.append(sheet)
    return sheets


def summary_sheet(report: Report) -> Sheet:
    multi = multi_rank(report)
    any_failed = any(s.failed for s in report.summary)
    columns = [
        Column("mode", "mode", numeric=False, key_column=True),
        *([Column("rank", "rank", numeric=False, key_column=True)] if multi else []),
        Column("buckets", "buckets ok", drop=4),
        Column("failed", "failed", wide=not any_failed, drop=4),
        Column("segments", "segments", wide=True),
        Column("pool_bytes", "pool", _bytes, key_column=True),
        Column("torch_reserved_bytes", "torch reserved", _bytes, wide=True),
        Column("device_used_bytes", "device used", _bytes, key_column=True),
        Column("non_torch_bytes", "non-torch", _bytes, wide=True),
        Column("retained_output_bytes", "retained output", _bytes, drop=3),
        Column("peak_transient_bytes", "peak transient", _bytes, wide=True),
        Column("capture_s", "warm-up + capture", fmt_seconds, wide=True),
        Column("needs_free_bytes", "needs free", _bytes, wide=True),
        Column("saved_vs_per_bucket_bytes", "saved vs per-bucket", _bytes, key_column=True),
        Column("saved_vs_per_bucket_pct", "saved %", fmt_pct, drop=2),
        Column("ratio_to_floor", "× floor", fmt_ratio, drop=1),
    ]
    rows = []
    needs = needs_free(report)
    for s in report.summary:
        row = dict(vars(s))
        row["needs_free_bytes"] = needs.get((s.mode, s.rank))
        if s.mode == Mode.FLOOR:
            # The floor is the reference, not a third option: no saving to show.
            row["_fmt"] = {"saved_vs_per_bucket_bytes": _blank, "saved_vs_per_bucket_pct": _blank}
        rows.append(row)
    title = "summary (savings and floor ratios on device used)"
    sheet = Sheet("summary", title, columns, rows)
    if report.summary_source == SUMMARY_RECOMPUTED:
        sheet.notes.append(f"summary {SUMMARY_RECOMPUTED} (the report is {report.run.status})")
    said = [
        f"{s.mode} needs {fmt_bytes(needs[(s.mode, s.rank)])} free, keeps "
        f"{fmt_bytes(s.device_used_bytes)}"
        for s in report.summary
        if needs.get((s.mode, s.rank)) is not None
    ]
    if said:
        sheet.notes.append(
            "; ".join(said) + " (free when the first bucket's warm-up begins, measured: each "
            "bucket's NVML peak above what earlier buckets kept; a warm-up's cached blocks stay "
            "through its capture)"
        )
        # a capture's option
        if not report.run.warmup_outputs_freed and report.run.source != Source.RECORD:
            sheet.notes.append(
                "each warm-up run's output was held through the next run; an engine that frees it, "
                "as SGLang does, can need less free memory (its peaks differ): --warmup-output "
                "freed measures that"
            )
    return sheet


def needs_free(report: Report) -> dict[tuple[str, str], Optional[int]]:
    """(mode, rank) -> the free memory the mode's capture needed (measured; None where unknown)."""
    groups: dict[tuple[str, str], list[BucketRecord]] = {}
    for r in report.buckets:
        groups.setdefault((r.mode, str(r.rank)), []).append(r)
    return {key: measured_needs_free_bytes(rows) for key, rows in groups.items()}


def _headline_rank(summary: list[SummaryRecord]) -> str:
    """Rank 0 for single-GPU runs, the per-mode worst rank ('max') for tensor-parallel ones."""
    return "max" if any(s.rank == "max" for s in summary) else "0"


def verdict_line(report: Report) -> str:
    """One sentence: what each way of handling outputs costs against per-bucket outputs, which
    mode is cheapest on this bucket list, and how far each is from the floor; '' when nothing
    to compare."""
    rank = _headline_rank(report.summary)
    by_mode = {s.mode: s for s in report.summary if s.rank == rank}
    parts = []
    per_bucket = by_mode.get(Mode.PER_BUCKET)
    names = {
        Mode.SHARED: "the shared buffer",
        Mode.SHARED_LARGEST: "the largest bucket's output as the shared buffer",
    }
    for mode, name in names.items():
        s = by_mode.get(mode)
        if s is None or s.saved_vs_per_bucket_bytes is None:
            continue
        # the summary table's own rounding (fmt_pct), so that the sentence and the table agree
        pct = (
            f" ({fmt_pct(abs(s.saved_vs_per_bucket_pct))})"
            if s.saved_vs_per_bucket_pct is not None
            else ""
        )
        saved = s.saved_vs_per_bucket_bytes
        # summarize sets a saving only against a per-bucket row of the same rank
        if per_bucket is None:
            raise ValueError(
                f"mode {mode} rank {rank} has a saving against per-bucket outputs, "
                "but the summary has no per-bucket row for that rank"
            )
        text = (
            f"{name} saves {fmt_bytes(saved)}{pct} against per-bucket outputs"
            if saved >= 0
            else f"{name} costs {fmt_bytes(-saved)}{pct} more than per-bucket outputs"
        )
        if s.failed or per_bucket.failed or s.buckets != per_bucket.buckets:
            # Totals over different bucket sets are not a like-for-like saving.
            text += (
                f" (not like for like: {mode} has {s.buckets} buckets ok, per-bucket "
                f"{per_bucket.buckets})"
            )
        parts.append(text)
    # the cheapest way to capture this list: among modes that captured all of it
    most = max((s.buckets for m, s in by_mode.items() if m != Mode.FLOOR), default=0)
    options = {
        m: s for m, s in by_mode.items() if m != Mode.FLOOR and not s.failed and s.buckets == most
    }
    if len(options) > 1:
        ranked = sorted(options.values(), key=lambda s: s.device_used_bytes)
        best, runner_up = ranked[0], ranked[1]
        parts.insert(
            0,
            f"on this bucket list {best.mode} is cheapest, "
            f"{fmt_bytes(runner_up.device_used_bytes - best.device_used_bytes)} under "
            f"{runner_up.mode}",
        )
    ratios = [
        f"{m} {fmt_ratio(by_mode[m].ratio_to_floor)}"
        for m in words(ListMode)
        if m in by_mode and by_mode[m].ratio_to_floor is not None
    ]
    if ratios:
        parts.append("cost / floor: " + ", ".join(ratios))
    if not parts:
        return ""
    return ("worst rank: " if rank == "max" else "") + "; ".join(parts)


def _status_lines(report: Report) -> list[Line]:
    if report.run.status == "complete":
        return []
    message = f" ({report.run.message})" if report.run.message else ""
    return [
        Line(
            f"this report is {report.run.status}{message}: figures cover only the finished rows; "
            f"summary {SUMMARY_RECOMPUTED}",
            WARNING,
        )
    ]


def _record_json(record, phased: bool = True) -> dict:
    data = dict(vars(record))  # a flat record: asdict's result, without its deep copy
    data["rank"] = _rank_text(data["rank"])
    if not phased:  # a one-phase report's rows have no phase
        data.pop("phase", None)
    return data


def report_json(
    report: Report, section: str = "all", phases: Optional[list[PhasePool]] = None
) -> dict:
    needs = needs_free(report)
    phased = report.run.phased
    data = {
        "report": str(report.path),
        "summary_source": report.summary_source,
        "run": run_info_dict(report.run),
        "summary": [
            dict(_record_json(s), needs_free_bytes=needs.get((s.mode, s.rank)))
            for s in report.summary
        ],
        "buckets": [_record_json(b, phased) for b in report.buckets],
    }
    if phases is not None and section != "buckets":
        data["phases_in_one_pool"] = [p.to_json() for p in phases]
    if section == "buckets":
        data.pop("summary")
    elif section == "summary":
        data.pop("buckets")
    return data


def report_csv(report: Report, section: str = "all") -> str:
    """The report's own files: buckets.csv's and summary.csv's columns, order and values."""
    buckets = records_to_csv(report.buckets, BucketRecord, report.columns.get("buckets"))
    summary = records_to_csv(report.summary, SummaryRecord, report.columns.get("summary"))
    if section == "buckets":
        return buckets
    if section == "summary":
        return summary
    return f"# buckets\n{buckets}\n# summary\n{summary}"


def show_view(
    report: Report,
    section: str = "all",
    *,
    tables: bool = True,
    phases: Optional[list[PhasePool]] = None,
) -> View:
    """`bcgprof show`: per-mode bucket tables and the summary (``tables=False``: no tables, for
    output drawn from the view's data or csv text alone); for several phases in one pool,
    ``phases``: the pool of the pair against each phase alone."""
    sheets = []
    if tables and section in ("all", "buckets"):
        sheets += bucket_sheets(report)
    if tables and section in ("all", "summary"):
        sheets.append(summary_sheet(report))
        if phases:
            sheets.append(phase_sheet(phases))
    verdict = verdict_line(report)
    foot = [Line(verdict)] if verdict and section != "buckets" else []
    if phases and section != "buckets":
        foot += phase_lines(phases)
    if section != "buckets":
        foot += recorded_lines(report)
    return View(
        head=[Line(f": {run_line(report)}", lead=str(report.path))] + _status_lines(report),
        sheets=sheets,
        foot=foot,
        make_data=lambda: report_json(report, section, phases),
        make_csv=lambda: report_csv(report, section),
        hint=WIDE_HINT,
    )


def report_tables_view(report: Report) -> View:
    """The tables of a finished capture (no run line, no verdict)."""
    return View(
        head=_status_lines(report),
        sheets=bucket_sheets(report) + [summary_sheet(report)],
        hint=WIDE_HINT,
    )


def capture_view(report: Report, phases: Optional[list[PhasePool]] = None) -> View:
    """What a finished capture shows: its tables, the verdict and where the report is (and, for
    several phases in one pool, ``phases``: the pair against each phase alone)."""
    view = report_tables_view(report)
    verdict = verdict_line(report)
    view.foot = ([Line(verdict)] if verdict else []) + [Line(f": {report.path}", lead="report")]
    if phases:
        view.sheets.append(phase_sheet(phases))
        view.foot[:0] = phase_lines(phases)
    view.data = report_json(report, phases=phases)
    return view


# ---------------------------------------------------------------- gate


def _check_value(check: GateCheck, attr: str) -> str:
    if check.metric == "status":
        if attr == "delta":
            return "-"
        status = check.baseline_status if attr == "baseline" else check.current_status
        if check.bucket is None:  # a whole mode missing
            return "rows" if attr == "baseline" else "no rows"
        return "no row" if status is None else status
    return fmt_bytes(getattr(check, attr), signed=(attr == "delta"))


def gate_sheets(result: GateResult, *, all_rows: bool = True) -> list[Sheet]:
    from bcgprof.analysis.tolerance import IMPROVEMENT, PASS, REGRESSION

    columns = [
        Column("where", "mode / bucket", numeric=False, key_column=True),
        Column("metric", "metric", numeric=False, key_column=True),
        Column("baseline", "baseline", drop=3),
        Column("current", "current", drop=3),
        Column("delta", "change", key_column=True),
        Column("pct", "change %", drop=2),
        Column("limit", "allowed growth", drop=4),
        Column("verdict", "verdict", numeric=False, key_column=True),
        Column("detail", "why", numeric=False, drop=5),
    ]
    totals = Sheet("totals", "mode totals" + (" per rank" if result.multi_rank else ""), columns)
    flagged = Sheet("buckets", "buckets outside tolerance or failed", columns)
    for c in result.checks:
        is_total = c.bucket is None and c.metric != "status"
        if c.verdict == PASS and not (is_total and all_rows):
            continue  # not shown: format only the rows that are (a gate may judge 200,000 figures)
        row = {
            "where": c.where,
            "metric": c.metric,
            "baseline": _check_value(c, "baseline"),
            "current": _check_value(c, "current"),
            "delta": _check_value(c, "delta"),
            "pct": fmt_pct(c.pct, signed=True) if c.metric != "status" else "-",
            "limit": fmt_bytes(int(c.limit)) if c.limit is not None else "-",
            "verdict": c.verdict,
            "detail": c.detail,
            "_style": {REGRESSION: "red", IMPROVEMENT: "green"}.get(c.verdict),
        }
        (totals if is_total else flagged).rows.append(row)
    return [totals] + ([flagged] if flagged.rows else [])


def gate_headline(result: GateResult) -> str:
    n_reg, n_imp = len(result.regressions), len(result.improvements)
    if result.passed:
        text = "PASS: no memory regression"
    else:
        worst = result.worst()
        text = f"FAIL: {n_reg} regression{'s' if n_reg != 1 else ''}"
        if worst is not None:
            what = worst.where if worst.metric == "status" else f"{worst.where} {worst.metric}"
            text += f"; worst: {what}: {worst.detail}"
    if n_imp:
        text += f" ({n_imp} improvement{'s' if n_imp != 1 else ''})"
    return text


def tolerance_line(result: GateResult) -> str:
    opts = result.options
    line = f"a growth fails when it exceeds both {opts.default.describe()}"
    if opts.per_metric:
        line += (
            " ("
            + ", ".join(f"{m}: {t.describe()}" for m, t in sorted(opts.per_metric.items()))
            + ")"
        )
    return line + (
        "; totals and each bucket's figures checked"
        if opts.each_bucket
        else "; totals checked (add --each-bucket for buckets)"
    )


def bucket_checks_line(result: GateResult) -> str:
    """With --each-bucket: how many bucket figures the gate judged and how many passed (''
    without)."""
    from bcgprof.analysis.tolerance import BUCKET_METRICS, REGRESSION

    if not result.options.each_bucket:
        return ""
    checks = [c for c in result.checks if c.bucket is not None and c.metric in BUCKET_METRICS]
    failed = sum(c.verdict == REGRESSION for c in checks)
    line = (
        f"bucket figures (pool and device-used deltas): {len(checks):,} checked, "
        f"{len(checks) - failed:,} passed"
    )
    return line + (f", {failed:,} failed" if failed else "")


def gate_view(result: GateResult) -> View:
    head = [
        Line(
            f": {run_line(result.baseline)}", lead=f"baseline {result.baseline.path}", bullet=True
        ),
        Line(f": {run_line(result.current)}", lead=f"current  {result.current.path}", bullet=True),
        Line(tolerance_line(result), bullet=True),
    ]
    if result.options.each_bucket:
        head.append(Line(bucket_checks_line(result), bullet=True))
    foot = [Line(f": {n}", WARNING, lead="note", bullet=True) for n in result.notes]
    return View(
        head=head,
        sheets=gate_sheets(result),
        foot=foot,
        title=f"bcgprof gate: {'PASS' if result.passed else 'FAIL'}",
        headline=Line(gate_headline(result), GOOD if result.passed else BAD),
        hint=GATE_HINT,
        make_data=result.to_json,
    )


# ---------------------------------------------------------------- estimate


def estimate_sheet(est: Estimate) -> Sheet:
    rows_label = "tokens" if est.phase == "prefill" else "sequences"
    columns = [
        Column("bucket", "bucket", key_column=True),
        Column("rows", f"rows ({rows_label})"),
        Column("output_bytes", "output buffer", _bytes, key_column=True),
        Column("cumulative", "per-bucket total so far", _bytes),
    ]
    sheet = Sheet("estimate", f"output buffers, {est.label}", columns)
    running = 0
    for b in est.buckets:
        running += b.output_bytes
        sheet.rows.append(
            {
                "bucket": b.bucket,
                "rows": b.rows,
                "output_bytes": b.output_bytes,
                "cumulative": running,
            }
        )
    return sheet


def estimate_view(est: Estimate) -> View:
    head = [
        Line(
            f": {est.phase}, {len(est.buckets)} buckets, hidden size {est.hidden_size}, "
            f"{est.dtype} "
            f"({est.dtype_bytes} bytes); output = rows x hidden size x dtype bytes",
            lead=est.model,
        )
    ]
    foot = [
        Line(
            f"retained outputs, per-bucket mode: {fmt_bytes(est.per_bucket_total_bytes)} "
            f"({est.per_bucket_total_bytes} bytes, the sum over buckets)"
        ),
        Line(
            f"retained outputs, shared mode:     {fmt_bytes(est.shared_total_bytes)} "
            f"({est.shared_total_bytes} bytes, one buffer of the largest bucket)"
        ),
        Line(
            f"output bytes per-bucket mode retains beyond shared: {fmt_bytes(est.saved_bytes)}. "
            "This is not the "
            "expected saving: the graph pool reuses memory across buckets, so the device memory "
            "that sharing "
            "saves is measured by `bcgprof capture` and can be much smaller"
        ),
        Line(
            f"{est.label}: outputs only; intermediates, graph executables and allocator rounding "
            "are not "
            "included",
            STRONG,
        ),
    ]
    return View(head=head, sheets=[estimate_sheet(est)], foot=foot, data=est.to_json())
