"""Output of `show`, `compare`, `gate` and `estimate`: rich tables, markdown, json and csv.

Each view is built once as a list of :class:`Sheet` (columns + raw row values) and
then drawn in the asked format: tables and markdown show MiB/GiB, json and csv keep
the integers. Nothing here decides anything; compare.py and gate.py do.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from rich.console import Console
from rich.table import Table

from bcgprof.compare import BOTH, NEW_ONLY, OLD_ONLY, Comparison
from bcgprof.estimate import Estimate
from bcgprof.gate import IMPROVEMENT, REGRESSION, GateResult
from bcgprof.report import Report, SummaryRecord
from bcgprof.report_format import (
    fmt_bytes, fmt_int, fmt_ms, fmt_pct, fmt_ratio, fmt_seconds,
)

FORMATS = ("table", "markdown", "json", "csv")
SECTIONS = ("all", "buckets", "summary")


@dataclass
class Column:
    key: str  # key of the raw value in each row, and the csv header
    header: str  # what tables and markdown show
    fmt: Callable[[Any], str] = str
    numeric: bool = True


@dataclass
class Sheet:
    name: str  # machine name of the section: buckets, summary, totals, ...
    title: str
    columns: list[Column]
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # printed under the table


def _bytes(n):
    return fmt_bytes(n)


def _delta(n):
    return fmt_bytes(n, signed=True)


# ---------------------------------------------------------------- drawing a sheet

def sheet_to_rich(sheet: Sheet) -> Table:
    table = Table(title=sheet.title, title_justify="left", header_style="bold")
    for c in sheet.columns:
        table.add_column(c.header, justify="right" if c.numeric else "left", no_wrap=c.numeric)
    for row in sheet.rows:
        cells = []
        for c in sheet.columns:
            text = _cell(row, c)
            style = row.get("_style")
            cells.append(f"[{style}]{_escape(text)}[/]" if style else _escape(text))
        table.add_row(*cells)
    return table


def _cell(row: dict, column: Column) -> str:
    """A row may override a column's format (the compare totals mix bytes, counts and seconds)."""
    fmt = row.get("_fmt", {}).get(column.key, column.fmt)
    return fmt(row.get(column.key))


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def sheet_to_markdown(sheet: Sheet, *, heading: str = "###") -> str:
    lines = [f"{heading} {sheet.title}", ""] if sheet.title else []
    lines.append("| " + " | ".join(c.header for c in sheet.columns) + " |")
    lines.append("| " + " | ".join("---:" if c.numeric else "---" for c in sheet.columns) + " |")
    for row in sheet.rows:
        lines.append("| " + " | ".join(_cell(row, c).replace("|", r"\|") for c in sheet.columns) + " |")
    if not sheet.rows:
        lines.append("| " + " | ".join("" for _ in sheet.columns) + " |")
    for note in sheet.notes:
        lines.extend(["", f"- {note}"])
    return "\n".join(lines) + "\n"


def sheets_to_csv(sheets: list[Sheet]) -> str:
    """One CSV block of raw values per sheet; with several, each starts with ``# name`` and a blank line separates them."""
    blocks = []
    for sheet in sheets:
        buf = io.StringIO()
        if len(sheets) > 1:
            buf.write(f"# {sheet.name}\n")
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c.key for c in sheet.columns])
        for row in sheet.rows:
            writer.writerow(["" if row.get(c.key) is None else row.get(c.key) for c in sheet.columns])
        blocks.append(buf.getvalue())
    return "\n".join(blocks)


def render_sheets(sheets: list[Sheet], fmt: str, console: Console, *, preamble: list[str] = (),
                  epilogue: list[str] = ()) -> None:
    """Draw sheets as rich tables (with preamble/epilogue lines) or as markdown/csv text."""
    if fmt == "table":
        for line in preamble:
            console.print(line, highlight=False)
        for sheet in sheets:
            console.print(sheet_to_rich(sheet))
            for note in sheet.notes:
                console.print(f"  {_escape(note)}", highlight=False)
        for line in epilogue:
            console.print(line, highlight=False)
    elif fmt == "markdown":
        parts = [line + "\n" for line in preamble] + [sheet_to_markdown(s) for s in sheets]
        parts += [line + "\n" for line in epilogue]
        _write(console, "\n".join(parts))
    elif fmt == "csv":
        _write(console, sheets_to_csv(sheets))
    else:
        raise ValueError(f"unknown format {fmt!r}")


