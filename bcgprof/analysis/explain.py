"""`bcgprof explain`: where every byte of a capture went, from a report's own measurements.

Pure functions over a :class:`~bcgprof.report.Report`; nothing here measures or prints.

* The ledger: each mode's device-used bytes split into causes that sum to it exactly
  (integers): outputs kept in the graph pool, other live pool bytes, free space held
  inside the pool, torch memory outside the pool (a shared output buffer, library
  workspaces), and what NVML sees beyond torch (graph executables and other driver
  memory).
* The graph executables: a least-squares fit of the buckets' non-torch growth to their
  graph (segment) and kernel-node counts, with its residual and what it explains.
* The floor: what the largest bucket's pool held at its peak, by model code site, and
  the allocator slack beside it (from sites.csv).
* Plain sentences built from those numbers, and each mode's cost in tokens of KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from bcgprof import dtypes
from bcgprof.analysis.causes import CAUSES, causes_of
from bcgprof.errors import BcgprofError
from bcgprof.options import mode_index
from bcgprof.report import BucketRecord, Report
from bcgprof.report_format import fmt_bytes
from bcgprof.vocab import Mode


@dataclass
class ModeLedger:
    mode: str
    rank: int
    buckets: int  # rows explained (ok or not)
    device_used_bytes: int
    pool_bytes: int
    retained_output_bytes: int
    segments: int
    graph_nodes: Optional[int]
    causes: Optional[dict[str, int]]  # None for reports written before the ledger columns
    kv_tokens: Optional[int] = None  # device_used_bytes / KV bytes per token


@dataclass
class ExecutableFit:
    """non_torch_delta ~ bytes_per_graph x executables + bytes_per_node x nodes, over the rows used
    (one executable per segment, unless ``shared``)."""

    rows: int
    bytes_per_graph: float
    bytes_per_node: float
    rms_residual_bytes: float
    r2: Optional[float]  # 1 - SS_res / SS_tot; None when the deltas do not vary
    fitted_bytes: int  # the fit summed over the rows
    measured_bytes: int  # the non-torch deltas summed over the same rows
    first_buckets_excluded: bool  # each mode's first bucket carries one-off driver costs
    # False when every row has the same nodes per graph, or executables are shared: then only
    # bytes_per_graph is fitted
    separable: bool = True
    # executables shared by segments of one signature (--executables per-signature): the fit is
    # per executable instantiated, whose kernel nodes the rows do not count
    shared: bool = False


@dataclass
class FloorSites:
    mode: str
    bucket: int
    pool_bytes: int
    peak_live_bytes: int
    slack_bytes: int
    sites: list[tuple[str, int]] = field(default_factory=list)  # largest first


@dataclass
class Explanation:
    report: Report
    modes: list[ModeLedger]
    fit: Optional[ExecutableFit]
    floor: Optional[FloorSites]
    sentences: list[str]
    notes: list[str]  # what it cannot tell, and why
    kv_bytes_per_token: Optional[int]
    kv_formula: str = ""


def _sum_causes(rows: list[BucketRecord]) -> Optional[dict[str, int]]:
    total = dict.fromkeys(CAUSES, 0)
    for r in rows:
        c = causes_of(r)
        if c is None:
            return None
        for k, v in c.items():
            total[k] += v
    return total


# ---------------------------------------------------------------- KV cache


def kv_bytes_per_token(report: Report) -> tuple[Optional[int], str]:
    """KV-cache bytes one token takes in the captured stack, and how it was computed.

    ``layers x 2 (K and V) x KV heads x head dim x dtype bytes``, over the report's layers,
    every layer counted as full attention (an engine that gives sliding-window layers a
    smaller pool needs less). From run.json when the capture recorded it, else from the
    model's preset config.
    """
    recorded = (
        report.run.extra.get("kv_bytes_per_token") if isinstance(report.run.extra, dict) else None
    )
    # true is no byte count
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded > 0:
        return recorded, str(report.run.extra.get("kv_formula", "recorded at capture"))
    # The model presets load here, not with this module: compare and gate use its ledger alone.
    from bcgprof.spec import resolve_model
    from bcgprof.spec.kv import kv_bytes_per_token as token_bytes
    from bcgprof.spec.kv import kv_formula

    try:
        spec = resolve_model(report.run.model)
        if spec.config_hash != report.run.config_hash:
            return None, ""
        shape = spec.attention
        width = dtypes.dtype_bytes(report.run.dtype or spec.dtype)
    except (BcgprofError, KeyError, TypeError, ValueError):
        # no such model here, or not this report's
        return None, ""
    layers = int(report.run.layers)
    return (
        token_bytes(layers, shape.num_kv_heads, shape.head_dim, width),
        kv_formula(layers, shape.num_kv_heads, shape.head_dim, width),
    )


# ---------------------------------------------------------------- the executable fit


def fit_executables(rows: list[BucketRecord]) -> Optional[ExecutableFit]:
    """Fit non-torch growth to graphs and nodes; None when too few rows carry node counts."""
    # numpy, imported only when a command fits
    from bcgprof.analysis.predict.fit import (
        least_squares,
    )

    usable = [r for r in rows if r.status == "ok" and r.graph_nodes is not None and r.segments > 0]
    later = [r for r in usable if r.order > 0]
    excluded = len(later) >= 3
    data = later if excluded else usable
    if len(data) < 2:
        return None
    # Shared executables: a bucket's cost is the executables it instantiated, not its segments,
    # and its node count is every segment's, not the executables'.
    shared = any(r.executables is not None and r.executables != r.segments for r in data)
    graphs = [
        float(r.executables if shared and r.executables is not None else r.segments) for r in data
    ]
    nodes = [float(r.graph_nodes or 0) for r in data]  # every usable row has its node count
    ys = [float(r.non_torch_delta_bytes) for r in data]
    # With the same nodes per graph in every row, graphs and nodes cannot be told apart:
    # fit a cost per graph (its nodes included) only.
    separable = not shared and (
        len({round(n / g, 6) for g, n in zip(graphs, nodes, strict=True) if g}) > 1
    )
    fit = least_squares([graphs, nodes if separable else [0.0] * len(data)], ys, nonnegative=True)
    a, b = fit.coef
    fitted = [a * g + b * n for g, n in zip(graphs, nodes, strict=True)]
    ss_res = math.fsum((y - f) ** 2 for y, f in zip(ys, fitted, strict=True))
    mean = sum(ys) / len(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys)
    return ExecutableFit(
        rows=len(data),
        bytes_per_graph=a,
        bytes_per_node=b,
        rms_residual_bytes=(ss_res / len(ys)) ** 0.5,
        r2=(1.0 - ss_res / ss_tot) if ss_tot > 0 else None,
        fitted_bytes=round(sum(fitted)),
        measured_bytes=int(sum(ys)),
        first_buckets_excluded=excluded,
        separable=separable,
        shared=shared,
    )


# ---------------------------------------------------------------- the explanation


def _groups(report: Report) -> dict[tuple[str, int], list[BucketRecord]]:
    out: dict[tuple[str, int], list[BucketRecord]] = {}
    for r in report.buckets:
        out.setdefault((r.mode, r.rank), []).append(r)
    return {
        k: sorted(v, key=lambda r: r.order)
        for k, v in sorted(out.items(), key=lambda kv: (mode_index(kv[0][0]), kv[0][1]))
    }


def _floor_sites(report: Report) -> Optional[FloorSites]:
    rows = [s for s in report.sites if s.rank == 0]
    if not rows:
        return None
    mode = Mode.FLOOR.value if any(s.mode == Mode.FLOOR for s in rows) else rows[0].mode
    rows = [s for s in rows if s.mode == mode]
    live = [s for s in rows if s.kind == "site"]
    slack = sum(s.bytes for s in rows if s.kind == "slack")
    peak = sum(s.bytes for s in live)
    return FloorSites(
        mode=mode,
        bucket=rows[0].bucket,
        pool_bytes=peak + slack,
        peak_live_bytes=peak,
        slack_bytes=slack,
        sites=sorted(((s.site, s.bytes) for s in live), key=lambda x: -x[1]),
    )


def explain_report(report: Report) -> Explanation:
    notes: list[str] = []
    if report.run.status != "complete":
        notes.append(
            f"this report is {report.run.status}: it explains the {len(report.buckets)} finished "
            "rows only"
        )
    kv, formula = kv_bytes_per_token(report)
    if kv is None:
        notes.append(
            "KV bytes per token unknown (the model's config is not a preset this bcgprof knows): "
            "no KV-token figures"
        )
    modes: list[ModeLedger] = []
    groups = _groups(report)
    for (mode, rank), rows in groups.items():
        nodes = [r.graph_nodes for r in rows]
        ledger = ModeLedger(
            mode=mode,
            rank=rank,
            buckets=len(rows),
            device_used_bytes=sum(r.device_used_delta_bytes for r in rows),
            pool_bytes=rows[-1].pool_bytes,
            retained_output_bytes=sum(r.retained_output_bytes for r in rows),
            segments=sum(r.segments for r in rows),
            graph_nodes=None if None in nodes else sum(n for n in nodes if n is not None),
            causes=_sum_causes(rows),
        )
        if kv:
            ledger.kv_tokens = ledger.device_used_bytes // kv
        modes.append(ledger)
    if modes and all(m.causes is None for m in modes):
        notes.append(
            "this report has no ledger columns (it was written before them): causes cannot be "
            "told apart; "
            "re-capture to get them"
        )
    fit = fit_executables([r for r in report.buckets if r.rank == 0])
    if fit is None:
        notes.append("too few buckets with graph node counts to fit graph-executable memory")
    floor = _floor_sites(report)
    if floor is None:
        notes.append(
            "no sites.csv (no floor mode, or a report written before it): the floor's pool cannot "
            "be "
            "broken down by code site"
        )
    explanation = Explanation(report, modes, fit, floor, [], notes, kv, formula)
    explanation.sentences = _sentences(explanation, groups)
    return explanation


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole else "-"


def _sentences(exp: Explanation, groups: dict) -> list[str]:
    out: list[str] = []
    by_mode = {m.mode: m for m in exp.modes if m.rank == 0}
    pb, shared = groups.get((Mode.PER_BUCKET, 0)), groups.get((Mode.SHARED, 0))
    if pb and all(causes_of(r) is not None for r in pb):
        outputs = sum(r.pool_output_bytes or 0 for r in pb)
        later_outputs = sum(r.pool_output_bytes or 0 for r in pb if r.order > 0)
        later_growth = sum(r.pool_delta_bytes for r in pb if r.order > 0)
        fitted = max(0, later_outputs - later_growth)
        text = (
            f"per-bucket outputs total {fmt_bytes(outputs)}; after the largest bucket they added "
            f"{fmt_bytes(later_outputs)} while the pool grew {fmt_bytes(later_growth)}, so "
            f"{fmt_bytes(fitted)} fitted in pool space the largest bucket had freed"
        )
        if shared and all(causes_of(r) is not None for r in shared):
            pool_saving = pb[-1].pool_bytes - shared[-1].pool_bytes
            outside = sum(r.outside_pool_delta_bytes for r in shared) - sum(
                r.outside_pool_delta_bytes for r in pb
            )
            executables = sum(r.non_torch_delta_bytes for r in shared) - sum(
                r.non_torch_delta_bytes for r in pb
            )
            saving = (
                by_mode[Mode.PER_BUCKET].device_used_bytes - by_mode[Mode.SHARED].device_used_bytes
            )
            text += (
                f"; sharing the output saves {fmt_bytes(pool_saving)} of pool, less its own "
                f"{fmt_bytes(outside)} buffer outside the pool"
                + (
                    f" and {fmt_bytes(executables, signed=True)} of graph executables"
                    if executables
                    else ""
                )
                + f": {fmt_bytes(saving, signed=True)} of device memory in all"
            )
        out.append(text)
    if Mode.SHARED_LARGEST in by_mode and Mode.PER_BUCKET in by_mode:
        diff = (
            by_mode[Mode.PER_BUCKET].device_used_bytes
            - by_mode[Mode.SHARED_LARGEST].device_used_bytes
        )
        out.append(
            "keeping the largest bucket's own output as the shared buffer saves "
            f"{fmt_bytes(diff)} against "
            f"per-bucket outputs"
            if diff >= 0
            else "keeping the largest bucket's own output as the shared buffer costs "
            f"{fmt_bytes(-diff)} more "
            "than per-bucket outputs"
        )
    if exp.fit is not None:
        f = exp.fit
        later = [
            r
            for rows in groups.values()
            for r in rows
            if r.order > 0 and r.rank == 0 and r.pool_delta_bytes == 0
        ]
        per_bucket = (sum(r.non_torch_delta_bytes for r in later) / len(later)) if later else None
        cost = (
            f"{f.bytes_per_graph / 1024:.1f} KiB per executable instantiated (segments of one "
            "signature share one; its kernel nodes included)"
            if f.shared
            else f"{f.bytes_per_graph / 1024:.1f} KiB per graph + {f.bytes_per_node:.0f} B per "
            "kernel node"
            if f.separable
            else f"{f.bytes_per_graph / 1024:.1f} KiB per graph, its kernel nodes included (every "
            "bucket has the same "
            "nodes per graph, so a per-node cost cannot be told apart)"
        )
        text = (
            f"graph executables: {cost} fits the non-torch growth of {f.rows} buckets"
            + (
                " (each mode's first bucket left out: it carries one-off driver costs)"
                if f.first_buckets_excluded
                else ""
            )
            + f" with an rms residual of {fmt_bytes(int(f.rms_residual_bytes))}; the fit gives "
            f"{fmt_bytes(f.fitted_bytes)} of the measured {fmt_bytes(f.measured_bytes)} "
            f"({_pct(f.fitted_bytes, f.measured_bytes)})"
        )
        if per_bucket is not None:
            text += (
                f"; this is why device memory still grows by about {fmt_bytes(int(per_bucket))} a "
                "bucket after "
                f"the pool has stopped growing ({len(later)} such buckets)"
            )
        out.append(text)
    if exp.floor is not None:
        fl = exp.floor
        top = ", ".join(f"{site} {fmt_bytes(b)}" for site, b in fl.sites[:3])
        out.append(
            f"the floor's pool ({fl.mode}, bucket {fl.bucket}) is {fmt_bytes(fl.pool_bytes)}: "
            f"{fmt_bytes(fl.peak_live_bytes)} live at its peak (largest: {top}) plus "
            f"{fmt_bytes(fl.slack_bytes)} ({_pct(fl.slack_bytes, fl.pool_bytes)}) of allocator "
            "slack"
        )
    if exp.kv_bytes_per_token:
        parts = [
            f"{m.mode} {m.kv_tokens:,}"
            for m in exp.modes
            if m.rank == 0 and m.kv_tokens is not None
        ]
        if parts:
            out.append(
                f"in tokens of KV cache displaced ({fmt_bytes(exp.kv_bytes_per_token)} a token: "
                f"{exp.kv_formula}): " + ", ".join(parts)
            )
    return out


def explanation_json(exp: Explanation) -> dict:
    """The JSON contract of `bcgprof explain -f json`."""
    modes = []
    for m in exp.modes:
        modes.append(
            {
                "mode": m.mode,
                "rank": m.rank,
                "buckets": m.buckets,
                "device_used_bytes": m.device_used_bytes,
                "causes": m.causes,
                "pool_bytes": m.pool_bytes,
                "retained_output_bytes": m.retained_output_bytes,
                "segments": m.segments,
                "graph_nodes": m.graph_nodes,
                "kv_tokens": m.kv_tokens,
            }
        )
    floor = None
    if exp.floor is not None:
        f = exp.floor
        floor = {
            "mode": f.mode,
            "bucket": f.bucket,
            "pool_bytes": f.pool_bytes,
            "peak_live_bytes": f.peak_live_bytes,
            "slack_bytes": f.slack_bytes,
            "sites": [{"site": s, "bytes": b} for s, b in f.sites],
        }
    fit = None
    if exp.fit is not None:
        ef = exp.fit
        fit = {
            "rows": ef.rows,
            "bytes_per_graph": ef.bytes_per_graph,
            "bytes_per_node": ef.bytes_per_node,
            "rms_residual_bytes": ef.rms_residual_bytes,
            "r2": ef.r2,
            "fitted_bytes": ef.fitted_bytes,
            "measured_bytes": ef.measured_bytes,
            "first_buckets_excluded": ef.first_buckets_excluded,
            "separable": ef.separable,
        }
    return {
        "report": str(exp.report.path),
        "status": exp.report.run.status,
        "modes": modes,
        "floor": floor,
        "executable_fit": fit,
        "kv_bytes_per_token": exp.kv_bytes_per_token,
        "kv_formula": exp.kv_formula,
        "sentences": exp.sentences,
        "notes": exp.notes,
        "causes": {k: {"label": v[0], "meaning": v[1]} for k, v in CAUSES.items()},
    }