def _write(console: Console, text: str) -> None:
    # Plain text, exactly as produced: no markup, wrapping or highlighting.
    console.file.write(text)
    console.file.flush()


def write_json(console: Console, data: Any) -> None:
    _write(console, json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------- show

def _multi_rank(report: Report) -> bool:
    return any(r.rank != 0 for r in report.buckets)


def _headline_rank(summary: list[SummaryRecord]) -> str:
    """Rank 0 for single-GPU runs, the per-mode worst rank ('max') for tensor-parallel ones."""
    return "max" if any(s.rank == "max" for s in summary) else "0"


def run_line(report: Report) -> str:
    run = report.run
    buckets = run.buckets
    span = f"{len(buckets)} buckets {buckets[0]}..{buckets[-1]}" if buckets else "no buckets"
    what = "tokens" if run.phase == "prefill" else "batch sizes"
    gpu = run.gpu_name or "unknown GPU"
    tp = f", TP {run.tp}" if run.tp and run.tp > 1 else ""
    return (f"{run.model} ({run.layers} layers, {run.dtype or '?'}, {run.weights} weights) {run.phase}: "
            f"{span} ({what}){tp} on {gpu}; torch {run.torch_version or '?'}, CUDA {run.cuda_version or '?'}; "
            f"status {run.status}")


def _bucket_columns(report: Report) -> list[Column]:
    multi = _multi_rank(report)
    any_nodes = any(r.graph_nodes is not None for r in report.buckets)
    any_diff = any(r.replay_max_abs_diff is not None for r in report.buckets)
    columns = [Column("mode", "mode", numeric=False)] + ([Column("rank", "rank")] if multi else []) + [
        Column("order", "#"), Column("bucket", "bucket"), Column("status", "status", numeric=False),
        Column("segments", "segments"),
    ] + ([Column("graph_nodes", "graph nodes", fmt_int)] if any_nodes else []) + [
        Column("pool_bytes", "pool", _bytes),
        Column("pool_delta_bytes", "pool Δ", _delta),
        Column("device_used_delta_bytes", "device-used Δ", _delta),
        Column("non_torch_delta_bytes", "non-torch Δ", _delta),
        Column("retained_output_bytes", "retained output", _bytes),
        Column("peak_transient_bytes", "peak transient", _bytes),
        Column("warmup_ms", "warm-up", fmt_ms),
        Column("capture_ms", "capture", fmt_ms),
    ] + ([Column("replay_max_abs_diff", "replay diff", lambda v: "-" if v is None else f"{v:.3g}")] if any_diff else [])
    return columns


def bucket_sheets(report: Report) -> list[Sheet]:
    """One sheet per mode (and rank), rows in capture order."""
    multi = _multi_rank(report)
    columns = _bucket_columns(report)
    groups: dict[tuple[str, int], list] = {}
    for r in report.buckets:
        groups.setdefault((r.mode, r.rank), []).append(r)
    sheets = []
    for (mode, rank), rows in groups.items():
        rows = sorted(rows, key=lambda r: r.order)
        title = f"{mode}" + (f" rank {rank}" if multi else "") + " (capture order)"
        sheet = Sheet("buckets", title, [c for c in columns if c.key != "mode"])
        for r in rows:
            row = dataclasses.asdict(r)
            if r.status != "ok":
                row["_style"] = "red"
                sheet.notes.append(f"bucket {r.bucket}: {r.status}" + (f": {r.detail}" if r.detail else ""))
            sheet.rows.append(row)
        sheets.append(sheet)
    return sheets


def summary_sheet(report: Report) -> Sheet:
    multi = _multi_rank(report)
    columns = [Column("mode", "mode", numeric=False)] + ([Column("rank", "rank", numeric=False)] if multi else []) + [
        Column("buckets", "buckets ok"), Column("failed", "failed"), Column("segments", "segments"),
        Column("pool_bytes", "pool", _bytes),
        Column("torch_reserved_bytes", "torch reserved", _bytes),
        Column("device_used_bytes", "device used", _bytes),
        Column("non_torch_bytes", "non-torch", _bytes),
        Column("retained_output_bytes", "retained output", _bytes),
        Column("peak_transient_bytes", "peak transient", _bytes),
        Column("capture_s", "capture time", fmt_seconds),
        Column("saved_vs_per_bucket_bytes", "saved vs per-bucket", _bytes),
        Column("saved_vs_per_bucket_pct", "saved %", fmt_pct),
        Column("ratio_to_floor", "× floor", fmt_ratio),
    ]
    rows = [dataclasses.asdict(s) for s in report.summary]
    return Sheet("summary", "summary (savings and floor ratios on device used)", columns, rows)


def verdict_line(report: Report) -> str:
    """One sentence: what sharing saved and how far each mode is from the floor; '' when nothing to compare."""
    rank = _headline_rank(report.summary)
    by_mode = {s.mode: s for s in report.summary if s.rank == rank}
    parts = []
    shared = by_mode.get("shared")
    if shared is not None and shared.saved_vs_per_bucket_bytes is not None:
        pct = f" ({shared.saved_vs_per_bucket_pct:.1f}%)" if shared.saved_vs_per_bucket_pct is not None else ""
        verb = "saves" if shared.saved_vs_per_bucket_bytes >= 0 else "costs"
        parts.append(f"sharing the output buffer {verb} {fmt_bytes(abs(shared.saved_vs_per_bucket_bytes))}{pct} "
                     f"of device memory against per-bucket")
        per_bucket = by_mode["per-bucket"]
        ok_counts = (shared.buckets, per_bucket.buckets)
        if shared.failed or per_bucket.failed or ok_counts[0] != ok_counts[1]:
            # Totals over different bucket sets are not a like-for-like saving.
            parts[-1] += (f" (not like for like: shared has {ok_counts[0]} buckets ok, "
                          f"per-bucket {ok_counts[1]})")
    ratios = [f"{m} {fmt_ratio(by_mode[m].ratio_to_floor)}" for m in ("per-bucket", "shared")
              if m in by_mode and by_mode[m].ratio_to_floor is not None]
    if ratios:
        parts.append("cost / floor: " + ", ".join(ratios))
    if not parts:
        return ""
    return ("worst rank: " if rank == "max" else "") + "; ".join(parts)


def report_json(report: Report) -> dict:
    return {
        "report": str(report.path),
        "run": dataclasses.asdict(report.run),
        "summary": [dataclasses.asdict(s) for s in report.summary],
        "buckets": [dataclasses.asdict(b) for b in report.buckets],
    }


def _partial_warning(report: Report) -> list[str]:
    if report.run.status == "complete":
        return []
    message = f" ({report.run.message})" if report.run.message else ""
    return [f"[yellow]this report is {report.run.status}{_escape(message)}: figures cover only the finished rows[/]"]


def show_report(report: Report, console: Console, fmt: str = "table", section: str = "all") -> None:
    """`bcgprof show`: per-mode bucket tables and the summary, in any of :data:`FORMATS`."""
    if fmt == "json":
        data = report_json(report)
        if section == "buckets":
            data.pop("summary")
        elif section == "summary":
            data.pop("buckets")
        write_json(console, data)
        return
    sheets = []
    if section in ("all", "buckets"):
        sheets += bucket_sheets(report)
    if section in ("all", "summary"):
        sheets.append(summary_sheet(report))
    if fmt == "csv":
        # One bucket block across modes (the rows carry their mode), then the summary.
        merged = []
        if section in ("all", "buckets"):
            rows = [r for sheet in bucket_sheets(report) for r in sheet.rows]
            merged.append(Sheet("buckets", "", _bucket_columns(report), rows))
        if section in ("all", "summary"):
            merged.append(summary_sheet(report))
        render_sheets(merged, "csv", console)
        return
    verdict = verdict_line(report)
    render_sheets(sheets, fmt, console,
                  preamble=[f"[bold]{_escape(str(report.path))}[/]: {_escape(run_line(report))}"
                            if fmt == "table" else f"**{report.path}**: {run_line(report)}"]
                  + (_partial_warning(report) if fmt == "table" else
                     [f"**{report.run.status}**: figures cover only the finished rows"] if report.run.status != "complete" else []),
                  epilogue=[verdict] if verdict and section != "buckets" else [])


def print_report(report: Report, console: Console) -> None:
    """The tables `bcgprof capture` prints when it finishes (the verdict line is printed by the caller)."""
    render_sheets(bucket_sheets(report) + [summary_sheet(report)], "table", console,
                  preamble=_partial_warning(report))


# ---------------------------------------------------------------- compare

_TOTAL_FORMAT = {"segments": fmt_int, "capture_s": fmt_seconds}
_TOTAL_DELTA_FORMAT = {"segments": lambda v: "-" if v is None else f"{int(v):+d}",
                       "capture_s": lambda v: "-" if v is None else f"{v:+.2f} s"}


def _presence_text(presence: str, old_label: str = "OLD", new_label: str = "NEW") -> str:
    return {OLD_ONLY: f"only in {old_label}", NEW_ONLY: f"only in {new_label}"}.get(presence, "")


def totals_sheet(cmp: Comparison) -> Sheet:
    multi = cmp.multi_rank
    columns = [Column("mode", "mode", numeric=False)] + ([Column("rank", "rank", numeric=False)] if multi else []) + [
        Column("metric", "metric", numeric=False),
        Column("old", "old", fmt_bytes), Column("new", "new", fmt_bytes),
        Column("delta", "change", _delta), Column("pct", "change %", fmt_pct_signed),
    ]
    sheet = Sheet("totals", "per-mode totals", columns)
    for t in cmp.totals:
        if t.presence != BOTH:
            sheet.rows.append({"mode": t.mode, "rank": t.rank, "metric": _presence_text(t.presence),
                               "old": None, "new": None, "delta": None, "pct": None, "_style": "yellow"})
            continue
        for metric, change in t.changes.items():
            plain = _TOTAL_FORMAT.get(metric, fmt_bytes)
            signed = _TOTAL_DELTA_FORMAT.get(metric, lambda v: fmt_bytes(v, signed=True))
            sheet.rows.append({
                "mode": t.mode, "rank": t.rank, "metric": metric,
                "old": change.old, "new": change.new, "delta": change.delta, "pct": change.pct,
                "_fmt": {"old": plain, "new": plain, "delta": signed},
                "_style": _growth_style(change.delta) if metric != "capture_s" else None,
            })
    return sheet


def fmt_pct_signed(v) -> str:
    return fmt_pct(v, signed=True)


def _growth_style(delta) -> Optional[str]:
    if not delta:
        return None
    return "red" if delta > 0 else "green"


def compare_bucket_sheet(cmp: Comparison) -> Sheet:
    multi = cmp.multi_rank
    columns = [Column("mode", "mode", numeric=False)] + ([Column("rank", "rank")] if multi else []) + [
        Column("bucket", "bucket"),
        Column("status", "status", numeric=False),
        Column("old_pool_delta_bytes", "pool Δ old", _bytes),
        Column("new_pool_delta_bytes", "pool Δ new", _bytes),
        Column("pool_change_bytes", "pool change", _delta),
        Column("old_device_used_delta_bytes", "device-used Δ old", _bytes),
        Column("new_device_used_delta_bytes", "device-used Δ new", _bytes),
        Column("device_used_change_bytes", "device-used change", _delta),
        Column("device_used_change_pct", "change %", fmt_pct_signed),
    ]
    sheet = Sheet("buckets", "per-bucket deltas, largest device-used growth first", columns)
    for c in cmp.buckets:
        old, new = c.old, c.new
        if c.presence == BOTH:
            status = old.status if old.status == new.status else f"{old.status} -> {new.status}"
            pool, dev = c.changes["pool_delta_bytes"], c.changes["device_used_delta_bytes"]
            row = {"pool_change_bytes": pool.delta, "device_used_change_bytes": dev.delta,
                   "device_used_change_pct": dev.pct, "_style": _growth_style(dev.delta)}
        else:
            status = _presence_text(c.presence)
            row = {"pool_change_bytes": None, "device_used_change_bytes": None, "device_used_change_pct": None,
                   "_style": "yellow"}
        row.update({
            "mode": c.mode, "rank": c.rank, "bucket": c.bucket, "status": status,
            "old_pool_delta_bytes": old.pool_delta_bytes if old else None,
            "new_pool_delta_bytes": new.pool_delta_bytes if new else None,
            "old_device_used_delta_bytes": old.device_used_delta_bytes if old else None,
            "new_device_used_delta_bytes": new.device_used_delta_bytes if new else None,
        })
        sheet.rows.append(row)
    return sheet


def comparison_json(cmp: Comparison) -> dict:
    totals = []
    for t in cmp.totals:
        item = {"mode": t.mode, "rank": t.rank, "presence": t.presence}
        for metric, change in t.changes.items():
            item[metric] = {"old": change.old, "new": change.new, "delta": change.delta, "pct": change.pct}
        totals.append(item)
    buckets = []
    for c in cmp.buckets:
        item = {"mode": c.mode, "rank": c.rank, "bucket": c.bucket, "presence": c.presence,
                "old_status": c.old.status if c.old else None, "new_status": c.new.status if c.new else None}
        for metric in ("pool_delta_bytes", "device_used_delta_bytes", "non_torch_delta_bytes",
                       "retained_output_bytes", "peak_transient_bytes"):
            change = c.changes.get(metric)
            item[metric] = {"old": getattr(c.old, metric) if c.old else None,
                            "new": getattr(c.new, metric) if c.new else None,
                            "delta": change.delta if change else None}
        buckets.append(item)
    return {"old": str(cmp.old.path), "new": str(cmp.new.path), "differences": cmp.differences,
            "totals": totals, "buckets": buckets}


def show_comparison(cmp: Comparison, console: Console, fmt: str = "table", section: str = "all") -> None:
    """`bcgprof compare`: totals per mode, then per-bucket deltas (largest growth first)."""
    if fmt == "json":
        data = comparison_json(cmp)
        if section == "buckets":
            data.pop("totals")
        elif section == "summary":
            data.pop("buckets")
        write_json(console, data)
        return
    sheets = []
    if section in ("all", "summary"):
        sheets.append(totals_sheet(cmp))
    if section in ("all", "buckets"):
        sheets.append(compare_bucket_sheet(cmp))
    if fmt == "csv":
        render_sheets(sheets, "csv", console)
        return
    bold = (lambda s: f"[bold]{_escape(s)}[/]") if fmt == "table" else (lambda s: f"**{s}**")
    preamble = [f"OLD {bold(str(cmp.old.path))}: {_escape(run_line(cmp.old)) if fmt == 'table' else run_line(cmp.old)}",
                f"NEW {bold(str(cmp.new.path))}: {_escape(run_line(cmp.new)) if fmt == 'table' else run_line(cmp.new)}"]
    if cmp.differences:
        preamble.append(("[yellow]" if fmt == "table" else "") + "the reports differ: " + "; ".join(cmp.differences)
                        + ("[/]" if fmt == "table" else ""))
    render_sheets(sheets, fmt, console, preamble=preamble)


# ---------------------------------------------------------------- gate

def _check_value(check, attr: str) -> str:
    value = getattr(check, attr)
    if check.metric == "status":
        return "-"
    return fmt_bytes(value, signed=(attr == "delta"))


def gate_sheets(result: GateResult, *, all_rows: bool = True) -> list[Sheet]:
    multi = result.multi_rank
    columns = [Column("where", "mode / bucket", numeric=False), Column("metric", "metric", numeric=False),
               Column("baseline", "baseline"), Column("current", "current"), Column("delta", "change"),
               Column("pct", "change %"), Column("limit", "allowed growth"),
               Column("verdict", "verdict", numeric=False), Column("detail", "why", numeric=False)]
    totals = Sheet("totals", "mode totals" + (" per rank" if multi else ""), columns)
    flagged = Sheet("buckets", "buckets outside tolerance or failed", columns)
    for c in result.checks:
        row = {"where": c.where, "metric": c.metric, "baseline": _check_value(c, "baseline"),
               "current": _check_value(c, "current"), "delta": _check_value(c, "delta"),
               "pct": fmt_pct(c.pct, signed=True) if c.metric != "status" else "-",
               "limit": fmt_bytes(int(c.limit)) if c.limit is not None else "-",
               "verdict": c.verdict, "detail": c.detail,
               "_style": {REGRESSION: "red", IMPROVEMENT: "green"}.get(c.verdict)}
        if c.bucket is None and c.metric != "status":
            if all_rows or c.verdict != "pass":
                totals.rows.append(row)
        elif c.verdict != "pass":
            flagged.rows.append(row)
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


def _tolerance_line(result: GateResult) -> str:
    opts = result.options
    line = f"a growth fails when it exceeds both {opts.default.describe()}"
    if opts.per_metric:
        line += " (" + ", ".join(f"{m}: {t.describe()}" for m, t in sorted(opts.per_metric.items())) + ")"
    return line + ("; per-bucket figures checked" if opts.per_bucket else "; totals checked (add --per-bucket for buckets)")


def print_gate(result: GateResult, console: Console) -> None:
    console.print(f"baseline [bold]{_escape(str(result.baseline.path))}[/]: {_escape(run_line(result.baseline))}",
                  highlight=False)
    console.print(f"current  [bold]{_escape(str(result.current.path))}[/]: {_escape(run_line(result.current))}",
                  highlight=False)
    console.print(_escape(_tolerance_line(result)), highlight=False)
    for sheet in gate_sheets(result):
        console.print(sheet_to_rich(sheet))
    for note in result.notes:
        console.print(f"[yellow]note:[/] {_escape(note)}", highlight=False)
    style = "bold green" if result.passed else "bold red"
    console.print(f"[{style}]{_escape(gate_headline(result))}[/]", highlight=False)


def gate_markdown(result: GateResult) -> str:
    """The verdict and table appended to ``--summary-md`` (a CI job summary)."""
    lines = [f"## bcgprof gate: {'PASS' if result.passed else 'FAIL'}", "",
             f"**{gate_headline(result)}**", "",
             f"- baseline `{result.baseline.path}`: {run_line(result.baseline)}",
             f"- current `{result.current.path}`: {run_line(result.current)}",
             f"- {_tolerance_line(result)}", ""]
    out = "\n".join(lines) + "\n"
    for sheet in gate_sheets(result):
        out += sheet_to_markdown(sheet) + "\n"
    if result.notes:
        out += "Notes:\n\n" + "".join(f"- {n}\n" for n in result.notes) + "\n"
    return out


def gate_error_markdown(message: str) -> str:
    return f"## bcgprof gate: UNUSABLE INPUT\n\n{message}\n\n"


# ---------------------------------------------------------------- estimate

def estimate_sheet(est: Estimate) -> Sheet:
    rows_label = "tokens" if est.phase == "prefill" else "sequences"
    columns = [Column("bucket", "bucket"), Column("rows", f"rows ({rows_label})"),
               Column("output_bytes", "output buffer", _bytes), Column("cumulative", "per-bucket total so far", _bytes)]
    sheet = Sheet("estimate", f"output buffers, {est.label}", columns)
    running = 0
    for b in est.buckets:
        running += b.output_bytes
        sheet.rows.append({"bucket": b.bucket, "rows": b.rows, "output_bytes": b.output_bytes, "cumulative": running})
    return sheet


def print_estimate(est: Estimate, console: Console) -> None:
    console.print(f"[bold]{_escape(est.model)}[/]: {est.phase}, {len(est.buckets)} buckets, hidden size "
                  f"{est.hidden_size}, {est.dtype} ({est.dtype_bytes} bytes); output = rows x hidden size x dtype bytes",
                  highlight=False)
    console.print(sheet_to_rich(estimate_sheet(est)))
    console.print(f"retained outputs, per-bucket mode: {fmt_bytes(est.per_bucket_total_bytes)} "
                  f"({est.per_bucket_total_bytes} bytes, the sum over buckets)", highlight=False)
    console.print(f"retained outputs, shared mode:     {fmt_bytes(est.shared_total_bytes)} "
                  f"({est.shared_total_bytes} bytes, one buffer of the largest bucket)", highlight=False)
    console.print(f"difference: {fmt_bytes(est.saved_bytes)} ({est.saved_pct:.1f}%)", highlight=False)
    console.print(f"[bold yellow]{est.label}[/]: outputs only; intermediates, graph executables and allocator "
                  "rounding are not included; `bcgprof capture` measures them on a GPU", highlight=False)
